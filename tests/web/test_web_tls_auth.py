"""The daemon served like an exporter: real ``alivemcp run`` processes with a web config file
(TLS, client certificates, basic auth), a real Prometheus scraping them, certificate rotation
and a broken file while running, a reload of the main config, and the status page in headless
Chromium when the status behind it needs credentials.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import shutil
import signal
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import bcrypt
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import (
    DaemonProcess,
    cli,
    free_port,
    poll_until,
    write_daemon_config,
)
from tests.support.chromium_cdp import (
    Browser,
    csp_watching,
)
from tests.support.prometheus import Prometheus
from tests.web.webcerts import TestCa, serial_of

USER = "prometheus"
PASSWORD = "scrape-me-please"
# Cost 4 keeps the tests quick; the cost is the file's business, not the daemon's.
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
CHALLENGE = 'Basic realm="alivemcp"'
CHECKS = [
    {"name": "alpha", "probe": "test_static", "interval": 1},
    {"name": "beta", "probe": "test_static", "interval": 1, "params": {"status": "down"}},
]


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def fetch(
    port: int,
    path: str,
    *,
    tls: ssl.SSLContext | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    body: bytes | None = None,
) -> Answer:
    """One request, the path sent exactly as given (``/badge/../status`` too)."""
    conn: http.client.HTTPConnection = (
        http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=30)
        if tls is not None
        else http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    )
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def client_tls(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


def served_serial(port: int, tls: ssl.SSLContext) -> int:
    """The serial number of the certificate a new connection is shown."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        tls.wrap_socket(raw, server_hostname="127.0.0.1") as conn,
    ):
        der = conn.getpeercert(binary_form=True)
    assert der is not None
    return serial_of(der)


class WebDaemon(DaemonProcess):
    """``alivemcp run`` with ``--web.config.file`` (when given), answering over ``tls`` with
    ``auth``'s credentials (when given)."""

    def __init__(
        self,
        config_path: Path,
        *,
        web_config: Path | None = None,
        tls: ssl.SSLContext | None = None,
        auth: tuple[str, str] | None = None,
    ) -> None:
        super().__init__(config_path)
        self.web_config = web_config
        self.tls = tls
        self.auth = auth

    def run_args(self) -> list[str]:
        web = ["--web.config.file", str(self.web_config)] if self.web_config is not None else []
        return [*super().run_args(), *web]

    def fetch(self, path: str, **kwargs: Any) -> Answer:
        return fetch(self.port, path, tls=self.tls, **kwargs)

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        given = {**(basic(*self.auth) if self.auth else {}), **(headers or {})}
        answer = self.fetch(path, headers=given)
        return answer.status, answer.body.decode()

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the daemon's own /metrics (0 when absent)."""
        status, text = self.get("/metrics")
        assert status == 200, (status, text)
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestCa:
    ca = TestCa(tmp_path_factory.mktemp("pki"))
    ca.issue("server")
    ca.issue("prometheus", sans=("prometheus",), client=True)
    ca.issue("intruder", sans=("intruder",), client=True)
    return ca


