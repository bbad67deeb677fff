"""deploy/iam/: one least-privilege policy per probe type, derived-from-code checked.

The actions a probe needs are read from its source: the AWS operations it calls (method names
matched against botocore's service models for the services it creates clients for) and the
Kafka requests it makes (mapped to MSK IAM ``kafka-cluster:*`` actions). A call without a
granting action fails the test, and so does a granted action no code path needs.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore import xform_name

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from gen_reference import builtin_entry_points  # noqa: E402

from alivemcp.config.registry import registry  # noqa: E402

IAM = REPO / "deploy" / "iam"
#: Probe types that call no AWS API (so have no IAM policy).
NO_AWS = {"mcp_endpoint", "composite"}
AWS_PROBES = sorted(n for n in builtin_entry_points() if n not in NO_AWS)
#: The shared Kafka plumbing: kafka.py and the layers of its cluster client.
KAFKA_PLUMBING = [
    REPO / "alivemcp" / "plumbing" / f"{name}.py"
    for name in ("kafka", "kafka_access", "kafka_suspects", "kafka_builds", "kafka_reasons")
]
# Actions AWS offers no resource-level permission for.
RESOURCE_STAR_OK = {"cloudwatch:GetMetricData", "cloudwatch:ListMetrics"}
# API operation -> IAM action, where they differ.
ACTION_FOR = {
    "s3:HeadObject": ["s3:GetObject"],
    "s3:ListObjectVersions": ["s3:ListBucketVersions"],
    "s3:ListObjectsV2": ["s3:ListBucket"],
    "s3:ListObjects": ["s3:ListBucket"],
    "s3:DeleteObjects": ["s3:DeleteObject"],
    "sqs:DeleteMessageBatch": ["sqs:DeleteMessage"],
    "sqs:ChangeMessageVisibilityBatch": ["sqs:ChangeMessageVisibility"],
    "sqs:SendMessageBatch": ["sqs:SendMessage"],
}
# Granted beyond the calls, on purpose (the test fails if an entry goes stale). Empty: note
# that without s3:ListBucket a HeadObject of a key that has not landed yet answers 403, not
# 404; the S3 probes treat that as "not yet" until their window ends (deploy/iam/README.md).
JUSTIFIED_EXTRAS: dict[str, set[str]] = {}
# Kafka requests (as the code spells them) -> MSK IAM actions.
KAFKA_ACTIONS = {
    r"\.create_topic\(": ["kafka-cluster:CreateTopic"],
    r"\.add_partitions\(": ["kafka-cluster:AlterTopic"],  # CreatePartitions
    r"\.producer\(": ["kafka-cluster:WriteData", "kafka-cluster:WriteDataIdempotently"],
    r"\.new_consumer\(|\bFetchRequest\(": ["kafka-cluster:ReadData"],
    r"\.metadata\(": ["kafka-cluster:DescribeTopic"],
    r"\.topic_configs\(": ["kafka-cluster:DescribeTopicDynamicConfiguration"],
    r"OffsetFetchRequest\(|\.list_groups\(|DescribeGroups": ["kafka-cluster:DescribeGroup"],
}


def load_policy(name: str) -> dict[str, Any]:
    return json.loads((IAM / f"{name}.json").read_text())


def policy_actions(policy: dict[str, Any]) -> set[str]:
    out: set[str] = set()
    for statement in policy["Statement"]:
        action = statement["Action"]
        out.update([action] if isinstance(action, str) else action)
    return out


# Shared plumbing whose calls belong to every probe that uses it is followed through imports,
# the probe's and then the plumbing's own (kafka_cloudwatch reads through cloudwatch); the
# identity (aws), Kafka and HTTP layers are not (Kafka actions are derived separately).
GENERIC_PLUMBING = {"alivemcp.plumbing.aws", "alivemcp.plumbing.kafka", "alivemcp.plumbing.http"}


def _plumbing_imports(file: Path) -> list[Path]:
    return [
        REPO / Path(*node.module.split(".")).with_suffix(".py")
        for node in ast.walk(ast.parse(file.read_text()))
        if isinstance(node, ast.ImportFrom)
        and node.module
        and node.module.startswith("alivemcp.plumbing.")
        and node.module not in GENERIC_PLUMBING
    ]


def module_sources(probe_type: str) -> str:
    module = builtin_entry_points()[probe_type].split(":")[0]
    path = REPO / Path(*module.split("."))
    files = [path.with_suffix(".py")] if path.with_suffix(".py").exists() else []
    files += sorted(path.glob("*.py")) if path.is_dir() else []
    for file in files:  # the list grows while it is walked: imports of imports
        for helper in _plumbing_imports(file):
            if helper not in files:
                files.append(helper)
    return "\n".join(f.read_text() for f in files)


_SESSION = botocore.session.get_session()


def aws_actions_in(source: str) -> set[str]:
    """IAM actions for the AWS operations the source calls."""
    services = set(re.findall(r"""client\(\s*["']([a-z0-9-]+)["']""", source))
    services |= set(re.findall(r"""["'](s3|sqs|sns|firehose|cloudwatch|kafka)["']""", source))
    tree = ast.parse(source)
    called: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            called.add(node.func.attr)
            if (
                node.func.attr == "get_paginator"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                called.add(str(node.args[0].value))
    actions: set[str] = set()
    for service in services:
        model = _SESSION.get_service_model(service)
        prefix = model.metadata.get("signingName", service)
        for operation in model.operation_names:
            if xform_name(operation) in called:
                api = f"{prefix}:{operation}"
                actions.update(ACTION_FOR.get(api, [api]))
    if "s3:PutObject" in actions and "Tagging" in source:
        actions.add("s3:PutObjectTagging")
    if "s3:DeleteObject" in actions and "VersionId" in source:
        actions.add("s3:DeleteObjectVersion")
    return actions


def kafka_actions_in(source: str) -> set[str]:
    actions = {"kafka-cluster:Connect"}
    for pattern, granted in KAFKA_ACTIONS.items():
        if re.search(pattern, source):
            actions.update(granted)
    return actions


def required_actions(probe_type: str) -> set[str]:
    source = module_sources(probe_type)
    actions = aws_actions_in(source)
    if probe_type.startswith("kafka_"):
        # cluster_arn resolution and MSK IAM authentication live in the shared Kafka plumbing.
        shared = "\n".join(path.read_text() for path in KAFKA_PLUMBING)
        actions |= {a for a in aws_actions_in(shared) if a.startswith("kafka:")}
        actions |= kafka_actions_in(source)
    if probe_type == "s3_object_lambda":
        # GetObject with an Object Lambda access point ARN is authorised as this action; the
        # transform then reads the original with the caller's presigned URL (s3:GetObject),
        # invoking the function through Object Lambda.
        actions |= {"s3-object-lambda:GetObject", "lambda:InvokeFunction"}
    return actions


def test_every_aws_probe_has_a_policy_and_mcp_needs_none() -> None:
    files = {p.stem for p in IAM.glob("*.json")} - {"s3-canary-lifecycle"}
    assert files == set(AWS_PROBES)
    assert registry().get("mcp_endpoint") is not None


@pytest.mark.parametrize("probe_type", AWS_PROBES)
def test_policy_is_well_formed_and_least_privilege(probe_type: str) -> None:
    policy = load_policy(probe_type)
    assert policy["Version"] == "2012-10-17"
    sids = [s["Sid"] for s in policy["Statement"]]
    assert len(sids) == len(set(sids)) and all(re.fullmatch(r"[A-Za-z0-9]+", s) for s in sids)
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        assert set(statement) <= {"Sid", "Effect", "Action", "Resource", "Condition"}
        actions = statement["Action"]
        actions = [actions] if isinstance(actions, str) else actions
        assert all("*" not in a for a in actions), actions
        resources = statement["Resource"]
        resources = [resources] if isinstance(resources, str) else resources
        if "*" in resources:
            assert set(actions) <= RESOURCE_STAR_OK, statement["Sid"]
        for resource in resources:
            assert resource == "*" or resource.startswith("arn:aws:"), resource
            # No "whole bucket" object grants: object actions are on a prefix or a key.
            if resource.startswith("arn:aws:s3:::") and any(
                a.endswith(("Object", "ObjectVersion", "ObjectTagging")) for a in actions
            ):
                assert "/" in resource and not resource.endswith("/*" * 2), resource
        if any(a in {"s3:ListBucket", "s3:ListBucketVersions"} for a in actions):
            assert "s3:prefix" in json.dumps(statement.get("Condition", {})), statement["Sid"]


@pytest.mark.parametrize("probe_type", AWS_PROBES)
def test_policy_grants_exactly_what_the_probe_code_calls(probe_type: str) -> None:
    granted = policy_actions(load_policy(probe_type))
    needed = required_actions(probe_type)
    extras = JUSTIFIED_EXTRAS.get(probe_type, set())
    assert needed - granted == set(), f"{probe_type} calls these without a grant"
    assert granted - needed - extras == set(), f"{probe_type} grants these but never needs them"
    assert extras <= granted and not extras & needed, "stale JUSTIFIED_EXTRAS entry"


def _default_tags(model: Any, seen: set[Any] | None = None) -> list[dict[str, str]]:
    """Default ``tags`` of a params model and of the models nested in it."""
    from pydantic import BaseModel

    seen = seen if seen is not None else set()
    found = []
    for name, field in model.model_fields.items():
        if name == "tags" and field.default_factory is not None:
            found.append(field.default_factory())  # type: ignore[call-arg]
        for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
            if isinstance(arg, type) and issubclass(arg, BaseModel) and arg not in seen:
                seen.add(arg)
                found += _default_tags(arg, seen)
    return found


def test_lifecycle_rule_expires_every_probes_canary_tag_and_s3_accepts_it(moto: Any) -> None:
    lifecycle = json.loads((IAM / "s3-canary-lifecycle.json").read_text())
    tag_rules = {
        (r["Filter"]["Tag"]["Key"], r["Filter"]["Tag"]["Value"])
        for r in lifecycle["Rules"]
        if "Tag" in r["Filter"]
    }
    reg = registry()
    tagged_types = []
    for name in AWS_PROBES:
        for tags in _default_tags(reg.get(name).Params):
            tagged_types.append(name)
            for key, value in tags.items():
                assert (key, value) in tag_rules, f"{name}'s canary tag {key}={value} never expires"
    assert {"s3_replication_lag", "s3_event_delivery", "s3_object_lambda"} <= set(tagged_types)
    # The rule is what S3's API takes: moto validates it against the service model and stores it.
    s3 = boto3.client("s3", **moto.boto3_kwargs())
    s3.create_bucket(Bucket="canaries")
    s3.put_bucket_versioning(Bucket="canaries", VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_lifecycle_configuration(Bucket="canaries", LifecycleConfiguration=lifecycle)
    stored = s3.get_bucket_lifecycle_configuration(Bucket="canaries")["Rules"]
    assert {r["ID"] for r in stored} == {r["ID"] for r in lifecycle["Rules"]}
