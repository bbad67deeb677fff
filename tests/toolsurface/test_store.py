"""The surface store (versions, approvals, changelog) on a real SQLite file."""

from __future__ import annotations

import threading
from pathlib import Path

from alivemcp.surface import Surface, build_surface
from alivemcp.toolsurface.store import SurfaceStore


def surface(*descriptions: str) -> Surface:
    return build_surface(
        [("tool", f"t{i}", {"name": f"t{i}", "description": d}) for i, d in enumerate(descriptions)]
    )


def test_a_version_is_stored_once_and_its_last_sight_moves(tmp_path: Path) -> None:
    store = SurfaceStore(tmp_path)
    s = surface("a")
    assert store.record("c", s, [], 10.0) == (True, 0)
    assert store.record("c", s, [], 20.0) == (False, 0)
    store.touch([("c", s.digest, 30.0)])
    [row] = store.versions("c")
    assert (row.digest, row.first_seen, row.last_seen, row.items) == (s.digest, 10.0, 30.0, 1)
    assert store.surface("c", s.digest) == s
    assert store.latest("c") == s.digest


def test_the_cap_prunes_the_oldest_but_never_the_approved(tmp_path: Path) -> None:
    store = SurfaceStore(tmp_path, max_versions=3)
    first = surface("v0")
    store.record("c", first, [], 0.0)
    store.approve("c", first.digest, 0.0, "cli")
    pruned = sum(store.record("c", surface(f"v{i}"), [], float(i))[1] for i in range(1, 8))
    kept = {row.digest for row in store.versions("c")}
    assert first.digest in kept
    assert len(kept) == 4  # the cap, plus the approved one it may not prune
    assert pruned == store.pruned("c") == 4


def test_approvals_are_seen_by_another_connection(tmp_path: Path) -> None:
    daemon, cli = SurfaceStore(tmp_path), SurfaceStore(tmp_path)
    s = surface("a")
    daemon.record("c", s, [], 1.0)
    mark = daemon.last_approval_id()
    made = cli.approve("c", s.digest, 2.0, "cli:alice")
    assert [a.id for a in daemon.approvals_after(mark)] == [made.id]
    assert daemon.approval("c") == made


def test_digest_prefixes_resolve_when_unique(tmp_path: Path) -> None:
    store = SurfaceStore(tmp_path)
    s = surface("a")
    store.record("c", s, [], 1.0)
    assert store.resolve_digest("c", s.digest[:6]) == s.digest
    assert store.resolve_digest("c", "zz") is None
    assert store.resolve_digest("c", "%") is None


def test_changes_are_listed_newest_first_and_bounded(tmp_path: Path) -> None:
    store = SurfaceStore(tmp_path)
    for i in range(5):
        store.add_change(f"c{i % 2}", float(i), None, f"d{i}", {"i": i})
    assert [c.to_digest for c in store.changes(0.0)] == ["d4", "d3", "d2", "d1", "d0"]
    assert [c.to_digest for c in store.changes(2.0, check="c0")] == ["d4", "d2"]
    assert len(store.changes(0.0, limit=2)) == 2


def test_threads_each_get_their_connection(tmp_path: Path) -> None:
    store = SurfaceStore(tmp_path)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(20):
                store.record(f"c{n}", surface(f"{n}-{i}"), [], float(i))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert store.checks() == ["c0", "c1", "c2", "c3"]
