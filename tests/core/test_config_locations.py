"""Config of several locations: cluster.location, a check's locations and quorum, and the same
for discovery templates; bad values name the field and are refused."""

from __future__ import annotations

import pytest

from alivemcp.config import ConfigError, load_config_text

CLUSTER = "cluster: {kafka: {bootstrap_servers: 127.0.0.1:9092}, location: eu-west}\n"


def errors_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, env={})
    return info.value.errors


def test_a_check_names_its_locations_and_quorum() -> None:
    loaded = load_config_text(
        CLUSTER + "checks: [{name: a, probe: test_static, locations: [eu-west, us-east], "
        "quorum: 2}, {name: b, probe: test_static}]",
        env={},
    )
    a, b = loaded.checks
    assert (a.locations, a.quorum) == (("eu-west", "us-east"), 2)
    assert (b.locations, b.quorum) == ((), 0)
    assert a.probed_in("eu-west") and not a.probed_in("ap-south")
    assert b.probed_in("ap-south")
    assert loaded.config.cluster is not None
    assert loaded.config.cluster.location == "eu-west"
    assert loaded.config.cluster.probing_group == "alivemcp.location.eu-west"
    assert loaded.config.cluster.verdict_group == "alivemcp.verdict"


def test_the_default_location_keeps_the_group_of_before() -> None:
    loaded = load_config_text(
        "cluster: {kafka: {bootstrap_servers: 127.0.0.1:9092}}\nchecks: []", env={}
    )
    assert loaded.config.cluster is not None
    assert loaded.config.cluster.location == "default"
    assert loaded.config.cluster.probing_group == "alivemcp"


@pytest.mark.parametrize(
    ("snippet", "error"),
    [
        ("locations: []", "checks[0].locations: at least one location"),
        ("locations: [eu-west, eu-west]", "checks[0].locations: a location is listed twice"),
        ("locations: ['eu west']", "checks[0].locations: 'eu west' is not a location name"),
        ("locations: [eu-west], quorum: 2", "checks[0]: quorum 2 exceeds the 1 locations listed"),
        ("quorum: 0", "checks[0].quorum:"),
    ],
)
def test_bad_locations_and_quorums_are_refused_naming_the_field(snippet: str, error: str) -> None:
    errs = errors_of(CLUSTER + f"checks: [{{name: a, probe: test_static, {snippet}}}]")
    assert any(e.startswith(error) for e in errs), errs


@pytest.mark.parametrize(
    ("cluster", "error"),
    [
        ("location: 'eu/west'", "cluster.location: 'eu/west' is not a location name"),
        ("location: ''", "cluster.location: '' is not a location name"),
        ("freshness_intervals: 0.5", "cluster.freshness_intervals:"),
    ],
)
def test_bad_cluster_location_settings_are_refused(cluster: str, error: str) -> None:
    errs = errors_of(
        f"cluster: {{kafka: {{bootstrap_servers: 127.0.0.1:9092}}, {cluster}}}\nchecks: []"
    )
    assert any(e.startswith(error) for e in errs), errs


def test_discovery_templates_carry_locations_and_quorum() -> None:
    errs = errors_of(
        CLUSTER + "discovery: [{name: reg, file_sd: {files: [x.json]}, "
        "template: {probe: mcp_endpoint, locations: [eu-west], quorum: 3}}]"
    )
    assert any("quorum 3 exceeds the 1 locations listed" in e for e in errs), errs


def test_a_check_may_not_take_the_name_of_another_checks_location_history() -> None:
    errs = errors_of(
        CLUSTER + "checks: [{name: api, probe: test_static}, "
        "{name: 'api@eu-west', probe: test_static}]"
    )
    assert any(
        e.startswith("checks[1].name: 'api@eu-west' is the name history keeps the results")
        for e in errs
    ), errs
    # Standalone there is no location history: the name is free; so is one without a check.
    load_config_text(
        "checks: [{name: api, probe: test_static}, {name: 'api@eu-west', probe: test_static}]",
        env={},
    )
    load_config_text(CLUSTER + "checks: [{name: 'web@eu-west', probe: test_static}]", env={})
