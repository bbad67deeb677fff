"""Config validation: errors name the field's path, suggest fixes, and refuse bad input."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from alivemcp.config import ERRORS_SHOWN, ConfigError, load_config, load_config_text, parse_duration


def errors_of(
    text: str, env: dict[str, str] | None = None, base_dir: Path | None = None
) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, env=env or {}, base_dir=base_dir)
    return info.value.errors


def test_typo_in_params_names_the_path_and_suggests_the_field() -> None:
    errs = errors_of(
        """
checks:
  - name: a
    probe: test_static
  - name: b
    probe: test_static
    params: {reasn: hi}
"""
    )
    assert errs == ["checks[1].params.reasn: unknown field; did you mean 'reason'?"]


def test_typo_in_check_and_top_level_keys() -> None:
    errs = errors_of("defaults: {intervall: 5}\nchecks: [{name: a, probe: test_static, timout: 1}]")
    assert "defaults.intervall: unknown field; did you mean 'interval'?" in errs
    assert "checks[0].timout: unknown field; did you mean 'timeout'?" in errs


def test_unknown_probe_type_suggests_the_closest() -> None:
    errs = errors_of("checks: [{name: a, probe: test_statik}]")
    assert len(errs) == 1
    assert errs[0].startswith(
        "checks[0].probe: unknown probe type 'test_statik'; did you mean 'test_static'?"
    )


def test_many_errors_are_listed_up_to_a_limit_and_counted() -> None:
    # One mistake repeated over a generated file: every error is kept, the message and the
    # CLI's rendering list the first ones and count the rest (not a 27 MB line).
    text = "checks:\n" + "".join(f"  - {{name: c{i}, probe: nope}}\n" for i in range(5000))
    with pytest.raises(ConfigError) as info:
        load_config_text(text, env={})
    exc = info.value
    assert len(exc.errors) == 5000
    rendered = exc.render().splitlines()
    assert rendered[0].endswith("invalid configuration (5000 error(s))")
    assert rendered[1].strip().startswith("checks[0].probe: unknown probe type 'nope'")
    assert rendered[-1].strip() == f"... and {5000 - ERRORS_SHOWN} more error(s) not shown"
    assert len(rendered) == ERRORS_SHOWN + 2
    assert "checks[19].probe" in str(exc) and "checks[20].probe" not in str(exc)
    assert len(str(exc)) < 500 * ERRORS_SHOWN


def test_broken_plugin_is_named_with_its_import_error() -> None:
    errs = errors_of("checks: [{name: a, probe: test_broken}]")
    assert "failed to load" in errs[0] and "ModuleNotFoundError" in errs[0]


def test_env_interpolation_default_escape_and_missing() -> None:
    loaded = load_config_text(
        "checks: [{name: '${NAME}', probe: test_static, params: {reason: '${R:-dflt} $${X}'}}]",
        env={"NAME": "from-env"},
    )
    check = loaded.checks[0]
    assert check.name == "from-env"
    assert check.params.reason == "dflt ${X}"  # type: ignore[attr-defined]
    errs = errors_of("checks: [{name: a, probe: test_static, params: {reason: '${NOPE}'}}]")
    assert errs == ["checks[0].params.reason: environment variable NOPE is not set"]


def test_targets_expand_into_one_check_each(tmp_path: Path) -> None:
    (tmp_path / "targets.txt").write_text("# comment\nalpha\n\nbeta\n")
    loaded = load_config_text(
        """
defaults: {labels: {team: core}}
checks:
  - name: inline
    probe: test_static
    targets: [one, {name: two, labels: {tier: gold}, params: {reason: custom}}]
  - name: fromfile
    probe: test_static
    targets_file: targets.txt