def daemon_dir(root: Path, pki: TestCa, web: dict[str, Any], **server: Any) -> Path:
    """A config and a web config (beside it, naming its own copy of the server certificate)."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("server.crt", "server.key"):
        shutil.copy(pki.directory / name, root / name)
    (root / "web.yml").write_text(yaml.safe_dump(web))
    return write_daemon_config(root / "alivemcp.yaml", CHECKS, server=server)


TLS_SECTION = {"cert_file": "server.crt", "key_file": "server.key"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, pki: TestCa) -> Iterator[WebDaemon]:
    """TLS and basic auth; the status page and badges public; two extra headers."""
    root = tmp_path_factory.mktemp("guarded")
    web = {
        "tls_server_config": TLS_SECTION,
        "http_server_config": {
            "headers": {"X-Frame-Options": "deny", "Strict-Transport-Security": "max-age=60"}
        },
        "basic_auth_users": {USER: HASH},
    }
    config = daemon_dir(root, pki, web, public_paths=["/", "/badge/"])
    tls = client_tls(pki.ca_file)
    with WebDaemon(config, web_config=root / "web.yml", tls=tls, auth=(USER, PASSWORD)) as d:
        yield d


@pytest.fixture(scope="module")
def mutual(tmp_path_factory: pytest.TempPathFactory, pki: TestCa) -> Iterator[WebDaemon]:
    """TLS with client certificates required and verified, one SAN allowed; no passwords."""
    root = tmp_path_factory.mktemp("mutual")
    shutil.copy(pki.ca_file, root / "clients-ca.crt")
    web = {
        "tls_server_config": {
            **TLS_SECTION,
            "client_auth_type": "RequireAndVerifyClientCert",
            "client_ca_file": "clients-ca.crt",
            "client_allowed_sans": ["prometheus"],
        }
    }
    config = daemon_dir(root, pki, web)
    d = pki.directory
    tls = client_tls(pki.ca_file, d / "prometheus.crt", d / "prometheus.key")
    with WebDaemon(config, web_config=root / "web.yml", tls=tls) as daemon:
        yield daemon


# -- credentials -------------------------------------------------------------------------------


def test_credentials_are_asked_everywhere_but_the_public_paths(guarded: WebDaemon) -> None:
    before = guarded.metric("alivemcp_http_auth_failures_total", reason="missing")
    for path in ("/status", "/status?view=brief", "/metrics", "/api/v1/checks", "/nowhere"):
        answer = guarded.fetch(path)
        assert answer.status == 401, path
        assert answer.headers["www-authenticate"] == CHALLENGE
        assert answer.json() == {"error": "credentials required"}
        assert answer.headers["x-frame-options"] == "deny"  # the web config's headers too
    mcp = guarded.fetch(
        "/mcp", method="POST", body=b"{}", headers={"Content-Type": "application/json"}
    )
    assert mcp.status == 401 and mcp.headers["www-authenticate"] == CHALLENGE
    # Not a badge: a dot segment is never public.
    assert guarded.fetch("/badge/../status").status == 401
    assert guarded.fetch("/badge/%2e%2e/status").status == 401
    assert guarded.metric("alivemcp_http_auth_failures_total", reason="missing") == before + 8

    wrong = guarded.fetch("/status", headers=basic(USER, "not-the-password"))
    assert wrong.status == 401 and wrong.headers["www-authenticate"] == CHALLENGE
    assert guarded.fetch("/status", headers=basic("nobody", PASSWORD)).status == 401
    assert guarded.metric("alivemcp_http_auth_failures_total", reason="wrong_password") >= 1
    assert guarded.metric("alivemcp_http_auth_failures_total", reason="unknown_user") >= 1
    assert PASSWORD not in guarded.logs() and "not-the-password" not in guarded.logs()

    ok = guarded.fetch("/status", headers=basic(USER, PASSWORD))
    assert ok.status == 200
    assert {row["check"] for row in ok.json()["checks"]} == {"alpha", "beta"}
    assert ok.headers["strict-transport-security"] == "max-age=60"

    page = guarded.fetch("/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    # The page keeps its own Content-Security-Policy.
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    badge = guarded.fetch("/badge/alpha/status.svg")
    assert badge.status == 200 and badge.headers["content-type"].startswith("image/svg+xml")
    assert guarded.fetch("/healthz").json() == {"ok": True}
    ready = guarded.fetch("/readyz")  # open; see the in-process test below for its body
    assert set(ready.json()) <= {"ready", "reason", "pending_count"}

    # TLS only: a plain HTTP client gets no answer from it.
    with pytest.raises((http.client.HTTPException, OSError)):
        fetch(guarded.port, "/healthz")


# -- a real Prometheus -------------------------------------------------------------------------


def test_a_real_prometheus_scrapes_over_tls_with_basic_auth_and_a_client_certificate(
    guarded: WebDaemon, mutual: WebDaemon, pki: TestCa, tmp_path: Path
) -> None:
    d = pki.directory

    def job(name: str, daemon: WebDaemon, **settings: Any) -> dict[str, Any]:
        tls = {"ca_file": str(pki.ca_file), **settings.pop("tls", {})}
        return {
            "job_name": name,
            "scheme": "https",
            "tls_config": tls,
            "static_configs": [{"targets": [f"127.0.0.1:{daemon.port}"]}],
            **settings,
        }

    client = {"cert_file": str(d / "prometheus.crt"), "key_file": str(d / "prometheus.key")}
    intruder = {"cert_file": str(d / "intruder.crt"), "key_file": str(d / "intruder.key")}
    prometheus = Prometheus.scraping(
        tmp_path,
        [
            job("basic_auth", guarded, basic_auth={"username": USER, "password": PASSWORD}),
            job("wrong_password", guarded, basic_auth={"username": USER, "password": "nope"}),
            job("client_certificate", mutual, tls=client),
            job("no_client_certificate", mutual),
            job("san_not_allowed", mutual, tls=intruder),
        ],
    )
    try:
        refused = ("wrong_password", "no_client_certificate", "san_not_allowed")
        good_ups = 'sum_over_time(up{job=~"basic_auth|client_certificate"}[5m])'
        refused_tries = f'count_over_time(up{{job=~"{"|".join(refused)}"}}[5m])'

        def scraped_enough() -> bool:
            ups, tries = prometheus.values(good_ups), prometheus.values(refused_tries)
            return (
                len(ups) == 2
                and min(ups.values()) >= 5
                and len(tries) == len(refused)
                and min(tries.values()) >= 5
            )

        # up == 1 five times with the right credentials; five tries of each refused job.
        poll_until(
            scraped_enough,
            90,
            "five good scrapes, and five refused ones of each job",
            every=0.5,
            context=lambda: prometheus.log_path.read_text()[-3000:],
        )
        # The refused jobs never got in: up was 0 every time.
        never = prometheus.values(f'max_over_time(up{{job=~"{"|".join(refused)}"}}[5m])')
        assert never == dict.fromkeys(refused, 0.0)
        errors = {
            t["labels"]["job"]: t["lastError"]
            for t in prometheus.api("/api/v1/targets")["data"]["activeTargets"]
        }
        print(
            "\nPrometheus, up over 5m (good jobs: sum; refused jobs: max):",
            prometheus.values(good_ups),
            never,
            "\nlastError per refused job:",
            {job: errors[job] for job in refused},
        )
        assert "401 Unauthorized" in errors["wrong_password"]
        assert "403 Forbidden" in errors["san_not_allowed"]
        assert errors["no_client_certificate"]  # the handshake is refused
        # The refusals, counted by the daemons (and read by Prometheus itself).
        refusals = "alivemcp_http_auth_failures_total{{job={job!r}, reason={reason!r}}} >= 5"
        for job, reason in (
            ("basic_auth", "wrong_password"),  # the guarded daemon's, scraped with the password
            ("client_certificate", "client_certificate"),  # the mutual daemon's
        ):
            query = refusals.format(job=job, reason=reason)
            poll_until(
                lambda query=query: prometheus.values(query),
                30,
                f"{reason} refusals counted",
                every=0.5,
            )
    finally:
        prometheus.stop()
    # One bcrypt for the right password in all; each wrong one costs its own.
    wrong = guarded.metric("alivemcp_http_auth_failures_total", reason="wrong_password")
    unknown = guarded.metric("alivemcp_http_auth_failures_total", reason="unknown_user")
    assert guarded.metric("alivemcp_http_auth_bcrypt_checks_total") <= wrong + unknown + 1


# -- changes while running ---------------------------------------------------------------------


def test_a_certificate_rotated_while_running(tmp_path: Path, pki: TestCa) -> None:
    config = daemon_dir(tmp_path, pki, {"tls_server_config": TLS_SECTION})
    tls = client_tls(pki.ca_file)
    with WebDaemon(config, web_config=tmp_path / "web.yml", tls=tls) as daemon:
        first = served_serial(daemon.port, tls)
        kept = http.client.HTTPSConnection("127.0.0.1", daemon.port, context=tls, timeout=30)
        kept.request("GET", "/healthz")
        assert kept.getresponse().read() == b'{"ok": true}'
        rotated = pki.issue(
            "rotated", cert_path=tmp_path / "server.crt", key_path=tmp_path / "server.key"
        )
        assert rotated.serial != first
        poll_until(
            lambda: served_serial(daemon.port, tls) == rotated.serial,
            30,
            "new connections shown the new certificate",
            every=0.2,
            context=daemon.logs,
        )
        kept.request("GET", "/healthz")  # a connection made before goes on
        assert kept.getresponse().status == 200
        kept.close()
        assert daemon.metric("alivemcp_web_config_reloads_total", result="success") == 2
        assert daemon.metric("alivemcp_web_config_last_reload_successful") == 1
        assert '"event": "web config reloaded"' in daemon.logs()


def test_a_broken_web_config_is_refused_at_start_and_kept_out_while_running(
    tmp_path: Path, pki: TestCa
) -> None:
    web = {"tls_server_config": TLS_SECTION, "basic_auth_users": {USER: HASH}}
    broken = {**web, "http_server_config": {"headers": {"Server": "alivemcp"}}}
    (tmp_path / "broken.yml").write_text(yaml.safe_dump(broken))
    # server.web_config_file names the broken file; --web.config.file wins over it.
    config = daemon_dir(tmp_path, pki, web, web_config_file="broken.yml")
    port = str(free_port())
    refused = cli("run", "--config", str(config), "--listen", f"127.0.0.1:{port}", timeout=60)
    assert refused.returncode == 2
    assert f"{tmp_path / 'broken.yml'}: invalid configuration" in refused.stderr
    assert "http_server_config.headers: HTTP header 'Server' can not be configured" in (
        refused.stderr
    )

    tls = client_tls(pki.ca_file)
    web_file = tmp_path / "web.yml"
    with WebDaemon(config, web_config=web_file, tls=tls, auth=(USER, PASSWORD)) as daemon:
        web_file.write_text(yaml.safe_dump(broken))
        daemon.wait_for(
            lambda: daemon.metric("alivemcp_web_config_last_reload_successful") == 0,
            what="the broken file refused",
        )
        # More looks at the same broken file (the checks run every second; the watcher looks
        # every second too): it is said once.
        runs = daemon.metric("alivemcp_check_runs_total", check="alpha", result="up")
        daemon.wait_for(
            lambda: (
                daemon.metric("alivemcp_check_runs_total", check="alpha", result="up") >= runs + 3
            ),
            what="three more runs",
        )
        assert daemon.logs().count("web config refused; still serving the previous one") == 1
        assert daemon.get("/status")[0] == 200  # the old users, the old certificate
        assert daemon.metric("alivemcp_web_config_reloads_total", result="failure") == 1

        web_file.write_text(yaml.safe_dump({**web, "basic_auth_users": {"ops": HASH}}))
        daemon.wait_for(
            lambda: daemon.fetch("/status", headers=basic("ops", PASSWORD)).status == 200,
            what="the fixed file served",
        )
        assert daemon.fetch("/status", headers=basic(USER, PASSWORD)).status == 401
        daemon.auth = ("ops", PASSWORD)
        assert daemon.metric("alivemcp_web_config_last_reload_successful") == 1


def test_a_reload_applies_public_paths_and_another_web_config_file(
    tmp_path: Path, pki: TestCa
) -> None:
    (tmp_path / "one.yml").write_text(yaml.safe_dump({"basic_auth_users": {"alice": HASH}}))
    (tmp_path / "two.yml").write_text(yaml.safe_dump({"basic_auth_users": {"bob": HASH}}))
    config = write_daemon_config(
        tmp_path / "alivemcp.yaml",
        CHECKS,
        server={"web_config_file": "one.yml", "public_paths": ["/"]},
    )
    with WebDaemon(config, auth=("alice", PASSWORD)) as daemon:  # plain HTTP, no flag
        assert daemon.fetch("/").status == 200
        assert daemon.fetch("/status").status == 401
        assert daemon.get("/status")[0] == 200
        write_daemon_config(
            config, CHECKS, server={"web_config_file": "two.yml", "public_paths": []}
        )
        daemon.signal(signal.SIGHUP)
        daemon.wait_for(lambda: daemon.fetch("/").status == 401, what="/ no longer public")
        daemon.wait_for(
            lambda: daemon.fetch("/status", headers=basic("bob", PASSWORD)).status == 200,
            what="two.yml served",
        )
        assert daemon.fetch("/status", headers=basic("alice", PASSWORD)).status == 401


# -- the status page ---------------------------------------------------------------------------


class PromptCancellingBrowser(Browser):
    """Headless Chromium whose user cancels the sign-in prompt, as one without the password
    does. Headless, a request answered 401 with a challenge waits for credentials that never
    come; here the DevTools Fetch domain answers each challenge with CancelAuth, so the page
    gets the 401, as it does in a browser once its prompt is dismissed."""

    async def cancel_sign_in_prompts(self) -> None:
        await self.send("Fetch.enable", {"handleAuthRequests": True, "patterns": [{}]})

    async def _read(self) -> None:
        assert self._ws is not None
        ws = self._ws
        loop = asyncio.get_running_loop()
        # The base reader reads the rest: the Fetch domain's pauses are answered here first.
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._ws = _Replay(queue, ws)  # type: ignore[assignment]
        base = loop.create_task(super()._read())
        try:
            async for msg in ws:
                data = json.loads(msg.data) if msg.type == aiohttp.WSMsgType.TEXT else {}
                method, params = data.get("method"), data.get("params", {})
                if method == "Fetch.requestPaused":
                    self._answer("Fetch.continueRequest", {"requestId": params["requestId"]})
                elif method == "Fetch.authRequired":
                    cancel = {"response": "CancelAuth"}
                    self._answer(
                        "Fetch.continueWithAuth",
                        {"requestId": params["requestId"], "authChallengeResponse": cancel},
                    )
                else:
                    queue.put_nowait(msg)
        finally:
            self._ws = ws
            base.cancel()

    def _answer(self, method: str, params: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self.send(method, params))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())


class _Replay:
    """The web socket as the base reader sees it: the messages left for it, one at a time;
    everything else is the socket's own."""

    def __init__(self, queue: asyncio.Queue[Any], ws: Any) -> None:
        self._queue = queue
        self._ws = ws

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    def __aiter__(self) -> _Replay:
        return self

    async def __anext__(self) -> Any:
        return await self._queue.get()


