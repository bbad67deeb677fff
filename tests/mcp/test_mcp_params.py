"""The probe's connection params: refused at config time when they could never be sent (an
un-encodable host, a header that is not HTTP), and honoured end to end (an IDN host, a proxy
with credentials, a client certificate)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alivemcp.config import ConfigError
from alivemcp.testbed import mcp_servers
from alivemcp.testbed.mcp_servers import ServerProcess
from tests.support import run_check
from tests.support.http_proxy import LocalProxy


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://\u2603.example/mcp", "has no IDNA (punycode) form"),
        ("http://" + "a" * 64 + "\u00e9.example/mcp", "has no IDNA (punycode) form"),
        ("http://127.0.0.1/m cp", "must not contain spaces or control characters"),
    ],
)
async def test_url_that_cannot_be_sent_is_a_config_error(url: str, words: str) -> None:
    with pytest.raises(ConfigError, match="url") as caught:
        await run_check("mcp_endpoint", {"url": url})
    assert words in str(caught.value)


async def test_idn_host_is_encoded_and_probed(lab: ServerProcess) -> None:
    # "bücher.localhost" is xn--bcher-kva.localhost: a localhost name, answered by loopback.
    result = await run_check(
        "mcp_endpoint", {"url": f"http://b\u00fccher.localhost:{lab.port}/json"}
    )
    assert result.status == "up", result.reason


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        ({"X Token": "v"}, "header name 'X Token' is not an HTTP token"),
        ({"X-Token:": "v"}, "header name 'X-Token:' is not an HTTP token"),
        ({"X-Token": "\u4e00-secret-value"}, "header 'X-Token' has a value that cannot be sent"),
        ({"X-Token": "ok\r\nInjected: secret-value"}, "header 'X-Token' has a value that cannot"),
        ({"X-Token": "nul\x00secret-value"}, "header 'X-Token' has a value that cannot be sent"),
        ({"Host": "example.com"}, "header 'Host' is set by the probe itself"),
        ({"mcp-session-id": "abc"}, "header 'mcp-session-id' is set by the probe itself"),
        ({"X-A": "1", "x-a": "2"}, "header 'x-a' is given twice"),
    ],
)
async def test_header_that_cannot_be_sent_is_a_config_error(
    headers: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError, match="headers") as caught:
        await run_check("mcp_endpoint", {"url": "http://127.0.0.1/mcp", "headers": headers})
    assert words in str(caught.value)
    assert "secret-value" not in str(caught.value)  # a header value is a secret


async def test_latin1_header_value_is_sent(lab: ServerProcess) -> None:
    result = await run_check(
        "mcp_endpoint", {"url": lab.base + "/json", "headers": {"X-Tenant": "caf\u00e9"}}
    )
    assert result.status == "up", result.reason


@pytest.mark.parametrize(
    ("proxy", "words"),
    [
        ("socks5://127.0.0.1:1080", "must be `direct` or an http://host:port URL"),
        ("http://user:s3cret-pw@127.0.0.1:3128/path", "must be an http://host:port URL"),
        ("http://127.0.0.1:99999", "has a bad port"),
    ],
)
async def test_unusable_proxy_is_a_config_error(proxy: str, words: str) -> None:
    with pytest.raises(ConfigError, match="proxy") as caught:
        await run_check("mcp_endpoint", {"url": "http://127.0.0.1/mcp", "proxy": proxy})
    assert words in str(caught.value)
    assert "s3cret-pw" not in str(caught.value)


@pytest.fixture
def proxy() -> Iterator[LocalProxy]:
    with LocalProxy(credentials=("prober", "pr0xy-pass")) as server:
        yield server


async def test_probe_through_a_proxy_with_credentials(
    lab: ServerProcess, proxy: LocalProxy
) -> None:
    result = await run_check("mcp_endpoint", {"url": lab.base + "/sse", "proxy": proxy.url})
    assert result.status == "up", result.reason
    methods = [seen.method for seen in proxy.seen]
    assert methods.count("POST") == 3 and "DELETE" in methods  # the whole run went through it
    assert all(
        seen.authorization and seen.authorization.startswith("Basic ") for seen in proxy.seen
    )
    assert "pr0xy-pass" not in repr(result)


async def test_direct_ignores_the_environment_proxy(
    lab: ServerProcess, proxy: LocalProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "")
    via_env = await run_check("mcp_endpoint", {"url": lab.base + "/json"})
    assert via_env.status == "up", via_env.reason
    assert proxy.seen, "the environment's proxy was not used"
    proxy.seen.clear()
    direct = await run_check("mcp_endpoint", {"url": lab.base + "/json", "proxy": "direct"})
    assert direct.status == "up", direct.reason
    assert proxy.seen == []


async def test_refusing_proxy_is_down_naming_it(lab: ServerProcess) -> None:
    with LocalProxy(refuse=(f"127.0.0.1:{lab.port}",)) as refusing:
        result = await run_check("mcp_endpoint", {"url": lab.base + "/json", "proxy": refusing.url})
    assert result.status == "down"
    assert "403" in result.reason, result.reason


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The lab over HTTPS demanding a client certificate (its CA: the client's own cert)."""
    server_dir = tmp_path_factory.mktemp("server")
    client_dir = tmp_path_factory.mktemp("client")
    server_pem = mcp_servers.self_signed_cert(server_dir, 30)
    client_pem = mcp_servers.self_signed_cert(client_dir, 30)
    lab = mcp_servers.start_server(
        "lab", tls_cert=server_pem, client_ca=client_pem.with_suffix(".crt")
    )
    try:
        yield {"lab": lab, "ca": str(server_pem.with_suffix(".crt")), "client": client_pem}
    finally:
        lab.stop()


async def test_client_certificate_for_mutual_tls(mtls: dict[str, Any]) -> None:
    url = mtls["lab"].base + "/json"
    client: Path = mtls["client"]
    combined = await run_check(
        "mcp_endpoint", {"url": url, "tls": {"ca_file": mtls["ca"], "cert_file": str(client)}}
    )
    assert combined.status == "up", combined.reason
    split = await run_check(
        "mcp_endpoint",
        {
            "url": url,
            "tls": {
                "ca_file": mtls["ca"],
                "cert_file": str(client.with_suffix(".crt")),
                "key_file": str(client.with_suffix(".key")),
            },
        },
    )
    assert split.status == "up", split.reason
    # The old top-level tls_ca_file still works; without a client certificate: refused.
    refused = await run_check("mcp_endpoint", {"url": url, "tls_ca_file": mtls["ca"]})
    assert refused.status == "down", refused.reason


async def test_unloadable_client_certificate_is_unknown(
    mtls: dict[str, Any], tmp_path: Path
) -> None:
    missing = str(tmp_path / "missing.pem")
    result = await run_check(
        "mcp_endpoint",
        {"url": mtls["lab"].base + "/json", "tls": {"ca_file": mtls["ca"], "cert_file": missing}},
    )
    assert result.status == "unknown"  # the prober's own settings, not the server
    assert result.reason.startswith("cannot use the TLS or proxy settings: ")


@pytest.mark.parametrize(
    ("tls", "extra", "words"),
    [
        ({"key_file": "/k.pem"}, {}, "key_file needs cert_file"),
        ({"ca_file": "/a.pem"}, {"tls_ca_file": "/b.pem"}, "name different files"),
    ],
)
async def test_inconsistent_tls_params_are_a_config_error(
    tls: dict[str, str], extra: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        await run_check("mcp_endpoint", {"url": "https://127.0.0.1/mcp", "tls": tls, **extra})