""",
        env={},
        base_dir=tmp_path,
    )
    by_name = {c.name: c for c in loaded.checks}
    assert sorted(by_name) == ["fromfile/alpha", "fromfile/beta", "inline/one", "inline/two"]
    assert by_name["inline/one"].params.reason == "one"  # type: ignore[attr-defined]
    assert by_name["inline/two"].params.reason == "custom"  # type: ignore[attr-defined]
    assert by_name["inline/two"].labels == {"team": "core", "tier": "gold"}


def test_duplicates_timeouts_labels_and_dependencies_are_refused() -> None:
    errs = errors_of(
        """
checks:
  - {name: a, probe: test_static}
  - {name: a, probe: test_static}
  - {name: b, probe: test_static, interval: 5, timeout: 10}
  - {name: c, probe: test_static, labels: {check: x}, depends_on: [aa, zzz]}
"""
    )
    assert "checks[1].name: 'a' is already used by checks[0]" in errs
    assert any(
        e.startswith("checks[2].timeout: timeout 10s is longer than the interval 5s") for e in errs
    )
    assert any(
        e.startswith(
            "checks[3].labels.check: every alivemcp_check_* series already carries a label 'check'"
        )
        for e in errs
    ), errs
    assert "checks[3].depends_on: no check named 'aa'; did you mean 'a'?" in errs
    assert "checks[3].depends_on: no check named 'zzz'" in errs


def test_durations() -> None:
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1.5m") == 90.0
    assert parse_duration(7) == 7.0
    errs = errors_of("defaults: {interval: soon}")
    assert errs[0].startswith("defaults.interval: 'soon' is not a duration")


def test_default_timeout_is_below_the_interval() -> None:
    loaded = load_config_text("checks: [{name: a, probe: test_static, interval: 5}]", env={})
    assert loaded.checks[0].timeout == 4.0


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("checks: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    errs = errors_of("- just\n- a list\n")
    assert errs == ["the top level must be a mapping"]


def test_example_config_validates_with_every_probe_type() -> None:
    path = Path(__file__).resolve().parents[2] / "config" / "alivemcp.example.yaml"
    env = {
        "MCP_SEARCH_TOKEN": "t0ken-value",
        "PARTNER_CLIENT_SECRET": "s3cret-value",
        "PAGERDUTY_ROUTING_KEY": "r0uting-key",
        "SLACK_WEBHOOK_URL": "https://hooks.slack.com/x",
    }
    loaded = load_config_text(path.read_text(), env=env, base_dir=path.parent)
    types = {c.probe_type for c in loaded.checks}
    pyproject = tomllib.loads((path.parents[1] / "pyproject.toml").read_text())
    builtin = set(pyproject["project"]["entry-points"]["alivemcp.probes"])
    assert types == builtin, f"example config lacks {builtin - types}"
    assert "fleet/https://a.example.com/mcp" in {c.name for c in loaded.checks}


def test_allow_missing_env_reaches_into_tagged_unions() -> None:
    """An unset ${VAR} inside a tagged union (the kinesis consumer's marker: pydantic puts the
    tag in the error path, marker.s3.bucket) is set aside like any other, not an error."""
    text = """
checks:
  - name: k
    probe: kinesis_canary
    params:
      stream_name: s
      aws: {region: us-east-1}
      consumer:
        sla: 10s
        marker: {type: s3, bucket: "${UNSET_BUCKET}", key_template: "m/{id}.done"}
