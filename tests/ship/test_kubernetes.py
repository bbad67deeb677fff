"""deploy/kubernetes/: every manifest validates against the Kubernetes API schemas, the pieces
refer to each other correctly, and the pod runs locked down. The manifests shared with cluster
mode live in deploy/kubernetes/base/, which both kustomizations include.

What is validated, honestly:
- Built-in kinds (Namespace, ServiceAccount, ConfigMap, PVC, Deployment, Service, PDB,
  NetworkPolicy) against the official OpenAPI-derived JSON schemas shipped by
  ``kubernetes-validate``, in strict mode (unknown fields are errors), for the oldest and newest
  Kubernetes versions it ships schemas for that the manifests support.
- ServiceMonitor and PrometheusRule (Prometheus Operator CRDs, for which kubernetes-validate
  has no schema) against hand-written JSON schema subsets in ``tests/ship/schemas/``, stricter
  than the CRDs on the fields they cover.
- Both kustomizations (single replica and cluster mode) by rendering them with
  ``kubectl kustomize`` (what ``kubectl apply -k`` sends) and validating every rendered object.
- The config in the ConfigMap with alivemcp's own config loader.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from alivemcp.config import load_config_text, split_listen
from tests.support import kustomize

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
BASE = K8S / "base"
CLUSTER = K8S / "cluster"
SCHEMAS = Path(__file__).parent / "schemas"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): SCHEMAS / "prometheusrule-v1.json",
}
# PodDisruptionBudget.spec.unhealthyPodEvictionPolicy is in the schemas from 1.27 on.
OLDEST_SUPPORTED = "1.27.0"
VERSIONS = sorted({OLDEST_SUPPORTED, all_versions()[-1]})
CLUSTER_SCOPED = {"Namespace"}
BUILTIN_KINDS_PER_KUSTOMIZATION = {K8S: 8, CLUSTER: 8}


def kustomization(root: Path = K8S) -> dict[str, Any]:
    return yaml.safe_load((root / "kustomization.yaml").read_text())


def rendered(root: Path) -> list[dict[str, Any]]:
    """What ``kubectl apply -k <root>`` sends: the objects ``kubectl kustomize`` renders."""
    return kustomize(root)


def built_resources() -> list[dict[str, Any]]:
    """What ``kubectl apply -k deploy/kubernetes`` sends."""
    return rendered(K8S)


def by_kind(kind: str) -> dict[str, Any]:
    (found,) = [r for r in built_resources() if r["kind"] == kind]
    return found


def _manifests(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("*.yaml") if p.name != "kustomization.yaml")


def test_kustomization_lists_every_manifest_once() -> None:
    listed = kustomization()["resources"]
    assert sorted(listed) == sorted(["base", *_manifests(K8S)])
    assert len(listed) == len(set(listed))
    shared = kustomization(BASE)["resources"]
    assert sorted(shared) == _manifests(BASE) and len(shared) == len(set(shared))
    assert "../base" in kustomization(CLUSTER)["resources"]
    kinds = {r["kind"] for r in built_resources()}
    assert kinds == {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "ServiceMonitor",
        "PrometheusRule",
    }


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("root", [K8S, CLUSTER], ids=["single-replica", "cluster"])
def test_every_rendered_object_validates(root: Path, version: str) -> None:
    """Both kustomizations render, and every object they render validates: built-in kinds
    strictly against the Kubernetes schemas, the operator's kinds against theirs."""
    builtin = 0
    for resource in rendered(root):
        schema_path = CRD_SCHEMAS.get((resource["apiVersion"], resource["kind"]))
        if schema_path is None:
            kubernetes_validate.validate(resource, version, strict=True)
            builtin += 1
        else:
            jsonschema.validate(resource, json.loads(schema_path.read_text()))
        # The kustomization's namespace and labels reached the objects of the shared base too.
        meta = resource["metadata"]
        if resource["kind"] not in CLUSTER_SCOPED:
            assert meta["namespace"] == kustomization(root)["namespace"], meta
        assert meta["labels"]["app.kubernetes.io/part-of"] == "alivemcp", meta
    assert builtin == BUILTIN_KINDS_PER_KUSTOMIZATION[root]
    kinds = [r["kind"] for r in rendered(root)]
    assert {"Namespace", "ServiceMonitor", "PrometheusRule"} <= set(kinds)
    # The image mapping applies to the workload, whichever kind it is.
    (image,) = kustomization(root)["images"]
    (workload,) = [r for r in rendered(root) if r["kind"] in {"Deployment", "StatefulSet"}]
    assert [c["image"] for c in workload["spec"]["template"]["spec"]["containers"]] == [
        f"{image['newName']}:{image['newTag']}"
    ]


