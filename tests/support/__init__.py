"""Helpers shared by the tests: run checks through the same path the daemon uses."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from alivemcp.config import load_config_text
from alivemcp.engine.checks import build_handle
from alivemcp.engine.results import CheckResult
from alivemcp.plumbing import Plumbing

REPO = Path(__file__).resolve().parents[2]
ALIVEMCP = [sys.executable, "-m", "alivemcp"]
PLUGINS = REPO / "tests" / "plugins"


#: Seconds of the current minute a test that puts CloudWatch datapoints gets to read them back.
MINUTE_MARGIN = 15.0
#: (test, minute) of the last :func:`this_minute`: a test's later calls keep its minute.
_minute_of_test: tuple[str, int] = ("", 0)


def this_minute(margin: float = MINUTE_MARGIN) -> int:
    """The start (Unix seconds) of the current minute, for datapoints placed in whole minutes
    that a probe then reads as its last whole periods. The probe's window moves with the
    clock, so datapoints put at 14:20:59 and read at 14:21:00 are a period off (a clean-clone
    suite once failed so). With fewer than ``margin`` seconds of the minute left this waits
    for the next one, unless the running test already placed datapoints in this minute
    (those would then be a minute stale)."""
    global _minute_of_test
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" (")[0]
    now = time.time()
    minute = int(now) // 60 * 60
    if (test, minute) != _minute_of_test and now - minute > 60 - margin:
        time.sleep(minute + 60 - now + 0.05)
        minute += 60
    _minute_of_test = (test, minute)
    return minute


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a CLI/daemon subprocess: the test plugin package on its path."""
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


async def run_check(
    probe: str,
    params: dict[str, Any],
    *,
    plumbing: Plumbing | None = None,
    timeout: float = 30.0,
    interval: float = 60.0,
    labels: dict[str, str] | None = None,
    runs: int = 1,
) -> CheckResult:
    """Validate one check's config exactly as the daemon would, run it ``runs`` times
    (same probe instance: state between runs is kept), and return the last result."""
    results = await run_check_series(
        probe,
        params,
        plumbing=plumbing,
        timeout=timeout,
        interval=interval,
        labels=labels,
        runs=runs,
    )
    return results[-1]


async def run_check_series(
    probe: str,
    params: dict[str, Any],
    *,
    plumbing: Plumbing | None = None,
    timeout: float = 30.0,
    interval: float = 60.0,
    labels: dict[str, str] | None = None,
    runs: int = 1,
) -> list[CheckResult]:
    doc = {
        "checks": [
            {
                "name": "t",
                "probe": probe,
                "interval": interval,
                "timeout": timeout,
                "labels": labels or {},
                "params": params,
            }
        ]
    }
    loaded = load_config_text(yaml.safe_dump(doc), env={})
    own = plumbing is None
    plumbing = plumbing or Plumbing()
    handle = build_handle(loaded.checks[0], plumbing)
    try:
        return [await handle.run() for _ in range(runs)]
    finally:
        await handle.teardown()
        if own:
            await plumbing.aclose()


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real ``alivemcp`` CLI in a subprocess."""
    full_env = subprocess_env(env)
    return subprocess.run(
        [*ALIVEMCP, *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        input=input,
        cwd=REPO,
    )


def check_json(
    config_path: str | Path, *only: str, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, dict[str, dict[str, Any]]]:
    """``alivemcp check --json`` on a config; returns (exit code, results by check name)."""
    args = ["check", "--config", str(config_path), "--json"]
    for name in only:
        args += ["--only", name]
    proc = cli(*args, env=env, timeout=timeout)
    if proc.returncode == 2:
        raise AssertionError(f"config/usage error:\n{proc.stdout}\n{proc.stderr}")
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            results[row["check"]] = row
    return proc.returncode, results


def write_daemon_config(path: Path, checks: list[dict[str, Any]], **top: Any) -> Path:
    """A daemon config at ``path``: JSON logs, ``data_dir`` beside it, the given checks."""
    doc = {
        "logging": {"format": "json"},
        "data_dir": str(path.parent / "data"),
        "checks": checks,
        **top,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def run_times(path: Path) -> list[float]:
    """Start times a ``test_static`` check with ``record_to`` wrote, one per run."""
    return [float(x) for x in path.read_text().split()] if path.exists() else []


@contextlib.contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A real threaded HTTP server on a free loopback port; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: In the daemon's start-up line, JSON or console (``alivemcp running ... listen=127.0.0.1:PORT``,
#: its fields in either order).
_LISTEN_FIELD = re.compile(r"\blisten\W+127\.0\.0\.1:(\d+)")


class DaemonProcess:
    """The real ``alivemcp run`` in a subprocess, on a free loopback port.

    ``with DaemonProcess(config_path) as d: d.get_json("/status")``; logs go to ``d.log_path``.
    """

    def __init__(
        self, config_path: Path, *, env: dict[str, str] | None = None, start_timeout: float = 60.0
    ) -> None:
        self.config_path = Path(config_path)
        #: 0 until the first start: the daemon binds a port of the kernel's choosing and says
        #: which; a restart asks for the same one again (a scraper may be pointed at it).
        self.port = 0
        self.env = env
        self.start_timeout = start_timeout
        self.log_path = self.config_path.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DaemonProcess:
        """Start the daemon and return once it answers /healthz on its own port.

        A port picked here and handed over would be a race: another test's process may take
        it before the daemon binds (and /healthz would be answered by a stranger). So the
        first start binds port 0 and reads the port from the daemon's "alivemcp running" line.
        """
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*ALIVEMCP, "run", "--config", str(self.config_path), *self.run_args()],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=subprocess_env(self.env),
            cwd=REPO,
        )
        proc = self.proc

        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"daemon exited with {proc.returncode}:\n{self.logs()}")
            port = self._announced_port(offset)
            if not port:
                return False
            self.port = port
            try:
                self.get("/healthz")
            except OSError:  # urllib's URLError and ssl's errors are OSErrors
                return False
            return True

        poll_until(
            healthy, self.start_timeout, "the daemon's /healthz", every=0.1, context=self.logs
        )
        return self

    def run_args(self) -> list[str]:
        """The arguments after ``alivemcp run --config PATH``."""
        return ["--listen", f"127.0.0.1:{self.port}"]

    def _announced_port(self, offset: int) -> int:
        """The port in this start's "alivemcp running" log line (0 until it is written)."""
        with self.log_path.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
        for line in text.splitlines():
            found = _LISTEN_FIELD.search(line) if "alivemcp running" in line else None
            if found:
                return int(found.group(1))
        return 0

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.base_url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, (status, body)
        return json.loads(body)

    def status_of(self, check: str) -> dict[str, Any]:
        """The check's /status row ({} while the daemon does not know it yet)."""
        rows = {row["check"]: row for row in self.get_json("/status")["checks"]}
        return rows.get(check, {})

    def metric(self, name: str, **labels: str) -> float | None:
        """The sample of ``name`` with exactly ``labels`` on /metrics (None: none)."""
        for line in self.get("/metrics")[1].splitlines():
            sample, _, value = line.rpartition(" ")
            head, _, rest = sample.partition("{")
            pairs = [p.split("=", 1) for p in rest.rstrip("}").split(",") if p]
            if head == name and {k: v.strip('"') for k, v in pairs} == labels:
                return float(value)
        return None

    def wait_for(self, predicate: Any, timeout: float = 30.0, what: str = "condition") -> Any:
        return poll_until(predicate, timeout, what, every=0.1, context=lambda: self.logs()[-3000:])

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 20.0) -> int:
        import signal as _signal

        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(_signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()


def poll_until(
    predicate: Callable[[], Any],
    within: float,
    what: str,
    *,
    every: float,
    context: Callable[[], str] = str,
) -> Any:
    """Call ``predicate`` every ``every`` seconds until it returns something truthy, and return
    that; at the deadline fail saying what was waited for, the last value seen and
    ``context()`` (a log tail). For what has no event to wait on but its own state: a process's
    output, a file, an answer over HTTP."""
    import time

    deadline = time.monotonic() + within
    while True:
        try:
            last = predicate()
        except Exception as exc:
            # Say what was being waited for, with the log tail, not only the bare error.
            raise AssertionError(f"while waiting for {what}: {exc!r}\n{context()}") from exc
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {within:g}s waiting for {what}; last={last!r}\n{context()}"
            )
        time.sleep(every)


