"""A reload gives back what the checks it replaced held.

The daemon freezes its long-lived objects out of the collector's reach after a load (a full
collection over 100,000 checks paused the loop for a second), so anything a reload retires in a
reference cycle is never collected: each reload of a changed config kept every old check's
scheduler entry, probe handle, probe and context. The daemon runs in a child process (the
collector's state is process-wide), reloads twice with every check changed, and then lets the
collector see everything: nothing of the engine's may be garbage that only it could free.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support import subprocess_env

CHILD = textwrap.dedent("""
    import asyncio, collections, gc, json, sys, time
    from pathlib import Path
    from alivemcp.config import load_config
    from alivemcp.app.daemon import Daemon
    from alivemcp.hygiene.logging import configure_logging

    path = Path(sys.argv[1])

    def write(label):
        path.write_text(
            f"data_dir: {path.parent / 'data'}\\n"
            "server: {listen: '127.0.0.1:0'}\\n"
            "history: {enabled: true}\\n"
            "checks:\\n" + "".join(
                f"  - {{name: c{i}, probe: test_noop, interval: 2, labels: {{v: '{label}'}}}}\\n"
                for i in range(300))
            # A real probe type too, failing fast against a closed port (its client, its
            # connection pool and its error path are what a replaced check leaves behind).
            + "".join(
                f"  - {{name: m{i}, probe: mcp_endpoint, interval: 2, timeout: 1,"
                f" labels: {{v: '{label}'}}, params: {{url: 'http://127.0.0.1:9/mcp{i}'}}}}\\n"
                for i in range(20)))

    async def main():
        configure_logging("warning", "json")
        write("1")
        loaded = load_config(path)
        # One-off garbage of the first load (the probe types' entry points, schemas made
        # on first use) is not what a reload leaves: collected before the daemon exists.
        gc.collect()
        daemon = Daemon(loaded, path)
        del loaded

        async def every_check_ran_since(moment):  # and set up its probe
            deadline = time.monotonic() + 60
            while not all(s.last is not None and s.last.started_at >= moment
                          for s in daemon.store.states()):
                assert time.monotonic() < deadline, "not every check ran"
                await asyncio.sleep(0.05)

        started = time.time()
        await daemon._start()
        await every_check_ran_since(started)
        for label in ("2", "3"):
            write(label)
            reloaded = time.time()
            assert await daemon.reload()
            await every_check_ran_since(reloaded)
        runs = sum(sum(state.runs) for state in daemon.store.states())
        gc.unfreeze()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kinds = collections.Counter(
            f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
        daemon._stopping = True
        await daemon.scheduler.stop(1)
        print(json.dumps({"runs": runs, "garbage": dict(kinds)}))

    asyncio.run(main())
""")


def test_checks_replaced_by_reloads_leave_no_garbage_only_the_collector_could_free(
    tmp_path: Path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "c.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["runs"] >= 320  # the checks ran, so their probes were set up
    engine = {
        k: n
        for k, n in report["garbage"].items()
        if k.startswith(("alivemcp.", "alivemcp_testprobes.", "probes."))
    }
    assert engine == {}
    # Whatever else is left (a closure or two) must not grow with the checks replaced.
    assert sum(report["garbage"].values()) < 50, report["garbage"]