@pytest.fixture
async def browser() -> AsyncIterator[PromptCancellingBrowser]:
    async with csp_watching(PromptCancellingBrowser, width=1200, height=800) as b:
        yield b


async def test_the_public_status_page_says_the_status_needs_credentials(
    tmp_path: Path, browser: PromptCancellingBrowser
) -> None:
    (tmp_path / "web.yml").write_text(yaml.safe_dump({"basic_auth_users": {USER: HASH}}))
    config = write_daemon_config(tmp_path / "alivemcp.yaml", CHECKS, server={"public_paths": ["/"]})
    with WebDaemon(config, web_config=tmp_path / "web.yml") as daemon:
        # The page is public; its fetch of the status is challenged, and the prompt cancelled.
        await browser.cancel_sign_in_prompts()
        await browser.goto(f"{daemon.base_url}/")
        note = await browser.wait_for(
            "(document.querySelector('#spacer .auth-note') || {}).textContent"
        )
        assert note.startswith("This status needs credentials.")
        assert "Sign in at status, then reload this page." in note
        assert await browser.evaluate("document.getElementById('updated').textContent") == (
            "cannot load status: this status needs credentials"
        )
        assert await browser.evaluate("document.querySelectorAll('#spacer .row').length") == 0
        # With credentials (as the browser sends them once signed in) the rows come.
        await browser.send("Network.enable")
        await browser.send("Network.setExtraHTTPHeaders", {"headers": basic(USER, PASSWORD)})
        await browser.goto(f"{daemon.base_url}/")
        await browser.wait_for("document.querySelectorAll('#spacer .row.check').length === 2")
        assert await browser.evaluate("document.querySelector('#spacer .auth-note')") is None
        assert await browser.evaluate("window.__csp") == []
        assert browser.exceptions == []


