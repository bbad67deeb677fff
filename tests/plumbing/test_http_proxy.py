"""HTTP(S) proxies for the probe client, against a real local proxy: the standard variables
as httpx and curl read them, a per-session proxy URL, CONNECT tunnels for https."""

from __future__ import annotations

import base64
import socket
import ssl
from collections.abc import Iterator

import pytest

from alivemcp.plumbing._http_proxy import NoProxy, ProxySettings
from alivemcp.plumbing.http import (
    ClientConfigError,
    HttpClients,
    ProxyError,
    read_capped,
)
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check
from tests.support.http_client_stand_ins import Run
from tests.support.http_proxy import LocalProxy
from tests.support.http_servers import Authority, HttpServer


async def _get(
    clients: HttpClients, url: str, *, proxy: str | None = None, ca_file: str | None = None
) -> tuple[int, bytes]:
    session = clients.probe_session(proxy=proxy, ca_file=ca_file)
    try:
        async with session.request("GET", url, timeout=5) as response:
            return response.status, await read_capped(response)
    finally:
        await session.aclose()


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("proxy-tls"))


@pytest.fixture(scope="module")
def origin() -> Iterator[HttpServer]:
    with HttpServer("127.0.0.1") as server:
        yield server


@pytest.fixture(scope="module")
def tls_origin(authority: Authority) -> Iterator[tuple[HttpServer, list[str | None]]]:
    """An https origin recording the SNI name of each handshake."""
    context = authority.server_context()
    names: list[str | None] = []

    def sni(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = sni  # type: ignore[assignment]
    with HttpServer("127.0.0.1", tls=context) as server:
        yield server, names


def test_plain_http_through_the_environments_proxy(run: Run, origin: HttpServer) -> None:
    with LocalProxy() as proxy:
        clients = HttpClients(environ={"HTTP_PROXY": proxy.url})
        status, body = run(_get(clients, origin.url("/through?x=1", host="localhost")))
    assert status == 200
    assert [(s.method, s.target) for s in proxy.seen] == [
        ("GET", f"http://localhost:{origin.port}/through?x=1")
    ]
    last = origin.requests[-1]
    assert (last.target, last.headers["host"]) == ("/through?x=1", f"localhost:{origin.port}")
    assert b'"path": "/through?x=1"' in body


def test_https_through_a_connect_tunnel_with_credentials(
    run: Run, authority: Authority, tls_origin: tuple[HttpServer, list[str | None]]
) -> None:
    server, sni_names = tls_origin
    with LocalProxy(credentials=("probe", "s3cr:t")) as proxy:
        clients = HttpClients(environ={"HTTPS_PROXY": "http://ignored.example.test:1"})
        url = proxy.url.replace("s3cr:t", "s3cr%3At")  # userinfo is percent-encoded in URLs
        status, _ = run(
            _get(
                clients,
                server.url("/tls", host="localhost"),
                proxy=url,
                ca_file=str(authority.ca_file),
            )
        )
    assert status == 200
    assert [(s.method, s.target) for s in proxy.seen] == [("CONNECT", f"localhost:{server.port}")]
    expected = "Basic " + base64.b64encode(b"probe:s3cr:t").decode()
    assert proxy.seen[0].authorization == expected
    assert sni_names[-1] == "localhost"  # TLS (and its SNI) is with the origin, not the proxy
    assert "proxy-authorization" not in server.requests[-1].headers


def test_a_refused_connect_blames_the_path_and_hides_credentials(
    run: Run, authority: Authority, tls_origin: tuple[HttpServer, list[str | None]]
) -> None:
    server, _ = tls_origin
    with LocalProxy(credentials=("probe", "right")) as proxy:
        clients = HttpClients(environ={})
        wrong = f"http://probe:wrong-password@127.0.0.1:{proxy.port}"
        with pytest.raises(ProxyError) as caught:
            run(_get(clients, server.url(), proxy=wrong, ca_file=str(authority.ca_file)))
    assert str(caught.value) == (
        f"proxy 127.0.0.1:{proxy.port} refused CONNECT to "
        f"127.0.0.1:{server.port}: 407 Proxy Authentication Required"
    )
    assert "wrong-password" not in repr(caught.value)
    with (
        LocalProxy(refuse=(f"127.0.0.1:{server.port}",)) as proxy,
        pytest.raises(ProxyError, match=r"refused CONNECT .*: 403 Forbidden"),
    ):
        run(_get(clients, server.url(), proxy=proxy.url, ca_file=str(authority.ca_file)))


def test_an_unreachable_proxy_is_a_proxy_error(run: Run, origin: HttpServer) -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
        clients = HttpClients(environ={"http_proxy": f"http://127.0.0.1:{port}"})
        with pytest.raises(ProxyError) as caught:
            run(_get(clients, origin.url()))
    assert str(caught.value) == (f"cannot connect to proxy 127.0.0.1:{port}: Connection refused")


def test_no_proxy_and_direct_bypass_the_proxy(run: Run, origin: HttpServer) -> None:
    with LocalProxy() as proxy:
        env = {"HTTP_PROXY": proxy.url, "NO_PROXY": "example.test,127.0.0.1"}
        clients = HttpClients(environ=env)
        assert run(_get(clients, origin.url()))[0] == 200
        assert run(_get(clients, origin.url(host="localhost"), proxy="direct"))[0] == 200
        assert proxy.seen == []
        assert run(_get(clients, origin.url(host="localhost")))[0] == 200
        assert len(proxy.seen) == 1


def test_unusable_proxy_settings_are_the_probers_problem() -> None:
    clients = HttpClients(environ={"HTTPS_PROXY": "socks5://127.0.0.1:1080"})
    with pytest.raises(ClientConfigError, match="unsupported proxy scheme 'https'"):
        clients.probe_session(proxy="https://127.0.0.1:3128")
    # The environment's bad proxy only matters to targets that would use it.
    settings = clients.proxy_settings(None)
    assert settings is not None
    assert settings.route(False, "example.test", 80) is None
    with pytest.raises(ClientConfigError, match="proxy from the environment: unsupported"):
        settings.route(True, "example.test", 443)


def test_environment_variables_as_httpx_and_curl_read_them() -> None:
    def route(env: dict[str, str], https: bool, host: str, port: int) -> str | None:
        settings = ProxySettings.from_environ(env)
        proxy = settings.route(https, host, port) if settings else None
        return proxy.label if proxy else None

    assert ProxySettings.from_environ({}) is None
    assert ProxySettings.from_environ({"NO_PROXY": "*", "HTTP_PROXY": "p:1"}) is None
    env = {
        "HTTP_PROXY": "http://upper:1",
        "http_proxy": "http://lower:2",
        "HTTPS_PROXY": "secure:3",
    }
    assert route(env, False, "a.test", 80) == "lower:2"  # lower case wins
    assert route(env, True, "a.test", 443) == "secure:3"  # no scheme: an http proxy
    assert route({"ALL_PROXY": "all:4"}, True, "a.test", 443) == "all:4"
    assert route({"ALL_PROXY": "all:4", "HTTPS_PROXY": "s:5"}, True, "a.test", 443) == "s:5"
    assert route({"HTTP_PROXY": "h:6"}, True, "a.test", 443) is None


@pytest.mark.parametrize(
    ("entry", "host", "port", "bypass"),
    [
        ("example.com", "example.com", 443, True),
        ("example.com", "api.example.com", 443, True),
        ("example.com", "badexample.com", 443, False),
        (".example.com", "example.com", 443, True),
        ("*.example.com", "api.example.com", 443, True),
        ("example.com:8443", "example.com", 8443, True),
        ("example.com:8443", "example.com", 443, False),
        ("10.0.0.0/8", "10.1.2.3", 80, True),
        ("10.0.0.0/8", "11.1.2.3", 80, False),
        ("127.0.0.1", "127.0.0.1", 80, True),
        ("::1", "::1", 80, True),
        ("[::1]:8080", "::1", 8080, True),
        ("[::1]:8080", "::1", 80, False),
        ("fd00::/8", "fd12::1", 80, True),
        ("localhost", "localhost", 80, True),
        ("Example.COM.", "example.com", 80, True),
        ("http://example.com", "example.com", 80, True),
        ("*", "anything.test", 80, True),
        ("other.test, ,example.com", "example.com", 80, True),
    ],
)
def test_no_proxy_entries(entry: str, host: str, port: int, bypass: bool) -> None:
    assert NoProxy(entry).matches(host, port) is bypass


async def test_mcp_probe_honours_http_proxy(
    lab: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP probe and alerting (httpx) agree: both go through HTTP_PROXY."""
    with LocalProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        url = lab.base.replace("127.0.0.1", "localhost") + "/json"
        result = await run_check(
            "mcp_endpoint", {"url": url, "transport": "streamable_http"}, timeout=10
        )
    assert result.status == "up", result.reason
    assert proxy.seen and all(s.target.startswith(url) for s in proxy.seen), proxy.seen
