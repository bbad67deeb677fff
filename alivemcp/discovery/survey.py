"""``alivemcp discover``: what each source would yield now, read once, without the daemon.

:func:`survey` refreshes every source of a loaded config once; :func:`render_table` and
:func:`as_json` show the answers (checks with their targets, skipped entries by reason with
examples, the error of a source that failed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alivemcp.config import LoadedConfig, ResolvedCheck
from alivemcp.discovery.manager import DiscoveryManager, SourceSnapshot
from alivemcp.hygiene.untrusted import clean_text
from alivemcp.plumbing.http import HttpClients

__all__ = ["Survey", "as_json", "render_table", "survey"]


@dataclass(frozen=True, slots=True)
class Survey:
    """One source read once: how it went, and the checks it yields."""

    snapshot: SourceSnapshot
    checks: Mapping[str, ResolvedCheck]

    @property
    def ok(self) -> bool:
        return not self.snapshot.failing


async def survey(loaded: LoadedConfig, base_dir: Path, http: HttpClients) -> list[Survey]:
    """Every ``discovery:`` source of ``loaded`` read once, in config order."""

    async def keep(source: str, checks: Mapping[str, ResolvedCheck]) -> None:
        return None

    manager = DiscoveryManager(loaded, http, keep, base_dir=base_dir)
    await manager.refresh_all()
    return [Survey(snap, manager.checks(snap.name)) for snap in manager.snapshot()]


def _target(check: ResolvedCheck) -> str:
    return check.discovered.target if check.discovered is not None else ""


def render_table(surveys: Sequence[Survey]) -> str:
    """A few lines per source: its outcome, then one line per check (name, then target)."""
    if not surveys:
        return "no discovery sources configured\n"
    lines: list[str] = []
    for item in surveys:
        snap = item.snapshot
        head = f"{snap.name} ({snap.kind}): "
        if snap.failing:
            head += f"FAILED ({snap.last_error_reason}): {snap.last_error}"
        else:
            head += f"{snap.targets} target(s)"
            if snap.skipped:
                counts = ", ".join(f"{r} {n}" for r, n in sorted(snap.skipped.items()))
                head += f", skipped {sum(snap.skipped.values())} ({counts})"
        lines.append(head)
        if snap.failing:
            lines.append("")
            continue
        width = max((len(name) for name in item.checks), default=0)
        for name, check in sorted(item.checks.items()):
            lines.append(f"  {clean_text(name):<{width}}  {clean_text(_target(check))}")
        for reason, examples in sorted(snap.skipped_examples.items()):
            for example in examples:
                lines.append(f"  skipped {reason}: {example}")
        lines.append("")
    return "\n".join(lines)


def as_json(surveys: Sequence[Survey]) -> list[dict[str, Any]]:
    """One object per source: its outcome, its checks (name, target, labels, origin), the
    skipped entries by reason with examples, and the error when it failed."""
    out = []
    for item in surveys:
        snap = item.snapshot
        out.append(
            {
                "name": snap.name,
                "kind": snap.kind,
                "ok": not snap.failing,
                "error": (
                    {"reason": snap.last_error_reason, "message": snap.last_error}
                    if snap.failing
                    else None
                ),
                "targets": [
                    {
                        "check": name,
                        "probe": check.probe_type,
                        "labels": dict(check.labels),
                        "discovered": (
                            check.discovered.as_json() if check.discovered is not None else None
                        ),
                    }
                    for name, check in sorted(item.checks.items())
                ],
                "skipped": dict(sorted(snap.skipped.items())),
                "skipped_examples": {k: list(v) for k, v in sorted(snap.skipped_examples.items())},
            }
        )
    return out