# -- what is always open -----------------------------------------------------------------------


async def test_readyz_is_open_and_names_no_check_behind_credentials(tmp_path: Path) -> None:
    from alivemcp.config.model import ServerConfig
    from alivemcp.engine.results import CheckInfo
    from alivemcp.engine.status import StatusStore
    from alivemcp.web.auth import WebAccess
    from alivemcp.web.metrics import Metrics
    from alivemcp.web.server import HttpServer
    from alivemcp.web.webconfig import WebConfigWatcher, load_web_config

    (tmp_path / "web.yml").write_text(yaml.safe_dump({"basic_auth_users": {USER: HASH}}))
    answers = {}
    for guarded in (False, True):
        store = StatusStore()
        store.set_checks([CheckInfo("payments-internal", "test_static")])
        metrics = Metrics(store)
        watcher = WebConfigWatcher(load_web_config(tmp_path / "web.yml" if guarded else None))
        access = WebAccess(watcher, ServerConfig(), metrics.registry)
        server = HttpServer(store, metrics, lambda: True, lambda: True, access=access)
        await server.start("127.0.0.1", 0)
        try:
            assert server.port is not None
            answer = await asyncio.to_thread(fetch, server.port, "/readyz")
            assert answer.status == 503
            answers[guarded] = answer.json()
        finally:
            await server.stop()
    assert answers[False]["pending"] == ["payments-internal"]
    assert answers[True] == {"ready": False, "reason": "checks not run yet", "pending_count": 1}