async def run_until(
    run: Any, done: Any, what: str, within: float = 60.0, pause: float = 1.0
) -> Any:
    """Call ``run`` (a check's run, or any async read of a real component's state) until its
    value satisfies ``done``: real clusters change state on their own schedule (fencing,
    leader election, ISR expansion), so tests poll their state, with a deadline."""
    import asyncio
    import time

    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await run()
        if done(last):
            return last
        await asyncio.sleep(pause)
    seen = f"still {last.status}: {last.reason}" if isinstance(last, CheckResult) else f"{last!r}"
    raise AssertionError(f"{what}: after {within:g}s, {seen}")


async def run_demo_check(
    moto: Any, tmp_path: Path, start: Any, check: str
) -> tuple[int, dict[str, Any]]:
    """One demo part (``start``, e.g. ``demo_kinesis.start``) on the test's moto, then its
    check from config/demo.yaml through the real ``alivemcp check``: (exit code, the row)."""
    from alivemcp.testbed.stack import DemoStack

    doc = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    doc["checks"] = [c for c in doc["checks"] if c["name"] == check]
    doc.pop("alerting", None)
    doc.pop("discovery", None)  # the demo's registry is its own part (demo_registry)
    path = tmp_path / f"demo-{check}.yaml"
    path.write_text(yaml.safe_dump(doc))
    stack = DemoStack(workdir=tmp_path, moto=moto)
    stack.set_env("DEMO_MOTO_URL", moto.url)
    try:
        await start(stack)
        code, rows = check_json(path, env=stack.env)
    finally:
        await stack.close()
    return code, rows[check]


class Webhook:
    """A real HTTP receiver on loopback that records every POSTed JSON body."""

    def __init__(self) -> None:
        self.bodies: list[Any] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                bodies.append(json.loads(self.rfile.read(length) or b"null"))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@functools.cache
def kustomize(root: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl apply -k root`` sends: rendered by ``kubectl kustomize``, or by
    the kustomize ``make test-deps`` builds into .cache/bin on a machine without kubectl."""
    kubectl = shutil.which("kubectl")
    built = REPO / ".cache" / "bin" / "kustomize"
    if kubectl is not None:
        command = [kubectl, "kustomize", str(root)]
    elif built.is_file():
        command = [str(built), "build", str(root)]
    else:
        raise AssertionError("neither kubectl nor .cache/bin/kustomize: run make test-deps")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
