"""Discovery benchmark: N remotes listed by a local MCP registry, found and probed by the whole
daemon, side by side with the same checks written in a config file and changed by SIGHUP.

Run by hand (not a test):

  .venv/bin/python benchmarks/discovery.py                              # 15,000 remotes
  .venv/bin/python benchmarks/discovery.py --remotes 1000 --steady 20   # a smoke run

The parent starts ``--labs`` lab MCP servers (``alivemcp.testbed.mcp_lab``, each in its own
process; their stateless ``/json`` path answers the handshake fast, ``--delay-ms`` adds
latency) and a local registry (``alivemcp.testbed.mcp_registry``, in the parent's own event
loop) listing N servers, each with one streamable-http remote: a lab's ``/json?r=I``, one URL
per remote (the lab ignores the query), so one check each. The parent and the labs keep to the
cores the children do not use. Then one child per variant, one after the other, each running a
real :class:`~alivemcp.app.daemon.Daemon` (uvloop, history on) pinned to ``--cores``:

* ``registry source``: no checks in the file; one ``mcp_registry`` source (page_size 100,
  refresh 1h: the refreshes measured are triggered, as the refresh timer triggers them),
  template ``mcp_endpoint`` every ``--interval`` (60 s). ``allow_private_addresses: true``:
  the labs listen on 127.0.0.1, which the default (false) refuses. ``max_per_host: 100000``:
  every remote shares that one host, and the default of 4 runs in flight per host would
  throttle the benchmark to 4 at once (that politeness is for real hosting providers).
* ``file + SIGHUP``: the same N checks (names, URLs, interval, labels) written in a config
  file, today's way.

Each child measures:

1. start-up: (registry) the first full crawl, read and build (the source's
   ``last_duration_seconds``, as ``GET /api/v1/discovery`` shows it) and when its checks were
   in the engine; (both) the time until every check had a first result (``/status`` summary
   ``pending == 0``, counted in the process);
2. a steady window (``--steady`` s, from half an interval after the last first result, when
   every check runs on its grid): process CPU (every thread) as a share of one core, runs a
   second and CPU per run, scheduling lateness p99, longest event-loop stall, RSS; the verdicts
   at its end (all ``up`` unless the labs could not keep up);
3. a change that changes nothing: (registry) a refresh of the same list; (file) a reload of
   the same file;
4. a churn of ``--churn`` (1 %): that share of the remotes, evenly spread (every 100th),
   moved to a new URL (another query), the same set in both: (registry) the registry's list
   changed, then a refresh (``DiscoveryManager.refresh``); (file) the file rewritten with the
   same moves, then ``Daemon.reload`` (what SIGHUP runs). The whole change (registry crawl,
   or file load, included); the daemon's part of it, applying the change (registry: the
   hand-over to the engine that logs "discovered checks changed"; file: the reload but the
   file's load); the longest loop stall and the process CPU during the whole change; and the
   time from the start of the applying until every moved check had a result of a run started
   after that.

Loop stalls are measured as ``benchmarks/engine.py`` measures them: a task sleeping 5 ms at a
time; a wake-up later than that is a stall of the difference. On a shared machine a stall also
counts the time the daemon was not scheduled at all, so each stall figure has a second one
beside it: the longest time the event-loop thread itself was busy (its CPU time) in one such
tick, what the daemon's own work held the loop for.

Goals (issue #35): a refresh changing 1 % applies in <= 1 s with no loop stall over 50 ms;
15,000 remotes at 60 s cost the daemon <= 0.5 of a core and <= 1 GB RSS (the issue's remotes
answer over HTTPS in 50 ms: ``--https --delay-ms 50``; ``--variants registry`` runs the
registry source alone).

  .venv/bin/python benchmarks/discovery.py --https --delay-ms 50 --labs 3 --variants registry
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SOURCE = "registry"
VARIANTS = {"registry": "registry source", "file": "file + SIGHUP"}


def server_name(i: int) -> str:
    return f"io.bench/s{i:05d}"


def check_name(i: int) -> str:
    return f"{SOURCE}/{server_name(i)}"


def moved(remotes: int, churn: float) -> list[int]:
    """The remotes the churn moves: evenly spread, ``churn`` of them."""
    step = max(1, round(1 / churn))
    return list(range(0, remotes, step))


def remote_url(labs: list[str], i: int, delay_ms: int, *, churned: bool = False) -> str:
    path = f"/delayed/{delay_ms}/json" if delay_ms else "/json"
    return f"{labs[i % len(labs)]}{path}?r={i}" + ("&moved=1" if churned else "")


# -- parent: the labs, the registry, one child per variant -------------------------------------


def common_config(work: Path) -> str:
    return (
        f"data_dir: {work / 'data'}\n"
        "server: {listen: '127.0.0.1:0'}\n"
        "logging: {level: info, format: json}\n"
        "history: {enabled: true}\n"
    )


def tls_params(ca_file: Path | None) -> str:
    """The check's ``tls`` params (flow YAML, with a leading ", "): the labs' CA, when HTTPS."""
    return f", tls: {{ca_file: '{ca_file}'}}" if ca_file is not None else ""


def registry_config(work: Path, url: str, interval: float, ca_file: Path | None = None) -> str:
    params = f", params: {{{tls_params(ca_file)[2:]}}}" if ca_file is not None else ""
    return common_config(work) + (
        "discovery:\n"
        f"  - name: {SOURCE}\n"
        f"    mcp_registry: {{url: '{url}', refresh: 1h, page_size: 100,\n"
        "                   allow_private_addresses: true}\n"
        "    max_per_host: 100000\n"
        f"    template: {{probe: mcp_endpoint, interval: {interval:g}{params}}}\n"
    )


def file_config(work: Path, urls: list[str], interval: float, ca_file: Path | None = None) -> str:
    """The registry's checks as a hand-written file: the names, labels and params that
    discovery gives them."""
    lines = [common_config(work), "checks:\n"]
    tls = tls_params(ca_file)
    for i, url in enumerate(urls):
        lines.append(
            f"  - {{name: {check_name(i)}, probe: mcp_endpoint, interval: {interval:g}, "
            f"labels: {{discovery: {SOURCE}, server: {server_name(i)}, version: 1.0.0, "
            f"remote: streamable-http}}, params: {{url: '{url}'{tls}}}}}\n"
        )
    return "".join(lines)


async def run_child(
    variant: str,
    config: Path,
    args: argparse.Namespace,
    work: Path,
    on_churn: Callable[[], Awaitable[None]],
) -> dict[str, Any]:
    """One child; ``on_churn`` is awaited when it asks for the churn (registry variant)."""
    log = work / f"{variant}.log"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        variant,
        "--config",
        str(config),
        *("--remotes", str(args.remotes), "--churn", str(args.churn)),
        *("--steady", str(args.steady), "--interval", str(args.interval)),
        *("--pin", ",".join(str(core) for core in args.pin)),
    ]
    print(f"[{VARIANTS[variant]}] {args.remotes} remotes ...", file=sys.stderr, flush=True)
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            cwd=REPO,
        )
        assert proc.stdout is not None and proc.stdin is not None
        last = ""
        async for raw in proc.stdout:
            line = raw.decode().strip()
            if line == "churn":
                await on_churn()
                proc.stdin.write(b"ok\n")
                await proc.stdin.drain()
            elif line.startswith("phase "):
                print(f"[{VARIANTS[variant]}] {line[6:]}", file=sys.stderr, flush=True)
            elif line:
                last = line
        code = await proc.wait()
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(("stall ", "full gc ")):
            print(f"[{VARIANTS[variant]}] {line}", file=sys.stderr, flush=True)
    if code != 0 or not last.startswith("{"):
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"[{variant}] child failed ({code}):\n{tail}")
    return dict(json.loads(last))


ROWS: list[tuple[str, str, str]] = [
    # (key, what, format)
    ("targets", "checks", "{:.0f}"),
    ("crawl_s", "first full crawl: registry read + checks built (s)", "{:.2f}"),
    ("crawl_pages", "  registry pages a crawl", "{:.0f}"),
    ("in_engine_s", "checks in the engine after start (s)", "{:.2f}"),
    ("first_results_s", "every check had a first result after (s)", "{:.1f}"),
    ("startup_stall_ms", "longest loop stall after the daemon started (ms)", "{:.0f}"),
    ("startup_stall_ms_busy", "  longest busy loop tick, its CPU (ms)", "{:.0f}"),
    ("steady_runs_per_s", "steady: runs a second", "{:.0f}"),
    ("cpu_share", "steady: daemon CPU, share of one core", "{:.0%}"),
    ("cpu_per_run_ms", "steady: daemon CPU per run (ms)", "{:.3f}"),
    ("steady_p99_ms", "steady: lateness p99 (ms)", "{:.1f}"),
    ("steady_stall_ms", "steady: longest loop stall (ms)", "{:.0f}"),
    ("steady_stall_ms_busy", "  longest busy loop tick, its CPU (ms)", "{:.0f}"),
    ("steady_full_gcs", "steady: full garbage collections", "{:.0f}"),
    ("steady_full_gc_ms", "steady: longest full collection, CPU (ms)", "{:.0f}"),
    ("steady_up", "steady: checks up at its end", "{:.0f}"),
    ("steady_not_up", "steady: checks not up at its end", "{:.0f}"),
    ("rss_steady_mb", "steady: RSS (MB)", "{:.0f}"),
    ("same_s", "change nothing: refresh / reload (s)", "{:.2f}"),
    ("same_cpu_s", "  process CPU (s)", "{:.2f}"),
    ("same_stall_ms", "  longest loop stall (ms)", "{:.0f}"),
    ("same_stall_ms_busy", "  longest busy loop tick, its CPU (ms)", "{:.0f}"),
    ("churn_checks", "churn: checks moved", "{:.0f}"),
    ("churn_s", "churn: whole change, crawl or file load included (s)", "{:.2f}"),
    ("churn_apply_s", "churn: the daemon applying it (s)", "{:.3f}"),
    ("churn_cpu_s", "churn: process CPU, whole change (s)", "{:.2f}"),
    ("churn_stall_ms", "churn: longest loop stall, whole change (ms)", "{:.0f}"),
    ("churn_stall_ms_busy", "  longest busy loop tick, its CPU (ms)", "{:.0f}"),
    ("churn_apply_stall_ms", "churn: longest loop stall while applying (ms)", "{:.0f}"),
    ("churn_apply_stall_ms_busy", "  longest busy loop tick, its CPU (ms)", "{:.0f}"),
    ("churn_rerun_s", "churn: every moved check re-run, after the applying began (s)", "{:.1f}"),
    ("rss_mb", "RSS at the end (MB)", "{:.0f}"),
    ("peak_rss_mb", "peak RSS (MB)", "{:.0f}"),
]


async def parent(args: argparse.Namespace) -> None:
    from alivemcp.testbed.mcp_certs import make_test_ca
    from alivemcp.testbed.mcp_registry import LocalRegistry, remote
    from alivemcp.testbed.mcp_servers import start_server

    cores = sorted(os.sched_getaffinity(0))
    args.pin = cores[: args.cores]
    others = set(cores[args.cores :]) or set(cores)
    os.sched_setaffinity(0, others)  # the registry and the labs beside the daemon, not on it
    work = Path(tempfile.mkdtemp(prefix="alivemcp-bench-discovery-"))
    # HTTPS: a throwaway CA signs the labs' certificate; every check verifies it with that CA.
    ca = make_test_ca(work / "ca") if args.https else None
    ca_file = ca.ca_file if ca is not None else None
    cert = ca.server_pem if ca is not None else None
    labs = [await asyncio.to_thread(start_server, "lab", tls_cert=cert) for _ in range(args.labs)]
    figures: dict[str, dict[str, Any]] = {}
    try:
        bases = [lab.base for lab in labs]
        urls = [remote_url(bases, i, args.delay_ms) for i in range(args.remotes)]
        churned = list(urls)
        for i in moved(args.remotes, args.churn):
            churned[i] = remote_url(bases, i, args.delay_ms, churned=True)
        async with LocalRegistry() as registry:
            for i, url in enumerate(urls):
                registry.add(server_name(i), remotes=[remote(url)])

            async def churn() -> None:
                for i in moved(args.remotes, args.churn):
                    registry.entries[i]["server"]["remotes"][0]["url"] = churned[i]

            async def nothing() -> None:
                return None

            if "registry" in args.variants:
                config = work / "registry.yaml"
                config.write_text(
                    registry_config(work / "registry", registry.url, args.interval, ca_file)
                )
                figures["registry"] = await run_child("registry", config, args, work, churn)
                crawls = sum(1 for query in registry.requests if not query.get("cursor"))
                figures["registry"]["crawl_pages"] = len(registry.requests) / max(1, crawls)
            if "file" in args.variants:
                config = work / "file.yaml"
                config.write_text(file_config(work / "file", urls, args.interval, ca_file))
                (work / "file-churned.yaml").write_text(
                    file_config(work / "file", churned, args.interval, ca_file)
                )
                figures["file"] = await run_child("file", config, args, work, nothing)
    finally:
        for lab in labs:
            lab.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()
    latency = f"answering after {args.delay_ms} ms" if args.delay_ms else "answering at once"
    print(
        f"discovery benchmark: {args.remotes} remotes at {args.interval:g}s on {args.labs} lab "
        f"MCP servers over {'HTTPS (verified, sessions resumed)' if args.https else 'HTTP'} "
        f"({latency}), mcp_endpoint, history on, uvloop, "
        f"{'one core' if args.cores == 1 else f'{args.cores} cores'} per daemon; "
        f"churn {args.churn:.0%}"
    )
    print(f"load average after the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    width = max(len(what) for _, what, _ in ROWS)
    print(f"{'':{width}}  " + "  ".join(f"{VARIANTS[v]:>16}" for v in figures))
    for key, what, fmt in ROWS:
        cells = []
        for fig in figures.values():
            value = fig.get(key)
            cells.append(f"{'-' if value is None else fmt.format(value):>16}")
        print(f"{what:{width}}  " + "  ".join(cells))


# -- child: one daemon ---------------------------------------------------------------------------


def rss_mb(field: str = "VmRSS:") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(value: float | None) -> float | None:
    return None if value is None else 1000 * value


def phase(text: str) -> None:
    print(f"phase {text}", flush=True)


async def poll_until(condition: Callable[[], bool], within: float, every: float) -> bool:
    """Whether ``condition`` came true within ``within`` seconds, looked at every ``every``
    (the status store's state: no event says "every check has a result")."""
    deadline = time.monotonic() + within
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(every)


async def child(args: argparse.Namespace) -> dict[str, Any]:
    from alivemcp.app import daemon as daemon_module
    from alivemcp.app.daemon import Daemon
    from alivemcp.config import LoadedConfig, ResolvedCheck, load_config
    from alivemcp.hygiene.logging import configure_logging

    configure_logging("info", "json")
    path = Path(args.config)
    registry = args.child == "registry"
    out: dict[str, Any] = {}
    starts: list[float] = []  # monotonic time of each run's start
    late: list[float] = []  # its lateness
    stalls: list[tuple[float, float, float]] = []  # (when, how long, loop CPU) over 2 ms
    applies: list[tuple[float, float]] = []  # (start, end) of each hand-over to the engine
    loads: list[float] = []  # seconds of each reload's file load

    collections: list[tuple[float, int, float]] = []  # (when, generation, CPU seconds)
    gc_started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_started[0] = time.thread_time()
        else:
            collections.append(
                (time.monotonic(), info["generation"], time.thread_time() - gc_started[0])
            )

    gc.callbacks.append(on_gc)

    async def watch() -> None:
        while True:
            before, cpu_before = time.monotonic(), time.thread_time()
            await asyncio.sleep(0.005)
            stall = time.monotonic() - before - 0.005
            if stall > 0.002:
                stalls.append((before, stall, time.thread_time() - cpu_before))

    def stall_figures(key: str, since: float, until: float) -> None:
        """``out[key]``: the longest stall between the two times; ``out[key_busy]``: the most
        CPU the loop thread spent in one tick among them (ms)."""
        during = [(s, busy) for t, s, busy in stalls if since <= t <= until]
        out[key] = ms(max((s for s, _ in during), default=0.0))
        out[f"{key}_busy"] = ms(max((busy for _, busy in during), default=0.0))

    watcher = asyncio.create_task(watch())
    t0, cpu_start = time.monotonic(), time.process_time()
    loaded = load_config(path)
    daemon = Daemon(loaded, path)
    real = daemon.scheduler.metrics.lateness

    class Recorder:
        def observe(self, value: float) -> None:
            starts.append(time.monotonic())
            late.append(value)
            real.observe(value)

    daemon.scheduler.metrics.lateness = Recorder()  # type: ignore[assignment]
    hand_on = daemon.discovery._on_targets

    async def timed_hand_on(source: str, checks: Mapping[str, ResolvedCheck]) -> None:
        began = time.monotonic()
        await hand_on(source, checks)
        applies.append((began, time.monotonic()))

    daemon.discovery._on_targets = timed_hand_on
    load_in_background = daemon_module.load_off_loop

    async def timed_load(*a: Any) -> LoadedConfig:
        began = time.monotonic()
        try:
            return await load_in_background(*a)
        finally:
            loads.append(time.monotonic() - began)

    daemon_module.load_off_loop = timed_load  # type: ignore[assignment]
    out["targets"] = len(loaded.checks)
    del loaded
    await daemon._start()
    started = time.monotonic()  # (loading the file and building the daemon block the loop)

    # 1. Start-up: the first crawl, then every check's first result.
    if registry:
        snap = await daemon.discovery.wait_attempts(SOURCE, 1, timeout=1800)
        assert not snap.failing, snap.last_error
        out["crawl_s"] = snap.last_duration_seconds
        out["targets"] = snap.targets
        out["in_engine_s"] = applies[0][1] - t0
    else:
        out["in_engine_s"] = time.monotonic() - t0
    phase(f"{out['targets']} checks in the engine after {out['in_engine_s']:.1f} s")

    def not_run() -> int:  # /status summary "pending"
        return sum(1 for state in daemon.store.states() if state.last is None)

    done = await poll_until(lambda: not not_run(), 3 * args.interval + 300, every=0.5)
    now = time.monotonic()
    out["first_results_s"] = now - t0 if done else None
    out["startup_cpu_s"] = time.process_time() - cpu_start
    stall_figures("startup_stall_ms", started, now)
    phase(f"every check had a result after {now - t0:.1f} s; steady window of {args.steady:g} s")

    # 2. Steady state, once every check is on its grid: a check's second run comes at least
    # half an interval after its first, so a window starting sooner misses some of them.
    await asyncio.sleep(args.interval / 2 + 5)
    cpu0, since = time.process_time(), time.monotonic()
    await asyncio.sleep(args.steady)
    cpu, until = time.process_time() - cpu0, time.monotonic()
    steady = [v for t, v in zip(starts, late, strict=False) if since <= t <= until]
    out["steady_runs_per_s"] = len(steady) / (until - since)
    out["cpu_share"] = cpu / (until - since)
    out["cpu_per_run_ms"] = 1000 * cpu / max(1, len(steady))
    out["steady_p50_ms"] = ms(statistics.median(steady)) if steady else None
    out["steady_p99_ms"] = ms(pct(steady, 0.99))
    stall_figures("steady_stall_ms", since, until)
    full = [seconds for when, gen, seconds in collections if gen == 2 and since <= when <= until]
    out["steady_full_gcs"] = len(full)
    out["steady_full_gc_ms"] = ms(max(full, default=0.0))
    verdicts = Counter(s.last.status.value for s in daemon.store.states() if s.last is not None)
    out["steady_up"] = verdicts.get("up", 0)
    out["steady_not_up"] = sum(verdicts.values()) - verdicts.get("up", 0)
    out["verdicts"] = dict(verdicts)
    out["rss_steady_mb"] = rss_mb()
    reasons = Counter(
        f"{s.last.status.value}: {s.last.reason[:90]}"
        for s in daemon.store.states()
        if s.last is not None and s.last.status.value != "up"
    )
    phase(
        f"steady: {out['cpu_share']:.0%} of a core, {len(steady)} runs, verdicts "
        f"{dict(verdicts)}; not up: {reasons.most_common(3)}"
    )

    async def change() -> tuple[float, float, float]:
        """(began, ended, process CPU) of a refresh (registry) or a reload (file)."""
        began, cpu0 = time.monotonic(), time.process_time()
        if registry:
            assert await daemon.discovery.refresh(SOURCE)
        else:
            assert await daemon.reload()
        return began, time.monotonic(), time.process_time() - cpu0

    # 3. A change that changes nothing.
    began, ended, cpu = await change()
    out["same_s"], out["same_cpu_s"] = ended - began, cpu
    stall_figures("same_stall_ms", began, ended)
    await asyncio.sleep(5)

    # 4. The churn: the registry changed by the parent, or the file rewritten.
    moving = [check_name(i) for i in moved(args.remotes, args.churn)]
    if registry:
        print("churn", flush=True)
        answer = await asyncio.to_thread(sys.stdin.readline)
        assert answer.strip() == "ok", answer
    else:
        os.replace(path.with_name("file-churned.yaml"), path)
    began, ended, cpu = await change()
    out["churn_checks"] = len(moving)
    out["churn_s"], out["churn_cpu_s"] = ended - began, cpu
    stall_figures("churn_stall_ms", began, ended)
    apply_began, apply_ended = applies[-1] if registry else (began + loads[-1], ended)
    out["churn_apply_s"] = apply_ended - apply_began
    stall_figures("churn_apply_stall_ms", apply_began, apply_ended)
    # (A moved check's first run may start before a reload returns: it finishes its clean-up.)
    wall_began = time.time() - (time.monotonic() - apply_began)

    def waiting() -> int:
        return sum(
            1
            for name in moving
            if (state := daemon.store.get(name)) is None
            or state.last is None
            or state.last.started_at < wall_began
        )

    done = await poll_until(lambda: not waiting(), 2 * args.interval + 60, every=0.2)
    out["churn_rerun_s"] = time.monotonic() - apply_began if done else None
    phase(f"churn: {out['churn_s']:.2f} s, applied in {out['churn_apply_s']:.3f} s")

    out["rss_mb"] = rss_mb()
    out["peak_rss_mb"] = rss_mb("VmHWM:")
    # The daemon's own long stalls and the full collections, on one time line (the parent
    # shows them); stalls of a daemon that was not scheduled are only counted.
    for when, stall, busy in stalls:
        if busy > 0.05:
            print(
                f"stall {1000 * stall:.0f} ms, loop busy {1000 * busy:.0f} ms, at "
                f"{when - t0:.1f} s",
                file=sys.stderr,
            )
    idle = sum(1 for _, stall, busy in stalls if stall > 0.05 and busy <= 0.05)
    print(f"stall over 50 ms with the loop busy less: {idle}", file=sys.stderr)
    for when, gen, seconds in collections:
        if gen == 2:
            print(f"full gc {1000 * seconds:.0f} ms at {when - t0:.1f} s", file=sys.stderr)
    watcher.cancel()
    daemon._stopping = True
    await daemon.scheduler.stop(1)
    await daemon.discovery.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remotes", type=int, default=15_000)
    parser.add_argument("--interval", type=float, default=60.0)
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state")
    parser.add_argument("--churn", type=float, default=0.01, help="share of remotes moved")
    parser.add_argument("--labs", type=int, default=2, help="lab MCP server processes")
    parser.add_argument("--delay-ms", type=int, default=0, help="latency of every lab answer")
    parser.add_argument("--cores", type=int, default=1, help="cores each daemon is pinned to")
    parser.add_argument(
        "--https",
        action="store_true",
        help="the labs answer over HTTPS (a throwaway CA's certificate, verified by each check)",
    )
    parser.add_argument(
        "--variants",
        type=lambda text: [v for v in text.split(",") if v],
        default=list(VARIANTS),
        help="comma-separated: registry,file (default both)",
    )
    parser.add_argument("--child", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--pin", help=argparse.SUPPRESS)  # the child's cores: 0,1
    args = parser.parse_args()
    if not args.child:
        asyncio.run(parent(args))
        return
    os.sched_setaffinity(0, {int(core) for core in args.pin.split(",")})
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        figures = runner.run(child(args))
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
