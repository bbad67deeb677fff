"""The ``discovery:`` section: errors that name the field, templates held to the rules of a
hand-written check, and a discovered check's origin in :class:`ResolvedCheck`."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from alivemcp.config import ConfigError, DiscoveredOrigin, load_config_text
from alivemcp.config.templates import plan_template


def errors_of(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, env=env or {})
    return info.value.errors


REGISTRY = 'mcp_registry: {url: "https://registry.example.com"}'
SD = 'http_sd: {url: "https://cmdb.example.com/sd"}'


def test_the_issue_example_loads_with_its_defaults() -> None:
    loaded = load_config_text(
        """
discovery:
  - name: registry
    mcp_registry:
      url: https://registry.modelcontextprotocol.io
      refresh: 1h
      page_size: 100
      allow_private_addresses: false
    template:
      probe: mcp_endpoint
      interval: 60s
      timeout: 10s
      labels: {team: ecosystem}
      params: {auth_gated_ok: true}
  - name: fleet
    http_sd: {url: "http://cmdb.example/sd", refresh: 1m}
    template: {probe: mcp_endpoint, interval: 30s}
  - name: files
    file_sd: {files: ["targets/*.json", "targets/*.yaml"], refresh: 30s}
    template: {probe: mcp_endpoint, interval: 30s}
""",
        env={},
    )
    registry, fleet, files = loaded.config.discovery
    assert registry.kind == "mcp_registry" and registry.max_per_host == 4
    assert registry.mcp_registry is not None and registry.mcp_registry.refresh == 3600
    assert registry.mcp_registry.allow_private_addresses is False
    assert fleet.http_sd is not None and fleet.http_sd.refresh == 60
    assert fleet.http_sd.allow_private_addresses is True
    assert files.file_sd is not None and files.file_sd.refresh == 30
    assert files.file_sd.allow_private_addresses is True
    assert loaded.checks == ()


def test_the_model_s_errors_name_the_field() -> None:
    errs = errors_of(
        f"""
discovery:
  - name: Bad_Name
    mcp_registry: {{url: "ftp://x", refresh: 0.01, page_size: 0, limit: 3}}
    template: {{probe: mcp_endpoint}}
  - name: none
    template: {{probe: mcp_endpoint}}
  - name: two
    {REGISTRY}
    {SD}
    template: {{probe: mcp_endpoint}}
  - name: files
    file_sd: {{files: []}}
    template: {{probe: mcp_endpoint, overrides: [{{params: {{}}}}]}}
  - name: typo
    {SD}
    max_per_host: 0
    templat: {{probe: mcp_endpoint}}
"""
    )
    assert errs == [
        "discovery[0].name: String should match pattern '^[a-z0-9-]+$'",
        "discovery[0].mcp_registry.url: must be an http:// or https:// URL with a host",
        "discovery[0].mcp_registry.refresh: must be at least 0.1s",
        "discovery[0].mcp_registry.page_size: Input should be greater than or equal to 1",
        "discovery[0].mcp_registry.limit: unknown field (allowed: allow_private_addresses, "
        "page_size, refresh, timeout, url)",
        "discovery[1]: give exactly one of mcp_registry, http_sd, file_sd",
        "discovery[2]: give exactly one of mcp_registry, http_sd, file_sd "
        "(given: mcp_registry, http_sd)",
        "discovery[3].file_sd.files: List should have at least 1 item after validation, not 0",
        "discovery[3].template.overrides[0].match: Field required",
        "discovery[4].max_per_host: Input should be greater than or equal to 1",
        "discovery[4].template: Field required",
        "discovery[4].templat: unknown field; did you mean 'template'?",
    ]


def test_a_template_is_held_to_the_rules_of_a_hand_written_check() -> None:
    errs = errors_of(
        f"""
checks:
  - {{name: reg, probe: test_static}}
discovery:
  - name: reg
    {REGISTRY}
    template:
      probe: mcp_endpoint
      interval: 5s
      timeout: 10s
      labels: {{check: x, server: y, fine: z, "bad-name": w}}
      params: {{url: "https://pinned.example.com", auth_gated_okk: true}}
  - name: reg
    {SD}
    template: {{probe: test_noop}}
  - name: quick
    {SD}
    template: {{probe: mcp_endpoint, interval: 0.01}}
  - name: slow
    {SD}
    template: {{probe: mcp_endpoint, interval: 5s}}
  - name: unknown
    {SD}
    template: {{probe: mcp_endpont}}
  - name: overrides
    {SD}
    template:
      probe: mcp_endpoint
      params: {{degraded_latency: 3}}
      overrides:
        - match: {{server: "io.github.acme/*"}}
          params: {{degraded_latency: -1, headers: {{"bad name": v}}}}
          labels: {{status: x, remote: y}}
