"""The ``alivemcp`` command line.

Exit codes: 0 success (``check``: every check up), 1 a check not up, 2 a usage or config error.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alivemcp import __version__
from alivemcp.cluster.config import ClusterConfig
from alivemcp.config import ConfigError, LoadedConfig, ResolvedCheck, load_config
from alivemcp.hygiene.logging import configure_logging
from alivemcp.probe import Status

if TYPE_CHECKING:
    from alivemcp.engine.runner import ProbeHandle

__all__ = ["main"]

EXIT_OK, EXIT_NOT_UP, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`alivemcp probes --schema | head`): as other Unix tools do,
        # stop quietly. stdout is pointed at /dev/null so the interpreter's final flush of
        # the broken pipe cannot print a traceback either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # as if killed by SIGPIPE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alivemcp",
        description="Uptime and health prober for MCP servers and the AWS data plane behind them.",
    )
    parser.add_argument("--version", action="version", version=f"alivemcp {__version__}")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    run = sub.add_parser("run", help="run the daemon (metrics, status API, alerting)")
    run.add_argument("--config", "-c", required=True, type=Path, help="YAML config file")
    run.add_argument("--listen", help="HOST:PORT, overrides server.listen")
    run.add_argument(
        "--web.config.file",
        dest="web_config_file",
        type=Path,
        metavar="FILE",
        help="TLS, basic auth and headers in the Prometheus exporters' web config format; "
        "overrides server.web_config_file",
    )
    run.set_defaults(func=_cmd_run)

    check = sub.add_parser("check", help="run checks once and print their results")
    check.add_argument("--config", "-c", required=True, type=Path, help="YAML config file")
    check.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this check (repeatable; a multi-target check's name "
        "selects all its targets)",
    )
    check.add_argument("--json", action="store_true", help="one JSON object per line")
    check.set_defaults(func=_cmd_check)

    validate = sub.add_parser("validate", help="validate a config file and exit")
    validate.add_argument("file", type=Path, nargs="?", help="YAML config file (or --config)")
    validate.add_argument("--config", "-c", type=Path, dest="config", help="YAML config file")
    validate.add_argument(
        "--allow-missing-env",
        action="store_true",
        help="an unset ${VAR} is not an error: check the structure without the secrets (CI)",
    )
    validate.set_defaults(func=_cmd_validate)

    discover = sub.add_parser(
        "discover",
        help="read each discovery source once and print the checks it would yield",
    )
    discover.add_argument("--config", "-c", required=True, type=Path, help="YAML config file")
    discover.add_argument("--json", action="store_true", help="one JSON document")
    discover.set_defaults(func=_cmd_discover)

    probes = sub.add_parser("probes", help="list probe types and their parameters")
    probes.add_argument(
        "--schema", action="store_true", help="print the JSON schema of the whole config file"
    )
    probes.set_defaults(func=_cmd_probes)

    demo = sub.add_parser("demo", help="run the daemon against an embedded local stack")
    demo.add_argument("--listen", default="127.0.0.1:9464", help="HOST:PORT for the daemon")
    demo.add_argument(
        "--config", type=Path, default=None, help="demo config (default: config/demo.yaml)"
    )
    demo.add_argument("--no-kafka", action="store_true", help="do not start a Kafka broker")
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the demo keeps its history and alert state, kept between "
        "runs (default: .cache/demo in the current directory); the demo "
        "prints the `alivemcp report` command that reads it",
    )
    demo.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after this many seconds (default: until Ctrl-C)",
    )
    demo.set_defaults(func=_cmd_demo)

    new_probe = sub.add_parser(
        "new-probe", help="create a probe type as an installable plugin project"
    )
    new_probe.add_argument(
        "name",
        metavar="NAME",
        help="the probe type's name (lower_snake_case, at most 32 characters)",
    )
    new_probe.add_argument(
        "--dir",
        type=Path,
        default=None,
        dest="directory",
        metavar="DIR",
        help="where to create the project (default: ./alivemcp-NAME; it must "
        "not exist or be empty)",
    )
    new_probe.set_defaults(func=_cmd_new_probe)

    alert = sub.add_parser("alert-test", help="send a test notification to a receiver")
    alert.add_argument("--config", "-c", required=True, type=Path)
    alert.add_argument("--receiver", required=True)
    alert.set_defaults(func=_cmd_alert_test)

    from alivemcp.cli.report import add_arguments as add_report_arguments

    report = sub.add_parser(
        "report",
        help="uptime, incidents, downtime and MTTR per check over a period (the SLA report)",
    )
    add_report_arguments(report)
    report.set_defaults(func=_cmd_report)

    from alivemcp.cli.tools import add_arguments as add_tools_arguments

    tools = sub.add_parser(
        "tools",
        help="a check's tool surface: show it, diff two versions, approve one",
    )
    add_tools_arguments(tools)
    tools.set_defaults(func=_cmd_tools)
    return parser


def _cmd_new_probe(args: argparse.Namespace) -> int:
    from alivemcp.cli.scaffold import run_new_probe

    return run_new_probe(args.name, args.directory)


def _cmd_report(args: argparse.Namespace) -> int:
    from alivemcp.cli.report import run_from_args

    return run_from_args(args)


def _cmd_tools(args: argparse.Namespace) -> int:
    from alivemcp.cli.tools import run_from_args

    return run_from_args(args)


def _run_async(coro_fn: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run on uvloop when it is installed (set ALIVEMCP_UVLOOP=0 to use asyncio's loop)."""
    factory = None
    if os.environ.get("ALIVEMCP_UVLOOP", "1") != "0":
        try:
            import uvloop

            factory = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - platform without uvloop
            factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro_fn())


