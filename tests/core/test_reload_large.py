"""A large config is loaded for a reload in a child process (alivemcp.app.configload), and the
reload behaves exactly as one loaded in the daemon: an invalid file is refused with its
errors named and the old config keeps running; a good one is applied, ``${VAR}`` references
resolve from the daemon's environment, and the new config's secrets are redacted by the
daemon (they were found by the child: the daemon must register them itself)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import yaml

from alivemcp.app.configload import LOAD_IN_CHILD_BYTES, load_in_child
from tests.support import DaemonProcess

SECRET = "s3cr3t-token-value-4242"


def write_large(path: Path, checks: list[dict[str, object]], text: str = "") -> None:
    doc = {"logging": {"format": "json"}, "data_dir": str(path.parent / "data"), "checks": checks}
    body = text or yaml.safe_dump(doc)
    # Made large by a comment: the size, not the number of checks, picks the child.
    padding = ("# " + "x" * 98 + "\n") * (LOAD_IN_CHILD_BYTES // 100 + 1)
    path.write_text(body.replace("checks:", padding + "checks:", 1))
    assert path.stat().st_size >= LOAD_IN_CHILD_BYTES


def test_a_large_config_reloads_through_the_child_refusing_errors_and_keeping_secrets(
    tmp_path: Path,
) -> None:
    config = tmp_path / "c.yaml"
    static = {"name": "a", "probe": "test_static", "interval": 0.5, "params": {"reason": "first"}}
    write_large(config, [static])
    with DaemonProcess(config, env={"PROBE_SECRET": SECRET}) as d:
        d.wait_for(lambda: d.status_of("a").get("reason") == "first", what="a runs")

        write_large(config, [], text="checks: [{name: a, probe: test_static, intervall: 1}]\n")
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: "alivemcp_config_last_reload_successful 0.0" in d.get("/metrics")[1],
            what="failed reload metric",
        )
        assert "checks[0].intervall: unknown field; did you mean 'interval'?" in d.logs()
        assert d.status_of("a").get("reason") == "first"  # the old config runs on

        write_large(
            config,
            [
                {**static, "params": {"reason": "second"}},
                {
                    "name": "b",
                    "probe": "test_static",
                    "interval": 0.5,
                    "params": {"reason": "leaky", "secret_in_reason": "${PROBE_SECRET}"},
                },
            ],
        )
        d.signal(signal.SIGHUP)
        d.wait_for(
            lambda: "alivemcp_config_last_reload_successful 1.0" in d.get("/metrics")[1],
            what="successful reload",
        )
        d.wait_for(
            lambda: d.status_of("b").get("reason", "").startswith("leaky"),
            what="the new check runs",
        )
        assert d.status_of("b")["reason"] == "leaky [REDACTED]"
        d.wait_for(lambda: d.status_of("a").get("reason") == "second", what="a changed")
        assert '"loaded_in": "process"' in d.logs()
        seen = [d.get("/metrics")[1], d.get("/status")[1]]
        assert d.stop() == 0
        for text in [*seen, d.logs()]:
            assert SECRET not in text


def _loader_pids(path: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"alivemcp.app.configload" in cmdline and str(path).encode() in cmdline:
            pids.append(int(proc.name))
    return pids


async def test_a_cancelled_load_kills_its_child_and_a_finished_one_leaves_none(
    tmp_path: Path,
) -> None:
    # The child is started with Popen (vfork), not the loop's spawn: it must still be killed
    # when the reload is cancelled (a stop), and be gone when it finishes.
    path = tmp_path / "big.yaml"
    write_large(
        path, [{"name": f"c{i}", "probe": "test_noop", "interval": 60} for i in range(20_000)]
    )
    loaded = await load_in_child(path)
    assert len(loaded.checks) == 20_000 and _loader_pids(path) == []
    loading = asyncio.ensure_future(load_in_child(path))
    for _ in range(100):  # until the child runs
        await asyncio.sleep(0.01)
        if _loader_pids(path):
            break
    assert _loader_pids(path), "the loader child never started"
    loading.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await loading
    assert _loader_pids(path) == []  # killed, not left running


async def test_the_child_sends_back_the_running_checks_it_can_keep_not_copies(
    tmp_path: Path,
) -> None:
    # The daemon hands the child the running checks' digests; what the child finds unchanged
    # comes back as those running objects, so only the changed checks are ever unpickled.
    from alivemcp.config import load_config

    config = tmp_path / "c.yaml"
    checks: list[dict[str, object]] = [
        {"name": f"c{i}", "probe": "test_static", "interval": 30, "params": {"reason": "r"}}
        for i in range(5)
    ]
    write_large(config, checks)
    running = load_config(config).checks
    # c1's params change, c3's alert override appears, c4 goes, c5 is new, c0 moves last.
    changed = [dict(c) for c in checks[1:4]] + [dict(checks[0])]
    changed[0]["params"] = {"reason": "other"}
    changed[2]["alert"] = {"failures_to_fire": 3}
    changed.append({"name": "c5", "probe": "test_static", "interval": 30})
    write_large(config, changed)
    loaded = await load_in_child(config, running)
    by_name = {c.name: c for c in loaded.checks}
    assert [c.name for c in loaded.checks] == ["c1", "c2", "c3", "c0", "c5"]
    assert by_name["c0"] is running[0] and by_name["c2"] is running[2]
    for name in ("c1", "c3", "c5"):
        assert all(by_name[name] is not r for r in running), name
    assert by_name["c1"].params.reason == "other"  # type: ignore[attr-defined]
    assert by_name["c3"].alert is not None and by_name["c3"].alert.failures_to_fire == 3
    # Without running checks, every check is a fresh copy.
    fresh = await load_in_child(config)
    assert all(c is not r for c in fresh.checks for r in running)
    assert [c.fingerprint() for c in fresh.checks] == [c.fingerprint() for c in loaded.checks]


async def test_checks_from_the_child_share_their_equal_label_sets_across_frames(
    tmp_path: Path,
) -> None:
    # Pickle shares an object within a frame only: the daemon shares what the frames repeat.
    from alivemcp.app.configload import CHECKS_PER_FRAME

    config = tmp_path / "c.yaml"
    count = 2 * CHECKS_PER_FRAME + 5
    write_large(
        config,
        [
            {
                "name": f"c{i}",
                "probe": "test_static",
                "interval": 30,
                "labels": {"team": "core" if i % 2 else "edge"},
            }
            for i in range(count)
        ],
    )
    loaded = await load_in_child(config)
    assert len(loaded.checks) == count
    assert len({id(c.labels) for c in loaded.checks}) == 2
    assert len({id(c.interval) for c in loaded.checks}) == 1
    assert len({id(c.probe_type) for c in loaded.checks}) == 1


async def callbacks_scheduled_before_have_run(rounds: int) -> None:
    """Until the loop has run every callback scheduled so far, and those they scheduled,
    ``rounds`` deep: a transport's late close is such a callback (``close()`` schedules it)."""
    loop = asyncio.get_running_loop()
    for _ in range(rounds):
        ran = loop.create_future()
        loop.call_soon(ran.set_result, None)
        await ran


