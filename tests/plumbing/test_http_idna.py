"""Non-ASCII hosts, paths and header values: the client sends their wire forms (IDNA
A-labels, percent-encoding) or refuses with a clear error, never a UnicodeEncodeError."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from alivemcp.plumbing.http import HttpClients, InvalidRequest, ProtocolError, read_capped
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check
from tests.support.http_client_stand_ins import Run
from tests.support.http_servers import Authority, HttpServer

A_LABEL = "xn--bcher-kva.localhost"  # bücher.localhost


async def _get(
    clients: HttpClients, url: str, headers: dict[str, str] | None = None, **tls: Any
) -> int:
    session = clients.probe_session(proxy="direct", **tls)
    try:
        async with session.request("GET", url, timeout=5, headers=headers) as response:
            await read_capped(response)
            return response.status
    finally:
        await session.aclose()


def test_an_idn_host_is_sent_as_its_a_label(run: Run) -> None:
    with HttpServer("127.0.0.1") as server:
        status = run(
            _get(
                HttpClients(environ={}),
                f"http://Bücher.localhost:{server.port}/b%C3%BCcher/пуск?q=ä",
            )
        )
        assert status == 200
        seen = server.requests[-1]
    assert seen.headers["host"] == f"{A_LABEL}:{server.port}"
    assert seen.target == "/b%C3%BCcher/%D0%BF%D1%83%D1%81%D0%BA?q=%C3%A4"


def test_tls_sni_and_certificate_check_use_the_a_label(
    run: Run, tmp_path_factory: pytest.TempPathFactory
) -> None:
    authority = Authority(tmp_path_factory.mktemp("idn-tls"))
    context = authority.server_context(hosts=(A_LABEL,))
    names: list[str | None] = []

    def sni(_: ssl.SSLObject, name: str | None, __: ssl.SSLContext) -> None:
        names.append(name)

    context.sni_callback = sni  # type: ignore[assignment]
    with HttpServer("127.0.0.1", tls=context) as server:
        status = run(
            _get(
                HttpClients(environ={}),
                f"https://bücher.localhost:{server.port}/",
                ca_file=str(authority.ca_file),
            )
        )
    assert status == 200
    assert names == [A_LABEL]


@pytest.mark.parametrize("host", ["☃.example.test", "-bücher.example.test", "a\u200db.test"])
def test_a_host_without_an_a_label_is_a_clear_error(run: Run, host: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        run(_get(HttpClients(environ={}), f"http://{host}/mcp"))
    assert isinstance(caught.value, ProtocolError)
    assert str(caught.value).startswith(f"host {host!r} cannot be IDNA-encoded: ")


def test_a_header_value_outside_latin1_is_refused_before_sending(run: Run) -> None:
    with HttpServer("127.0.0.1") as server:
        with pytest.raises(InvalidRequest) as caught:
            run(
                _get(
                    HttpClients(environ={}),
                    server.url(),
                    headers={"Authorization": "Bearer ключ-secret"},
                )
            )
        assert server.requests == []
        # latin-1 is what HTTP/1.1 header values can carry: sent as is.
        assert run(_get(HttpClients(environ={}), server.url(), headers={"X-Note": "café"})) == 200
        assert server.requests[-1].headers["x-note"] == "café"
    assert str(caught.value) == (
        "header 'Authorization' has characters that HTTP/1.1 headers cannot carry (not latin-1)"
    )


async def test_the_mcp_probe_reaches_an_idn_host(lab: ServerProcess) -> None:
    """Not latin-1 either: this used to crash the probe with a UnicodeEncodeError."""
    url = lab.base.replace("127.0.0.1", "пример.localhost") + "/json"
    result = await run_check(
        "mcp_endpoint", {"url": url, "transport": "streamable_http"}, timeout=10
    )
    assert result.status == "up", result.reason
