"""deploy/kubernetes/cluster/: the cluster-mode kustomization validates against the Kubernetes
schemas, its pieces fit together (StatefulSet, governing Service, disruption budget, config),
and the pieces it shares with the single-replica kustomization are copies of them.

``kubectl apply -k`` is emulated (resources, namespace, labels), as tests/ship does for the
single-replica files: there may be no kustomize binary.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from alivemcp.config import load_config_text, split_listen
from alivemcp.daemon import CLUSTER_STOP_SECONDS, STOP_OVERHEAD_SECONDS

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "kubernetes"
OVERLAY = BASE / "cluster"
SCHEMAS = REPO / "tests" / "ship" / "schemas"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): SCHEMAS / "prometheusrule-v1.json",
}
VERSIONS = sorted({"1.27.0", all_versions()[-1]})
SHARED = ["namespace.yaml", "serviceaccount.yaml", "service.yaml", "networkpolicy.yaml",
          "servicemonitor.yaml", "prometheusrule.yaml"]


def built(root: Path) -> list[dict[str, Any]]:
    k = yaml.safe_load((root / "kustomization.yaml").read_text())
    out = []
    for name in k["resources"]:
        for doc in yaml.safe_load_all((root / name).read_text()):
            if not doc:
                continue
            doc = copy.deepcopy(doc)
            meta = doc.setdefault("metadata", {})
            if doc["kind"] != "Namespace":
                meta["namespace"] = k["namespace"]
            for entry in k.get("labels", []):
                meta.setdefault("labels", {}).update(entry["pairs"])
            out.append(doc)
    return out


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [r for r in built(OVERLAY) if r["kind"] == kind
                and (name is None or r["metadata"]["name"] == name)]
    return found


def test_every_file_is_listed_once_and_the_shared_ones_are_copies() -> None:
    listed = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(p.name for p in OVERLAY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
    stale = [name for name in SHARED
             if (OVERLAY / name).read_text() != (BASE / name).read_text()]
    assert not stale, f"copy {stale} from deploy/kubernetes/ to deploy/kubernetes/cluster/"
    base = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    overlay = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    for key in ("namespace", "labels", "images"):
        assert overlay[key] == base[key], key


@pytest.mark.parametrize("version", VERSIONS)
def test_builtin_kinds_validate_strictly(version: str) -> None:
    for resource in built(OVERLAY):
        if (resource["apiVersion"], resource["kind"]) not in CRD_SCHEMAS:
            kubernetes_validate.validate(resource, version, strict=True)


def test_operator_kinds_validate() -> None:
    for resource in built(OVERLAY):
        schema = CRD_SCHEMAS.get((resource["apiVersion"], resource["kind"]))
        if schema is not None:
            jsonschema.validate(resource, yaml.safe_load(schema.read_text()))


def test_replicas_have_stable_ids_own_volumes_and_roll_one_at_a_time() -> None:
    kinds = {r["kind"] for r in built(OVERLAY)}
    assert "Deployment" not in kinds and "PersistentVolumeClaim" not in kinds
    sts = one("StatefulSet")
    spec = sts["spec"]
    assert spec["replicas"] >= 3
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert spec["minReadySeconds"] > 0
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    governing = one("Service", spec["serviceName"])
    assert governing["spec"]["clusterIP"] == "None"
    assert governing["spec"]["selector"].items() <= labels.items()
    pdb = one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()

    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
    assert mounts["/var/lib/alivemcp"] in claims  # data_dir: one volume per replica
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/etc/alivemcp"]]["configMap"]["name"] == one("ConfigMap")[
        "metadata"]["name"]
    # The replica id is the host name, i.e. the pod name: nothing may override it.
    assert not [e for e in container.get("env", []) if e["name"] == "HOSTNAME"]

    config = load_config_text(one("ConfigMap")["data"]["config.yaml"], source="configmap",
                              env={})
    cluster = config.config.cluster
    assert cluster is not None
    assert yaml.safe_load(one("ConfigMap")["data"]["config.yaml"])["cluster"].get(
        "replica_id", "") == ""
    assert config.config.data_dir == "/var/lib/alivemcp"
    _, port = split_listen(config.config.server.listen)
    assert container["ports"][0]["containerPort"] == port
    # A stop fits the grace period: the runs' grace, the engine's overhead, and the cluster's
    # hand-over (results flushed, alert state written).
    needed = (config.config.scheduler.shutdown_grace + STOP_OVERHEAD_SECONDS
              + sum(CLUSTER_STOP_SECONDS.values()))
    assert pod["terminationGracePeriodSeconds"] >= needed