def test_a_load_in_a_child_leaves_no_descriptor_to_close_twice_on_the_daemons_loop(
    tmp_path: Path,
) -> None:
    # On uvloop (the daemon's loop) a read transport closes its descriptor itself, a loop turn
    # after close(); the loader once closed the pipe's file object as well. The number freed
    # in between went to whatever opened next (a scrape's connection, reset by the late close).
    import os

    import uvloop

    from alivemcp.config import ConfigError

    good = tmp_path / "good.yaml"
    write_large(good, [{"name": "a", "probe": "test_static", "interval": 30}])
    bad = tmp_path / "bad.yaml"
    write_large(bad, [], text="checks: [{name: a, probe: test_static, intervall: 1}]\n")

    async def loads_then_opens(path: Path) -> None:
        with contextlib.suppress(ConfigError):
            await load_in_child(path)
        # The lowest free numbers: among them the ones a pipe closed early would have left.
        with contextlib.ExitStack() as stack:
            witnesses = [
                stack.enter_context((tmp_path / f"witness{i}").open("wb")) for i in range(16)
            ]
            opened = [os.fstat(w.fileno()) for w in witnesses]
            await callbacks_scheduled_before_have_run(rounds=3)
            for witness, before in zip(witnesses, opened, strict=True):
                after = os.fstat(witness.fileno())  # EBADF once closed under it
                assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        for path in (good, bad, good):
            runner.run(loads_then_opens(path))