"""
    )
    assert errs == [
        "discovery[0].name: 'reg' would name discovered checks 'reg/...', and the check "
        "'reg' already uses that name; rename one of them",
        "discovery[0].template.labels.server: set by discovery on every check it makes "
        "(discovery, server, version, remote); choose another name",
        "discovery[0].template.labels.check: every alivemcp_check_* series already carries a "
        "label 'check' (this check's series would have it twice, and Prometheus rejects the "
        "whole scrape); rename it",
        "discovery[0].template.labels.bad-name: not a usable Prometheus label name "
        "([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)",
        "discovery[0].template.timeout: timeout 10s is longer than the interval 5s (runs of "
        "one check never overlap; raise the interval or set a shorter timeout)",
        "discovery[1].name: 'reg' is already used by discovery[0]",
        "discovery[1].name: 'reg' would name discovered checks 'reg/...', and the check "
        "'reg' already uses that name; rename one of them",
        "discovery[1].template.probe: probe type 'test_noop' takes no targets (each "
        "discovered target fills the probe's target param)",
        "discovery[2].template.interval: 0.01s is shorter than the shortest interval allowed "
        "(0.1s)",
        "discovery[3].template.interval: timeout 15s (mcp_endpoint's default timeout) is longer "
        "than the interval 5s (runs of one check never overlap; raise the interval or set a "
        "shorter timeout)",
        errs[10],  # (the registry's list of known probe types)
        "discovery[5].template.overrides[0].labels.remote: set by discovery on every check it "
        "makes (discovery, server, version, remote); choose another name",
        "discovery[5].template.overrides[0].labels.status: alivemcp_check_status already "
        "carries a label 'status' (this check's series would have it twice, and Prometheus "
        "rejects the whole scrape); rename it",
        "discovery[5].template.overrides[0].params.headers: header name 'bad name' is not an "
        "HTTP token (letters, digits and !#$%&'*+-.^_`|~ only)",
        "discovery[5].template.overrides[0].params.degraded_latency: Input should be greater "
        "than 0",
    ]
    assert errs[10].startswith(
        "discovery[4].template.probe: unknown probe type 'mcp_endpont'; did you mean "
        "'mcp_endpoint'?"
    )


def test_the_target_param_is_the_target_s_alone() -> None:
    errs = errors_of(
        f"""
discovery:
  - name: pinned
    {SD}
    template: {{probe: mcp_endpoint, params: {{url: "https://x.example.com", list_toolz: 1}}}}
"""
    )
    assert errs == [
        "discovery[0].template.params.url: filled by each discovered target; remove it here",
        "discovery[0].template.params.list_toolz: unknown field; did you mean 'list_tools'?",
    ]


def test_credentials_in_an_override_come_from_the_environment() -> None:
    text = f"""
discovery:
  - name: reg
    {REGISTRY}
    template:
      probe: mcp_endpoint
      overrides:
        - match: {{server: "io.github.acme/*"}}
          params: {{headers: {{Authorization: "Bearer ${{ACME_TOKEN}}"}}}}
"""
    assert errors_of(text) == [
        "discovery[0].template.overrides[0].params.headers.Authorization: environment "
        "variable ACME_TOKEN is not set"
    ]
    loaded = load_config_text(text, env={"ACME_TOKEN": "tok-5f4e3d2c1b"})
    assert "Bearer tok-5f4e3d2c1b" in loaded.secrets
    lenient = load_config_text(text, env={}, allow_missing_env=True)
    assert lenient.unchecked


def test_a_plan_makes_checks_by_the_template_s_rules() -> None:
    loaded = load_config_text(
        f"""
defaults: {{labels: {{env: prod}}, timeout: 4s}}
discovery:
  - name: fleet
    {SD}
    template:
      probe: mcp_endpoint
      interval: 30s
      labels: {{team: sre}}
      params: {{degraded_latency: 3}}
      overrides:
        - match: {{server: "https://slow.*"}}
          params: {{degraded_latency: 9}}
          labels: {{tier: slow}}
""",
        env={},
    )
    from alivemcp.config.registry import registry

    errors: list[str] = []
    plan = plan_template(loaded.config.discovery[0], 0, loaded.config, registry(), errors)
    assert plan is not None and errors == []
    origin = DiscoveredOrigin(source="fleet", target="https://slow.example.com/mcp")
    check = plan.make_check(
        "fleet/https://slow.example.com/mcp",
        "https://slow.example.com/mcp",
        match="https://slow.example.com/mcp",
        origin=origin,
        identity={"discovery": "fleet"},
        labels={"zone": "eu"},
        extra_params={"auth_gated_ok": True, "no_such_param": 1},
        errors=errors,
    )
    assert check is not None and errors == []
    assert (check.interval, check.timeout, check.probe_type) == (30.0, 4.0, "mcp_endpoint")
    assert dict(check.labels) == {
        "env": "prod",
        "team": "sre",
        "zone": "eu",
        "tier": "slow",
        "discovery": "fleet",
    }
    params = check.params
    assert params.degraded_latency == 9 and params.auth_gated_ok  # type: ignore[attr-defined]
    assert check.discovered == dataclasses.replace(origin, max_per_host=4)  # the default
    refused = plan.make_check(
        "fleet/x",
        "ftp://x",
        match="ftp://x",
        origin=origin,
        identity={"discovery": "fleet"},
        labels={"probe": "taken"},
        errors=errors,
    )
    assert refused is None and errors[0].startswith("labels.probe: every alivemcp_check_*")
    errors.clear()
    assert (
        plan.make_check("fleet/x", "ftp://x", match="x", origin=origin, identity={}, errors=errors)
        is None
    )
    assert errors == ["params.url: must be an http:// or https:// URL with a host"]

    # The origin is part of what a reload compares, not of what the probe is built from.
    moved = dataclasses.replace(check, discovered=dataclasses.replace(origin, version="2"))
    assert moved.fingerprint() == check.fingerprint()
    assert not moved.same_as(check) and moved.reload_digest() != check.reload_digest()
    copy = pickle.loads(pickle.dumps(check))
    assert copy.discovered == check.discovered and copy.same_as(check)
    assert copy.reload_digest() == check.reload_digest()
    assert origin.as_json() == {
        "source": "fleet",
        "target": "https://slow.example.com/mcp",
        "server": None,
        "version": None,
        "transport": None,
    }