def _load(path: Path) -> LoadedConfig:
    # Loading registers the config's secrets for redaction (alivemcp.config does it once).
    return load_config(path)


# -- run ---------------------------------------------------------------------------------------


def _cmd_run(args: argparse.Namespace) -> int:
    # First of all: a SIGHUP or SIGTERM while the config loads must not kill the process.
    from alivemcp.app.lifecycle import hold_signals

    hold_signals()
    loaded = _load(args.config)
    listen = args.listen or loaded.config.server.listen
    problem = _listen_problem(listen)
    if problem:
        print(
            f"{problem}: set server.listen in {args.config} or pass --listen HOST:PORT",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from alivemcp.web.webconfig import load_web_config, web_config_path

    # Refused here, before anything starts, like the config itself (exit 2, one message).
    web_config = load_web_config(
        web_config_path(
            args.web_config_file, loaded.config.server.web_config_file, args.config.parent
        )
    )
    configure_logging(loaded.config.logging.level, loaded.config.logging.format)
    from alivemcp.app.daemon import Daemon

    async def go() -> int:
        return await Daemon(
            loaded,
            args.config,
            args.listen,
            web_config=web_config,
            web_config_pinned=args.web_config_file is not None,
        ).run()

    return _run_async(go)


# -- check -------------------------------------------------------------------------------------


def _cmd_check(args: argparse.Namespace) -> int:
    loaded = _load(args.config)
    configure_logging("warning", loaded.config.logging.format)
    selected = _select(loaded.checks, args.only)
    if selected is None:
        return EXIT_USAGE
    return _run_async(lambda: _check_once(loaded, selected, args.json))


def _select(checks: Sequence[ResolvedCheck], only: list[str]) -> list[ResolvedCheck] | None:
    if not only:
        return list(checks)
    chosen: list[ResolvedCheck] = []
    names = [c.name for c in checks]
    for want in only:
        matched = [c for c in checks if c.name == want or c.name.startswith(want + "/")]
        if not matched:
            hint = difflib.get_close_matches(want, names, n=1)
            more = f"; did you mean {hint[0]!r}?" if hint else ""
            print(f"--only: no check named {want!r}{more}", file=sys.stderr)
            return None
        chosen.extend(c for c in matched if c not in chosen)
    return chosen


def _with_members(
    selected: list[ResolvedCheck], every: Sequence[ResolvedCheck]
) -> list[ResolvedCheck]:
    """The selected checks plus every check they read (a composite's members), transitively:
    a reader decides from its members' results, so they run first, once."""
    by_name = {c.name: c for c in every}
    chosen = {c.name: c for c in selected}
    todo = list(selected)
    while todo:
        for ref in todo.pop().reads:
            for member in ref.checks:
                if member.name not in chosen and member.name in by_name:
                    chosen[member.name] = by_name[member.name]
                    todo.append(by_name[member.name])
    return [c for c in every if c.name in chosen]


async def _check_once(loaded: LoadedConfig, checks: list[ResolvedCheck], as_json: bool) -> int:
    from alivemcp.engine.checks import build_handle, check_info
    from alivemcp.engine.results import CheckResult
    from alivemcp.engine.status import StatusStore
    from alivemcp.plumbing import Plumbing

    checks = _with_members(checks, loaded.checks)
    store = StatusStore()  # what readers (composites) see of the runs before theirs
    store.set_checks(check_info(c) for c in checks)
    plumbing = Plumbing()
    limit = asyncio.Semaphore(loaded.config.scheduler.max_concurrency)
    handles = {c.name: build_handle(c, plumbing, results=store) for c in checks}
    waiting = {
        c.name: {m.name for ref in c.reads for m in ref.checks} & handles.keys() for c in checks
    }
    all_up = True

    async def one(handle: ProbeHandle) -> CheckResult:
        async with limit:
            return await handle.run()

    try:
        # In waves: a check runs once every check it reads has a result (config refuses
        # cycles, so every wave has at least one check).
        while waiting:
            ready = [name for name, needs in waiting.items() if not needs & waiting.keys()]
            for name in ready:
                del waiting[name]
            for next_done in asyncio.as_completed([one(handles[n]) for n in ready]):
                result = await next_done
                store.record(result)
                all_up &= result.status is Status.UP
                if as_json:
                    print(json.dumps(result.as_json(), default=str), flush=True)
                else:
                    print(
                        f"{result.status.value:<9} {result.check.name}  "
                        f"({result.duration_seconds:.3f}s)  {result.reason}",
                        flush=True,
                    )
    finally:
        await asyncio.gather(*(h.teardown() for h in handles.values()))
        await plumbing.aclose()
    return EXIT_OK if all_up else EXIT_NOT_UP


# -- validate / probes ---------------------------------------------------------------------------


def _cmd_validate(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.config is None):
        print("validate: give the config file once, as FILE or --config FILE", file=sys.stderr)
        return EXIT_USAGE
    path: Path = args.file or args.config
    loaded = load_config(path, allow_missing_env=args.allow_missing_env)
    by_type: dict[str, int] = {}
    for check in loaded.checks:
        by_type[check.probe_type] = by_type.get(check.probe_type, 0) + 1
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(by_type.items())) or "no checks"
    if loaded.unchecked:
        print(
            f"{path}: ok, except {len(loaded.unchecked)} field(s) filled by environment "
            "variables that are not set:"
        )
        for line in loaded.unchecked:
            print(f"  {line}")
    else:
        print(f"{path}: ok ({len(loaded.checks)} checks: {kinds})")
    if loaded.config.cluster is not None:
        print(_cluster_summary(loaded.config.cluster, [c.name for c in loaded.checks]))
    if loaded.config.discovery:
        sources = ", ".join(f"{s.name} ({s.kind})" for s in loaded.config.discovery)
        print(
            f"discovery: {len(loaded.config.discovery)} source(s): {sources}; "
            f"`alivemcp discover -c {path}` reads them"
        )
    return EXIT_OK


