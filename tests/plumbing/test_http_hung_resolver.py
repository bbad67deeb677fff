"""A DNS server that never answers, for real: a mount namespace whose /etc/resolv.conf names
a UDP/TCP socket on 127.53.0.1:53 that nobody reads. The real daemon (and the client on
uvloop) run in it; checks of IP literals and localhost must stay up while lookups of other
names hang, and the hung names are DNS timeouts for their own targets only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from alivemcp.testbed.mcp_servers import ServerProcess
from tests import support
from tests.support.http_servers import HttpServer

SILENT_DNS = "127.53.0.1"
#: Run by path in the namespace: the client on uvloop, printing what each GET did.
HUNG_DNS_CLIENT = support.REPO / "tests" / "support" / "hung_dns_client.py"
#: No proxy variables: these checks must go direct.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}


@pytest.fixture(scope="module")
def silent_resolv_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # The fixture may be set up again on the same worker (pytest -n): lookups left
        # connections to the last one in TIME_WAIT.
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        udp.bind((SILENT_DNS, 53))
        tcp.bind((SILENT_DNS, 53))
        tcp.listen(64)
        conf = tmp_path_factory.mktemp("dns") / "resolv.conf"
        # One 30 s try: every lookup of a name not in /etc/hosts hangs for 30 s.
        conf.write_text(f"nameserver {SILENT_DNS}\noptions timeout:30 attempts:1\n")
        yield conf
    finally:
        udp.close()
        tcp.close()


def in_namespace(conf: Path, argv: list[str]) -> list[str]:
    """``argv`` in a private mount namespace where ``conf`` is /etc/resolv.conf."""
    return [
        "unshare",
        "--mount",
        "sh",
        "-c",
        'mount --bind "$0" /etc/resolv.conf && exec "$@"',
        str(conf),
        *argv,
    ]


def test_client_on_uvloop_needs_no_resolver_for_ip_or_localhost(silent_resolv_conf: Path) -> None:
    """The loop's own resolver threads are all stuck (four hung lookups by other code):
    an IP literal and localhost still connect at once; a hung name is a DNS timeout."""
    with HttpServer("127.0.0.1") as server:
        proc = subprocess.run(
            in_namespace(
                silent_resolv_conf,
                [sys.executable, str(HUNG_DNS_CLIENT), str(server.port)],
            ),
            capture_output=True,
            text=True,
            timeout=60,
            cwd=support.REPO,
            env={**CLEAN_ENV, "PYTHONPATH": str(support.REPO)},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["127.0.0.1"][0] == 200, results
    assert results["localhost"][0] == 200, results
    assert results["hung0.hung.test"][0] == (
        "DnsError: DNS lookup for hung0.hung.test timed out after 3s"
    ), results


def _runs(d: support.DaemonProcess) -> dict[str, dict[str, float]]:
    """alivemcp_check_runs_total as {check: {result: count}}."""
    status, text = d.get("/metrics")
    assert status == 200, text[:500]
    runs: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "alivemcp_check_runs_total":
                runs.setdefault(sample.labels["check"], {})[sample.labels["result"]] = sample.value
    return runs


def test_daemon_keeps_healthy_checks_up_while_four_resolvers_hang(
    silent_resolv_conf: Path, lab: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = lab.base
    port = base.rsplit(":", 1)[1]
    checks: list[dict[str, Any]] = [
        {
            "name": f"hung{i}",
            "probe": "mcp_endpoint",
            "interval": 2,
            "timeout": 2,
            "params": {"url": f"http://hung{i}.hung.test:{port}/json"},
        }
        for i in range(4)
    ] + [
        {
            "name": "ip",
            "probe": "mcp_endpoint",
            "interval": 2,
            "timeout": 2,
            "params": {"url": f"http://127.0.0.1:{port}/json"},
        },
        {
            "name": "localhost",
            "probe": "mcp_endpoint",
            "interval": 2,
            "timeout": 2,
            "params": {"url": f"http://localhost:{port}/json"},
        },
    ]
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"), "checks": checks}))
    monkeypatch.setattr(
        support, "ALIVEMCP", in_namespace(silent_resolv_conf, [sys.executable, "-m", "alivemcp"])
    )
    with support.DaemonProcess(config, env={"NO_PROXY": "*"}) as d:
        # Long enough for the hung lookups to pile up: each one takes 30 s.
        names = ("ip", "localhost", "hung0", "hung1", "hung2", "hung3")
        d.wait_for(
            lambda: all(sum(_runs(d).get(name, {}).values()) >= 6 for name in names),
            timeout=60,
            what="6 runs of each check",
        )
        runs = _runs(d)
        hung = d.status_of("hung0")
    for name in ("ip", "localhost"):
        assert set(runs[name]) == {"up"}, (name, runs[name])
    for name in ("hung0", "hung1", "hung2", "hung3"):
        assert set(runs[name]) == {"down"}, (name, runs[name])
    assert "DNS lookup for hung0.hung.test timed out after" in json.dumps(hung), hung