def test_strict_validation_catches_a_typo() -> None:
    # Guard against a validator that accepts anything.
    deployment = copy.deepcopy(by_kind("Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_operator_kind_validation_catches_a_typo() -> None:
    # Guard against a schema that accepts anything.
    broken = copy.deepcopy(by_kind("ServiceMonitor"))
    broken["spec"]["endpoints"][0]["intervall"] = "30s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            broken, json.loads(CRD_SCHEMAS[(broken["apiVersion"], broken["kind"])].read_text())
        )


def test_cli_validator_agrees() -> None:
    """The same check a user runs: ``kubernetes-validate --strict`` on the files."""
    files = [
        str(root / name)
        for root in (K8S, BASE)
        for name in kustomization(root)["resources"]
        if name not in {"base", "servicemonitor.yaml", "prometheusrule.yaml"}
    ]
    assert len(files) == 8
    exe = Path(sys.executable).parent / "kubernetes-validate"
    proc = subprocess.run(
        [str(exe), "--strict", "--quiet", *files], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pod_is_locked_down() -> None:
    pod = by_kind("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert "add" not in sc["capabilities"]
        assert sc.get("privileged", False) is False
        assert "limits" in container["resources"] and "requests" in container["resources"]
    # The image's user (Dockerfile USER) is the pod's user.
    dockerfile_user = [
        line.split()[1]
        for line in (REPO / "Dockerfile").read_text().splitlines()
        if line.startswith("USER ")
    ]
    assert dockerfile_user == [
        f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    ]
    # Namespace enforces the restricted Pod Security Standard.
    labels = by_kind("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_pieces_refer_to_each_other() -> None:
    deployment = by_kind("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]

    sa = by_kind("ServiceAccount")
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")

    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    config_volume = volumes[mounts["/etc/alivemcp"]]
    assert config_volume["configMap"]["name"] == by_kind("ConfigMap")["metadata"]["name"]
    assert "subPath" not in json.dumps(container["volumeMounts"])  # SIGHUP reload sees edits
    assert container["args"] == ["--config", "/etc/alivemcp/config.yaml"]
    data_volume = volumes[mounts["/var/lib/alivemcp"]]
    assert (
        data_volume["persistentVolumeClaim"]["claimName"]
        == (by_kind("PersistentVolumeClaim")["metadata"]["name"])
    )
    assert "/tmp" in mounts

    config = yaml.safe_load(by_kind("ConfigMap")["data"]["config.yaml"])
    assert config["data_dir"] == "/var/lib/alivemcp"
    _, port = split_listen(config["server"]["listen"])
    (http,) = container["ports"]
    assert http["containerPort"] == port
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == http["name"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"

    service = by_kind("Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == http["name"]
    monitor = by_kind("ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"

    for kind in ("PodDisruptionBudget",):
        assert by_kind(kind)["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    policy = by_kind("NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["ingress"][0]["ports"][0]["port"] == http["name"]
    # One prober: never two pods paging at once.
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


def test_configmap_config_is_a_valid_alivemcp_config() -> None:
    text = by_kind("ConfigMap")["data"]["config.yaml"]
    loaded = load_config_text(text, source="configmap", env={})
    assert loaded.checks, "the example config should run something"
    # The commented alerting block is valid once uncommented (with its secrets in the env).
    head, _, tail = text.partition("# alerting:")
    assert tail, "the ConfigMap should carry a commented alerting example"
    uncommented = (
        head + "alerting:" + "\n".join(line.replace("# ", "", 1) for line in tail.splitlines())
    )
    env = {"PAGERDUTY_ROUTING_KEY": "R" * 32, "SLACK_WEBHOOK_URL": "https://hooks.slack.com/x"}
    with_alerting = load_config_text(uncommented, source="configmap", env=env)
    assert [r.name for r in with_alerting.config.alerting.receivers] == ["oncall", "chat"]


def test_prometheusrule_carries_the_rule_file_exactly() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    import gen_prometheusrule

    on_disk = (BASE / "prometheusrule.yaml").read_text()
    assert on_disk == gen_prometheusrule.render(), (
        "deploy/kubernetes/base/prometheusrule.yaml is out of date: run "
        ".venv/bin/python scripts/gen_prometheusrule.py"
    )
    rules = yaml.safe_load((REPO / "deploy" / "prometheus" / "alivemcp-rules.yaml").read_text())
    assert by_kind("PrometheusRule")["spec"]["groups"] == rules["groups"]