def _cmd_discover(args: argparse.Namespace) -> int:
    """Read every discovery source once, as the daemon would, and print what each yields;
    exit 1 when one failed."""
    loaded = _load(args.config)
    configure_logging("error", loaded.config.logging.format)
    from alivemcp.discovery.survey import as_json, render_table, survey
    from alivemcp.plumbing.http import HttpClients

    async def go() -> int:
        http = HttpClients()
        try:
            surveys = await survey(loaded, args.config.parent, http)
        finally:
            await http.aclose()
        if args.json:
            print(json.dumps({"sources": as_json(surveys)}, indent=2))
        else:
            print(render_table(surveys), end="")
        return EXIT_OK if all(s.ok for s in surveys) else EXIT_NOT_UP

    return _run_async(go)


def _cluster_summary(cluster: ClusterConfig, names: list[str]) -> str:
    """One line on cluster mode: who this replica is, and how evenly the checks fall into
    shards (a shard is the unit that moves between replicas)."""
    from alivemcp.cluster.shards import shard_of

    per_shard = [0] * cluster.shards
    for name in names:
        per_shard[shard_of(name, cluster.shards)] += 1
    return (
        f"cluster mode: replica {cluster.replica_id!r} in group {cluster.group!r}, "
        f"{cluster.shards} shards (checks per shard: {min(per_shard)} to "
        f"{max(per_shard)}), results topic {cluster.topics.results!r}"
    )


def _listen_problem(listen: str) -> str | None:
    from alivemcp.app.listen import port_problem
    from alivemcp.config import split_listen

    host, port = split_listen(listen)
    return port_problem(host, port)


def _cmd_probes(args: argparse.Namespace) -> int:
    from alivemcp.config.schema import config_json_schema, describe_probe_types

    if args.schema:
        print(json.dumps(config_json_schema(), indent=2))
    else:
        print(describe_probe_types())
    return EXIT_OK


# -- demo / alert-test ---------------------------------------------------------------------------


def _cmd_demo(args: argparse.Namespace) -> int:
    from alivemcp.cli.demo import run_demo

    try:
        problem = _listen_problem(args.listen)
    except ValueError as exc:
        print(f"--listen: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if problem:
        # Before the local stack starts: nothing to stop, one line to read.
        print(
            f"{problem}: choose another with `make demo LISTEN=127.0.0.1:9465` "
            "(or `alivemcp demo --listen HOST:PORT`)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return _run_async(lambda: run_demo(args))


def _cmd_alert_test(args: argparse.Namespace) -> int:
    loaded = _load(args.config)
    configure_logging("info", loaded.config.logging.format)
    from alivemcp.alerting.manager import send_test_notification

    async def go() -> int:
        ok, message = await send_test_notification(loaded.config.alerting, args.receiver)
        print(message)
        return EXIT_OK if ok else EXIT_NOT_UP

    return _run_async(go)