async def test_client_certificates_required_by_a_new_version_apply_to_new_connections(
    tmp_path: Path, pki: TestCa
) -> None:
    from alivemcp.config.model import ServerConfig
    from alivemcp.engine.status import StatusStore
    from alivemcp.web.auth import WebAccess
    from alivemcp.web.metrics import Metrics
    from alivemcp.web.server import HttpServer
    from alivemcp.web.webconfig import WebConfigWatcher, load_web_config

    daemon_dir(tmp_path, pki, {"tls_server_config": TLS_SECTION})
    shutil.copy(pki.ca_file, tmp_path / "clients-ca.crt")
    web_file = tmp_path / "web.yml"
    # Looked at by the test (check()), not by the watcher's own loop.
    watcher = WebConfigWatcher(load_web_config(web_file), poll_seconds=3600)
    store = StatusStore()
    metrics = Metrics(store)
    access = WebAccess(watcher, ServerConfig(), metrics.registry)
    server = HttpServer(store, metrics, lambda: True, lambda: True, access=access)
    await server.start("127.0.0.1", 0)
    anonymous = client_tls(pki.ca_file)
    d = pki.directory
    certified = client_tls(pki.ca_file, d / "prometheus.crt", d / "prometheus.key")
    assert server.port is not None
    port = server.port

    async def healthz(tls: ssl.SSLContext) -> int:
        return (await asyncio.to_thread(fetch, port, "/healthz", tls=tls)).status

    async def apply(section: dict[str, Any]) -> None:
        web_file.write_text(yaml.safe_dump({"tls_server_config": {**TLS_SECTION, **section}}))
        await watcher.check()  # changed: it waits for the change to settle
        assert await watcher.check()

    try:
        assert await healthz(anonymous) == 200
        await apply(
            {"client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "clients-ca.crt"}
        )
        with pytest.raises((OSError, http.client.HTTPException)):
            await healthz(anonymous)
        assert await healthz(certified) == 200
        await apply(
            {"client_auth_type": "VerifyClientCertIfGiven", "client_ca_file": "clients-ca.crt"}
        )
        assert await healthz(anonymous) == 200 and await healthz(certified) == 200
        await apply({})
        assert await healthz(anonymous) == 200
    finally:
        await server.stop()
