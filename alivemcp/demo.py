"""``alivemcp demo``: the daemon against an embedded local stack.

Starts moto (AWS over real HTTP), then each demo part in turn (a Kafka broker when Java is
present, local MCP servers, the S3/Object Lambda/Firehose/Kinesis/Flink stand-ins), which
create the resources ``config/demo.yaml`` needs and publish their addresses as ``DEMO_*``
variables.
Then it runs the real daemon on that config until Ctrl-C (or ``--duration``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import shutil
import tempfile
from pathlib import Path

from alivemcp.config import load_config
from alivemcp.logging import configure_logging
from alivemcp.testbed.moto import MotoServer
from alivemcp.testbed.stack import DemoStack

__all__ = ["DEMO_PARTS", "run_demo"]

#: Demo parts, in start order: each module has ``async def start(stack: DemoStack)``.
DEMO_PARTS = (
    "alivemcp.testbed.demo_mcp",
    "alivemcp.testbed.demo_kafka",
    "alivemcp.testbed.demo_s3",
    "alivemcp.testbed.demo_s3_access",
    "alivemcp.testbed.demo_firehose",
    "alivemcp.testbed.demo_kinesis",
    "alivemcp.testbed.demo_flink",  # reads the stream demo_kinesis creates
)


def default_demo_config() -> Path:
    return Path(__file__).resolve().parent.parent / "config" / "demo.yaml"


async def start_stack(workdir: Path, *, kafka: bool = True) -> DemoStack:
    """Start moto and every demo part; on failure, stop what was started and re-raise."""
    stack = DemoStack(workdir=workdir, moto=MotoServer().start())
    stack.add_cleanup(stack.moto.stop)
    stack.set_env("DEMO_MOTO_URL", stack.moto.url)
    stack.set_env("DEMO_DATA_DIR", str(workdir / "data"))
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
    workdir = Path(tempfile.mkdtemp(prefix="alivemcp-demo-"))
    print("starting the local stack (moto, Kafka, MCP servers, stand-ins)...", flush=True)
    stack = await start_stack(workdir, kafka=not args.no_kafka)
    try:
        os.environ.update(stack.env)
        os.environ["DEMO_LISTEN"] = args.listen
        loaded = load_config(config_path)
        from alivemcp.daemon import Daemon

        daemon = Daemon(loaded, config_path, args.listen)
        base = f"http://{args.listen}"
        print(
            "\n".join(
                [
                    "",
                    f"alivemcp demo: {len(loaded.checks)} checks from {config_path}",
                    f"  status page: {base}/",
                    f"  status API:  {base}/status",
                    f"  metrics:     {base}/metrics",
                    *(f"  {line}" for line in stack.notes),
                    "Ctrl-C to stop.",
                    "",
                ]
            ),
            flush=True,
        )
        if args.duration:
            asyncio.get_running_loop().call_later(args.duration, daemon.request_stop)
        return await daemon.run()
    finally:
        await stack.close()
        shutil.rmtree(workdir, ignore_errors=True)