"""
    loaded = load_config_text(text, env={}, allow_missing_env=True)
    assert loaded.unchecked == (
        "checks[0].params.consumer.marker.bucket: ${UNSET_BUCKET} is not set; not checked",
    )
    with pytest.raises(ConfigError, match="UNSET_BUCKET is not set"):
        load_config_text(text, env={})


def test_a_loaded_config_holds_no_check_specs_besides_its_resolved_checks() -> None:
    """The validated specs are only a step to the resolved checks; a daemon of 100,000 checks
    would keep about 1.1 kB a check of them for its life."""
    import gc

    from alivemcp.config import CheckSpec

    text = "checks:\n" + "".join(f"  - {{name: s{i}, probe: test_static}}\n" for i in range(3))
    loaded = load_config_text(text)
    gc.collect()
    assert [c.name for c in loaded.checks] == ["s0", "s1", "s2"]
    assert not [o for o in gc.get_objects() if isinstance(o, CheckSpec)]


def test_checks_of_one_load_share_their_equal_label_sets_and_durations() -> None:
    """A generated config repeats a few label sets and intervals over 100,000 checks: one
    object each, not a copy per check (and a check's info holds the same labels)."""
    from alivemcp.engine.checks import check_info

    text = (
        "defaults: {labels: {team: core}, interval: 30s}\n"
        "checks:\n"
        "  - {name: a, probe: test_static}\n"
        "  - {name: b, probe: test_static}\n"
        "  - {name: c, probe: test_static, labels: {tier: gold}}\n"
        "  - {name: d, probe: test_static, labels: {tier: gold}, interval: 60}\n"
    )
    a, b, c, d = load_config_text(text).checks
    assert a.labels == {"team": "core"} and a.labels is b.labels
    assert c.labels == {"team": "core", "tier": "gold"} and c.labels is d.labels
    assert a.labels is not c.labels
    assert a.interval is b.interval is c.interval and type(a.interval) is float
    assert d.interval == 60.0 and type(d.interval) is float
    assert a.probe_type is d.probe_type
    assert check_info(a).labels is a.labels


def test_a_fingerprint_changes_with_anything_the_probe_instance_is_built_from() -> None:
    """Equal fingerprints keep the running probe instance over a reload: each field it is
    built from must change it, and an equal check must not."""
    base = {
        "probe": "test_static",
        "interval": "30s",
        "timeout": "5s",
        "labels": {"team": "core"},
        "params": {"reason": "r"},
    }
    variants = {
        "same": {},
        "probe": {"probe": "test_noop", "params": {}},
        "interval": {"interval": "31s"},
        "timeout": {"timeout": "6s"},
        "label value": {"labels": {"team": "edge"}},
        "label added": {"labels": {"team": "core", "tier": "gold"}},
        "params": {"params": {"reason": "s"}},
    }
    import json

    def fingerprint(**change: object) -> bytes:
        check = json.dumps({"name": "x", **base, **change})
        return load_config_text(f"checks:\n  - {check}\n").checks[0].fingerprint()

    prints = {what: fingerprint(**change) for what, change in variants.items()}
    assert prints["same"] == fingerprint()
    assert len(set(prints.values())) == len(prints), prints
    assert all(isinstance(p, bytes) and len(p) == 16 for p in prints.values())


def test_discovery_errors_are_listed_with_the_checks_errors_in_one_pass() -> None:
    errs = errors_of(
        """
defaults: {intervall: 5}
checks:
  - {name: a, probe: test_static, params: {reasn: x}}
discovery:
  - name: reg
    mcp_registry: {url: "https://registry.example.com"}
    template: {probe: mcp_endpoint, params: {auth_gated_okk: true}}
  - name: files
    file_sd: {files: ["targets/*.json"]}
    template: {probe: test_static, labels: {probe: x}}
"""
    )
    assert errs == [
        "defaults.intervall: unknown field; did you mean 'interval'?",
        "checks[0].params.reasn: unknown field; did you mean 'reason'?",
        "discovery[0].template.params.auth_gated_okk: unknown field; did you mean 'auth_gated_ok'?",
        "discovery[1].template.labels.probe: every alivemcp_check_* series already carries a "
        "label 'probe' (this check's series would have it twice, and Prometheus rejects the "
        "whole scrape); rename it",
    ]


def test_an_empty_discovery_section_is_no_sources() -> None:
    loaded = load_config_text("discovery:\nchecks: [{name: a, probe: test_static}]\n", env={})
    assert loaded.config.discovery == [] and [c.name for c in loaded.checks] == ["a"]
    assert loaded.checks[0].discovered is None
