"""The verdict vocabulary: one severity order, the error-kind mapping, the findings builder."""

from __future__ import annotations

import pytest

from alivemcp.errors import ErrorKind, ProbeError
from alivemcp.probe import Findings as ContractFindings
from alivemcp.probe import ProbeResult, Status
from alivemcp.verdict import SEVERITY, Findings, status_for, worst


def _error(kind: ErrorKind, detail: str = "NoSuchBucket The bucket does not exist") -> ProbeError:
    return ProbeError(
        kind, target="bucket canaries", operation="PutObject", detail=detail, code="NoSuchBucket"
    )


def test_severity_order_is_up_unknown_degraded_down() -> None:
    assert sorted(Status, key=SEVERITY.__getitem__) == [
        Status.UP,
        Status.UNKNOWN,
        Status.DEGRADED,
        Status.DOWN,
    ]
    assert worst() is Status.UP
    assert worst(Status.UNKNOWN, Status.UP) is Status.UNKNOWN
    # Evidence against the target outranks a part the prober could not decide.
    assert worst(Status.UNKNOWN, Status.DEGRADED) is Status.DEGRADED
    assert worst(Status.DOWN, Status.UNKNOWN, Status.DEGRADED) is Status.DOWN


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (ErrorKind.AUTH, Status.UNKNOWN),
        (ErrorKind.PERMISSION, Status.UNKNOWN),
        (ErrorKind.REJECTED, Status.UNKNOWN),
        (ErrorKind.OTHER, Status.UNKNOWN),
        (ErrorKind.THROTTLED, Status.DEGRADED),
        (ErrorKind.CONNECT, Status.DOWN),
        (ErrorKind.DNS, Status.DOWN),
        (ErrorKind.TLS, Status.DOWN),
        (ErrorKind.TIMEOUT, Status.DOWN),
        (ErrorKind.UNAVAILABLE, Status.DOWN),
        (ErrorKind.PROTOCOL, Status.DOWN),
        (ErrorKind.NOT_FOUND, Status.DOWN),
    ],
)
def test_default_status_for_each_kind(kind: ErrorKind, status: Status) -> None:
    assert status_for(kind) is status


def test_every_kind_has_a_default() -> None:
    for kind in ErrorKind:
        assert isinstance(status_for(kind), Status)


def test_overrides_win_only_for_their_kind() -> None:
    overrides = {ErrorKind.PERMISSION: Status.DOWN}
    assert status_for(ErrorKind.PERMISSION, overrides) is Status.DOWN
    assert status_for(ErrorKind.AUTH, overrides) is Status.UNKNOWN


def test_probe_error_reads_operation_target_detail() -> None:
    err = _error(ErrorKind.NOT_FOUND)
    assert str(err) == "PutObject on bucket canaries: NoSuchBucket The bucket does not exist"
    assert (err.kind, err.target, err.operation, err.code) == (
        ErrorKind.NOT_FOUND,
        "bucket canaries",
        "PutObject",
        "NoSuchBucket",
    )
    assert isinstance(err, Exception)


def test_no_findings_is_up_with_the_ok_reason_and_observations() -> None:
    findings = Findings()
    findings.observe("latency_seconds", 0.25)
    findings.labeled("lag", 3.0, group="g1")
    findings.details["key"] = "k"
    result = findings.result("read in 250 ms")
    assert result == ProbeResult(
        Status.UP,
        "read in 250 ms",
        observations={"latency_seconds": 0.25},
        labeled_observations=result.labeled_observations,
        details={"key": "k"},
    )
    assert [(o.name, o.value, dict(o.labels)) for o in result.labeled_observations] == [
        ("lag", 3.0, {"group": "g1"})
    ]
    assert result.problems() == []


def test_up_findings_never_reach_the_reason() -> None:
    findings = Findings()
    findings.add(Status.UP, "lag 1s is under 30s")
    assert not findings
    assert findings.result("fine").reason == "fine"


def test_worst_status_decides_and_its_reason_comes_first() -> None:
    findings = Findings()
    findings.add(Status.UNKNOWN, "cannot read the metric")
    findings.add(Status.DEGRADED, "lag 40s is over 30s")
    findings.add(Status.DOWN, "partition 3 has no leader")
    findings.add(Status.DEGRADED, "lag 50s is over 30s")
    result = findings.result()
    assert result.status is Status.DOWN
    assert result.reason == (
        "partition 3 has no leader; lag 40s is over 30s; lag 50s is over 30s; "
        "cannot read the metric"
    )
    assert findings.as_json()[0] == {"status": "down", "text": "partition 3 has no leader"}


def test_unknown_only_when_nothing_blames_the_target() -> None:
    findings = Findings()
    findings.add(Status.UNKNOWN, "own credentials expired")
    assert findings.result().status is Status.UNKNOWN
    findings.add(Status.DEGRADED, "slow")
    assert findings.result().status is Status.DEGRADED


def test_reason_is_bounded_with_a_count_of_the_rest() -> None:
    findings = Findings()
    for partition in range(8):
        findings.add(Status.DOWN, f"partition {partition} offline")
    reason = findings.result(max_listed=3).reason
    assert reason == "partition 0 offline; partition 1 offline; partition 2 offline; +5 more"


def test_add_error_uses_the_default_mapping_and_the_error_text() -> None:
    findings = Findings()
    assert findings.add_error(_error(ErrorKind.NOT_FOUND)) is Status.DOWN
    result = findings.result()
    assert result.status is Status.DOWN
    assert result.reason == "PutObject on bucket canaries: NoSuchBucket The bucket does not exist"


def test_add_error_with_override_and_own_words() -> None:
    findings = Findings()
    status = findings.add_error(
        _error(ErrorKind.PERMISSION, "AccessDenied"),
        {ErrorKind.PERMISSION: Status.DOWN},
        reason="access denied through the access point",
    )
    assert status is Status.DOWN
    assert findings.result().reason == "access denied through the access point: AccessDenied"


def test_contract_module_exports_the_builder() -> None:
    assert ContractFindings is Findings
