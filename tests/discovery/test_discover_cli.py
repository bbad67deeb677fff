"""``alivemcp discover`` and ``alivemcp validate`` as a user meets them: the real CLI in a
subprocess, reading a local registry and file_sd files."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from alivemcp.testbed.mcp_registry import LocalRegistry, remote
from tests.support import ALIVEMCP, REPO, subprocess_env


async def alivemcp(*args: str) -> tuple[int, str, str]:
    """The CLI in a subprocess, awaited (the local registry serves from this test's loop)."""
    proc = await asyncio.create_subprocess_exec(
        *ALIVEMCP,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=subprocess_env(),
        cwd=REPO,
    )
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def config(tmp_path: Path, registry_url: str, sd_url: str | None = None) -> Path:
    (tmp_path / "targets").mkdir()
    (tmp_path / "targets" / "a.yaml").write_text(
        "- targets: [alpha, beta]\n  labels: {zone: eu}\n- targets: [7]\n"
    )
    text = f"""
discovery:
  - name: registry
    mcp_registry: {{url: "{registry_url}"}}
    template: {{probe: mcp_endpoint, labels: {{team: eco}}}}
  - name: files
    file_sd: {{files: ["targets/*.yaml"]}}
    template: {{probe: test_static, interval: 10s}}
"""
    if sd_url is not None:
        text += f"""  - name: fleet
    http_sd: {{url: "{sd_url}"}}
    template: {{probe: mcp_endpoint}}
"""
    path = tmp_path / "alivemcp.yaml"
    path.write_text(text)
    return path


async def test_discover_prints_what_each_source_yields(
    tmp_path: Path, registry: LocalRegistry
) -> None:
    registry.add("io.example/weather", remotes=[remote("https://127.0.0.1:1/mcp")])
    registry.add("io.example/local-only", packages=[{"registryType": "npm"}])
    registry.add(
        "io.example/tools",
        remotes=[remote("https://93.184.215.14/mcp"), remote("https://93.184.215.14/sse", "sse")],
    )
    path = config(tmp_path, registry.url)
    code, out, err = await alivemcp("discover", "-c", str(path))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (
        "registry (mcp_registry): 2 target(s), skipped 2 (no_remote 1, private_address 1)"
    )
    assert lines[1].split() == ["registry/io.example/tools", "https://93.184.215.14/mcp"]
    assert lines[2].split() == ["registry/io.example/tools#sse", "https://93.184.215.14/sse"]
    assert lines[3].startswith("  skipped no_remote: io.example/local-only")
    assert lines[4].startswith("  skipped private_address: registry/io.example/weather: ")
    assert "files (file_sd): 2 target(s), skipped 1 (invalid_entry 1)" in lines
    assert "  files/alpha  alpha" in lines

    code, out, err = await alivemcp("discover", "-c", str(path), "--json")
    assert code == 0, err
    registry_source, files = json.loads(out)["sources"]
    assert registry_source["ok"] and registry_source["error"] is None
    assert registry_source["skipped"] == {"no_remote": 1, "private_address": 1}
    tools = registry_source["targets"][0]
    assert tools == {
        "check": "registry/io.example/tools",
        "probe": "mcp_endpoint",
        "labels": {
            "team": "eco",
            "discovery": "registry",
            "server": "io.example/tools",
            "version": "1.0.0",
            "remote": "streamable-http",
        },
        "discovered": {
            "source": "registry",
            "target": "https://93.184.215.14/mcp",
            "server": "io.example/tools",
            "version": "1.0.0",
            "transport": "streamable-http",
        },
    }
    assert [t["check"] for t in files["targets"]] == ["files/alpha", "files/beta"]
    assert files["targets"][0]["labels"] == {"zone": "eu", "discovery": "files"}


async def test_discover_says_which_source_failed_and_exits_1(
    tmp_path: Path, registry: LocalRegistry
) -> None:
    registry.fault = "garbage"
    path = config(tmp_path, registry.url, sd_url="http://127.0.0.1:9/sd")
    code, out, _ = await alivemcp("discover", "-c", str(path))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("registry (mcp_registry): FAILED (not_json): registry page 1: ")
    assert "files (file_sd): 2 target(s), skipped 1 (invalid_entry 1)" in lines
    [fleet] = [line for line in lines if line.startswith("fleet")]
    assert fleet.startswith("fleet (http_sd): FAILED (connect): http_sd: cannot connect to ")
    code, out, _ = await alivemcp("discover", "-c", str(path), "--json")
    assert code == 1
    reasons = [s["error"] and s["error"]["reason"] for s in json.loads(out)["sources"]]
    assert reasons == ["not_json", None, "connect"]


async def test_validate_checks_the_discovery_section(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        'discovery:\n  - name: reg\n    mcp_registry: {url: "https://r.example.com"}\n'
        "    template: {probe: mcp_endpoint}\n"
    )
    code, out, err = await alivemcp("validate", str(good))
    assert code == 0, err
    assert "ok (0 checks: no checks)" in out
    assert "discovery: 1 source(s): reg (mcp_registry)" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        'discovery:\n  - name: reg\n    mcp_registry: {url: "https://r.example.com"}\n'
        "    template: {probe: mcp_endpoint, params: {auth_gated_okk: true}}\n"
    )
    code, _, err = await alivemcp("validate", str(bad))
    assert code == 2
    assert (
        "discovery[0].template.params.auth_gated_okk: unknown field; did you mean "
        "'auth_gated_ok'?" in err
    )
