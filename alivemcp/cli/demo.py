"""``alivemcp demo``: the daemon against an embedded local stack.

Starts moto (AWS over real HTTP), then each demo part in turn (a Kafka broker when Java is
present, local MCP servers, the S3/Object Lambda/Firehose/Kinesis/Flink stand-ins), which
create the resources ``config/demo.yaml`` needs and publish their addresses as ``DEMO_*``
variables.
Then it runs the real daemon on that config until Ctrl-C (or ``--duration``).

The daemon's data (history, alert state) is kept in ``--data-dir``, ``.cache/demo`` under the
current directory by default, so the demo's history outlives it: ``alivemcp report`` reads it
while the demo runs and after it stopped, and the next demo run continues it. The stack's own
scratch files (moto, brokers) are thrown away. At start-up the demo prints the data dir and
the exact ``alivemcp report`` command for it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

from alivemcp.app.datadir import DataDirInUseError, DataDirLock
from alivemcp.config import LoadedConfig, load_config
from alivemcp.hygiene.logging import configure_logging
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack

__all__ = ["DEFAULT_DATA_DIR", "DEMO_PARTS", "report_command", "run_demo"]

#: Where the demo keeps its history and alert state, relative to the current directory: the
#: same place ``config/demo.yaml``'s ``data_dir`` names when ``DEMO_DATA_DIR`` is not set, so
#: ``alivemcp report --config config/demo.yaml`` run where the demo ran reads it too.
DEFAULT_DATA_DIR = Path(".cache/demo")

#: Demo parts, in start order: each module has ``async def start(stack: DemoStack)``.
DEMO_PARTS = (
    "alivemcp.testbed.demo_mcp",
    "alivemcp.testbed.demo_registry",  # lists servers demo_mcp started: after it
    "alivemcp.testbed.demo_kafka",
    "alivemcp.testbed.demo_s3",
    "alivemcp.testbed.demo_s3_access",
    "alivemcp.testbed.demo_firehose",
    "alivemcp.testbed.demo_kinesis",
    "alivemcp.testbed.demo_flink",  # reads the stream demo_kinesis creates
)


def default_demo_config() -> Path:
    return Path(__file__).resolve().parents[2] / "config" / "demo.yaml"


def report_command(config_path: Path, data_dir: Path) -> str:
    """The ``alivemcp report`` command line, for a shell, that reads ``data_dir``'s history
    from any directory: this installation's ``alivemcp`` (plain ``alivemcp`` when that is
    the one on PATH) and absolute paths."""
    script = Path(sys.executable).parent / "alivemcp"
    on_path = shutil.which("alivemcp")
    if on_path and script.exists() and os.path.samefile(on_path, script):
        program = ["alivemcp"]
    elif script.exists():
        program = [str(script.absolute())]
    else:
        program = [sys.executable, "-m", "alivemcp"]
    return shlex.join(
        [
            *program,
            "report",
            "--config",
            str(config_path.absolute()),
            "--data-dir",
            str(data_dir.absolute()),
        ]
    )


async def start_stack(workdir: Path, data_dir: Path, *, kafka: bool = True) -> DemoStack:
    """Start moto and every demo part; on failure, stop what was started and re-raise.
    ``workdir`` is the stack's scratch space; ``data_dir`` (the daemon's) is published as
    ``DEMO_DATA_DIR``."""
    stack = DemoStack(workdir=workdir, moto=MotoServer().start())
    stack.add_cleanup(stack.moto.stop)
    stack.set_env("DEMO_MOTO_URL", stack.moto.url)
    stack.set_env("DEMO_DATA_DIR", str(data_dir))
    try:
        for module_name in DEMO_PARTS:
            if not kafka and module_name.endswith("demo_kafka"):
                stack.note("Kafka: not started (--no-kafka); its checks will report down")
                # An address nothing listens on: the Kafka checks load and report down.
                stack.set_env("DEMO_KAFKA_BOOTSTRAP", "127.0.0.1:9")
                continue
            module = importlib.import_module(module_name)
            await module.start(stack)
    except BaseException:
        await stack.close()
        raise
    return stack


async def run_demo(args: argparse.Namespace) -> int:
    configure_logging("info", "auto")
    config_path: Path = args.config or default_demo_config()
    if not config_path.exists():  # noqa: ASYNC240 - once, before anything runs
        print(f"demo config not found: {config_path}")
        return 2
    data_dir = Path(args.data_dir or DEFAULT_DATA_DIR)
    # Before the stack starts (Kafka alone takes a while): one daemon per data dir, and a
    # second demo would otherwise find that out only once everything is up.
    data_dir, problem = _data_dir_problem(data_dir)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="alivemcp-demo-"))
    print("starting the local stack (moto, Kafka, MCP servers, stand-ins)...", flush=True)
    stack = await start_stack(workdir, data_dir, kafka=not args.no_kafka)
    try:
        os.environ.update(stack.env)
        os.environ["DEMO_LISTEN"] = args.listen
        loaded = load_config(config_path)
        from alivemcp.app.daemon import Daemon

        daemon = Daemon(loaded, config_path, args.listen)
        base = f"http://{args.listen}"
        effective, report, history = _history_lines(loaded, config_path)
        print(
            "\n".join(
                [
                    "",
                    f"alivemcp demo: {len(loaded.checks)} checks from {config_path}",
                    f"  status page: {base}/",
                    f"  status API:  {base}/status",
                    f"  metrics:     {base}/metrics",
                    *(
                        [f"  discovery:   {base}/api/v1/discovery"]
                        if loaded.config.discovery
                        else []
                    ),
                    *history,
                    *(f"  {line}" for line in stack.notes),
                    "Ctrl-C to stop.",
                    "",
                ]
            ),
            flush=True,
        )
        if args.duration:
            asyncio.get_running_loop().call_later(args.duration, daemon.request_stop)
        code = await daemon.run()
        if report and code == 0:
            print(f"alivemcp demo: history kept in {effective}; report: {report}", flush=True)
        return code
    finally:
        await stack.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _history_lines(loaded: LoadedConfig, config_path: Path) -> tuple[Path, str, list[str]]:
    """The daemon's data dir, the report command for it ("" without history) and the lines
    that tell the user. The config decides: a --config of one's own may name another
    data_dir than the one the demo published."""
    effective = Path(loaded.config.data_dir).resolve()
    if not loaded.config.history.enabled:
        return (
            effective,
            "",
            [f"  data dir:    {effective} (history.enabled is false: no history to report)"],
        )
    report = report_command(config_path, effective)
    return (
        effective,
        report,
        [
            f"  data dir:    {effective} (history kept between demo runs)",
            f"  SLA report:  {report}",
        ],
    )


def _data_dir_problem(data_dir: Path) -> tuple[Path, str | None]:
    """``data_dir`` made absolute, and why the demo cannot use it (another alivemcp holds
    it, or it cannot be created) or None."""
    data_dir = data_dir.resolve()
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except DataDirInUseError as exc:
        return data_dir, (
            f"the demo's data dir {data_dir} is in use by another alivemcp "
            f"({exc.holder}): stop it, or give this demo its own with "
            "`alivemcp demo --data-dir DIR`"
        )
    except OSError as exc:
        return data_dir, f"the demo's data dir {data_dir} cannot be used: {exc.strerror or exc}"
    lock.release()
    return data_dir, None
