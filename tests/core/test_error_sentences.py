"""The one table from an error kind to a probe's sentence (``alivemcp.errors``)."""

from __future__ import annotations

import pytest

from alivemcp.errors import FAILURE_SENTENCES, ErrorKind, ProbeError, describe_failure
from alivemcp.outcome import Status
from alivemcp.verdict import Findings

STREAM = "delivery stream events"


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_kind_has_a_sentence_naming_the_subject(kind: ErrorKind) -> None:
    sentence = describe_failure(kind, STREAM, action="describe")
    assert STREAM in sentence
    assert "{" not in sentence  # every field filled


def test_the_prober_s_own_identity_is_blamed_for_auth_and_permission() -> None:
    assert (
        describe_failure(ErrorKind.AUTH, STREAM, action="put the canary into")
        == "prober's own credentials failed to put the canary into delivery stream events"
    )
    assert (
        describe_failure(ErrorKind.PERMISSION, "application app", action="describe")
        == "prober is not allowed to describe application app"
    )


def test_a_missing_subject_is_named_and_any_other_kind_says_what_failed() -> None:
    assert describe_failure(ErrorKind.NOT_FOUND, STREAM, action="describe") == (
        "delivery stream events not found"
    )
    assert ErrorKind.UNAVAILABLE not in FAILURE_SENTENCES
    assert describe_failure(ErrorKind.UNAVAILABLE, STREAM, action="describe") == (
        "cannot describe delivery stream events"
    )


def test_overrides_win_for_their_kinds_only_and_fill_the_same_fields() -> None:
    overrides = {ErrorKind.PERMISSION: "access denied reading {subject}: policy drift"}
    where = "arn:aws:s3:us-east-1:1:accesspoint/ap key 'k'"
    assert (
        describe_failure(ErrorKind.PERMISSION, where, action="read", overrides=overrides)
        == "access denied reading arn:aws:s3:us-east-1:1:accesspoint/ap key 'k': policy drift"
    )
    assert describe_failure(ErrorKind.NOT_FOUND, where, action="read", overrides=overrides) == (
        f"{where} not found"
    )


def test_braces_in_a_subject_are_kept_as_they_are() -> None:
    assert describe_failure(ErrorKind.OTHER, "marker 'done/{id}'", action="read") == (
        "cannot read marker 'done/{id}'"
    )


def test_the_sentence_leads_the_finding_and_the_kind_still_decides_the_verdict() -> None:
    err = ProbeError(
        ErrorKind.NOT_FOUND,
        target="events",
        operation="DescribeDeliveryStream",
        detail="ResourceNotFoundException",
    )
    findings = Findings()
    findings.add_error(err, reason=describe_failure(err.kind, STREAM, action="describe"))
    result = findings.result()
    assert result.status is Status.DOWN
    assert result.reason == "delivery stream events not found: ResourceNotFoundException"
