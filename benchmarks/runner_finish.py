"""Benchmark: the runner's boundary on one realistic MCP result, part by part.

Every probe run ends in the runner: its result is validated against the probe type's declared
observations, and its reason, labeled observations and details are redacted and cleaned
(``alivemcp/engine/runner.py``, ``redact.py``, ``untrusted.py``). This times each part on the result
an ``mcp_endpoint`` run against the SDK's stateful server returns (server name and version,
five label values, six details), with fresh string objects on every iteration (as a real run
has: its strings come from a JSON parse), so no part benefits from cached string hashes.

Wall time on a shared machine is noisy; for a before/after comparison count instructions
instead, e.g. the difference between two iteration counts under callgrind::

    .venv/bin/python benchmarks/runner_finish.py                       # µs per part
    valgrind --tool=callgrind --callgrind-out-file=/tmp/a .venv/bin/python \\
        benchmarks/runner_finish.py --only all --iterations 0
    valgrind --tool=callgrind --callgrind-out-file=/tmp/b .venv/bin/python \\
        benchmarks/runner_finish.py --only all --iterations 2000
    # instructions per run: (totals of /tmp/b - totals of /tmp/a) / 2000, minus the same
    # for --only copy (building the fresh result itself)
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alivemcp.engine.runner import _clean_labeled, _validated
from alivemcp.hygiene.redact import redact_text
from alivemcp.hygiene.untrusted import clean_details, clean_text
from alivemcp.probe import LabeledObservation, ProbeResult, Status
from probes.mcp_endpoint import McpEndpointProbe

_FACTS = {
    "transport": "streamable_http",
    "protocol_version": "2025-11-25",
    "server_name": "alivemcp-test",
    "server_version": "1.2.3",
    "tools_hash": "8f38e8871f6ab3ad",
}
#: What a steady-state run against the SDK's stateful server returns (tool names are only in
#: details on the first run and when they change).
RESULT = ProbeResult(
    Status.UP,
    "MCP 2025-11-25 over streamable_http: alivemcp-test 1.2.3, 2 tools",
    {
        "total_seconds": 0.0486,
        "connect_seconds": 0.0006,
        "initialize_seconds": 0.0183,
        "tools_list_seconds": 0.0178,
        "tools": 2.0,
    },
    (LabeledObservation("mcp_server_info", 1.0, dict(_FACTS)),),
    {**_FACTS, "delete_status": 200},
)
_DECLARED = McpEndpointProbe.observables


def _all(result: ProbeResult) -> Any:
    checked = _validated(result, _DECLARED)
    return (
        clean_text(redact_text(checked.reason)),
        _clean_labeled(checked.labeled_observations),
        clean_details(checked.details, redacted=True) if checked.details else None,
    )


PARTS: dict[str, Callable[[ProbeResult], Any]] = {
    "copy": lambda result: None,
    "validate": lambda result: _validated(result, _DECLARED),
    "reason": lambda result: clean_text(redact_text(result.reason)),
    "labeled": lambda result: _clean_labeled(result.labeled_observations),
    "details": lambda result: clean_details(result.details or {}, redacted=True),
    "all": _all,
}


def measure(part: str, iterations: int) -> float:
    """Seconds per iteration of ``part`` (building each fresh result included)."""
    blob = pickle.dumps(RESULT)
    run = PARTS[part]
    for _ in range(min(iterations, 200)):
        run(pickle.loads(blob))
    started = time.perf_counter()
    for _ in range(iterations):
        run(pickle.loads(blob))
    return (time.perf_counter() - started) / max(iterations, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--only", choices=sorted(PARTS), help="one part (for callgrind)")
    args = parser.parse_args()
    parts = [args.only] if args.only else list(PARTS)
    base = measure("copy", args.iterations) if "copy" in parts or not args.only else 0.0
    for part in parts:
        seconds = base if part == "copy" else measure(part, args.iterations)
        extra = "" if part == "copy" else f"  ({(seconds - base) * 1e6:7.2f} µs without the copy)"
        print(f"{part:<9} {seconds * 1e6:7.2f} µs per run{extra}")


if __name__ == "__main__":
    main()
