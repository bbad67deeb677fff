"""deploy/kubernetes/cluster/: the cluster-mode kustomization validates against the Kubernetes
schemas, its pieces fit together (StatefulSet, governing Service, disruption budget, config),
and it takes the pieces it shares with the single-replica kustomization from
deploy/kubernetes/base/ rather than holding copies of them. deploy/kubernetes/cluster-location/,
the overlay of one location, changes nothing but the replicas' location.

The overlay is rendered with ``kubectl kustomize`` (what ``kubectl apply -k`` sends).
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

from alivemcp.app.clustered import CLUSTER_STOP_SECONDS
from alivemcp.app.daemon import STOP_OVERHEAD_SECONDS
from alivemcp.config import load_config_text, split_listen
from tests.support import kustomize

REPO = Path(__file__).resolve().parents[2]
STANDALONE = REPO / "deploy" / "kubernetes"
SHARED = STANDALONE / "base"
OVERLAY = STANDALONE / "cluster"
LOCATION_OVERLAY = STANDALONE / "cluster-location"
SCHEMAS = REPO / "tests" / "ship" / "schemas"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): SCHEMAS / "prometheusrule-v1.json",
}
VERSIONS = sorted({"1.27.0", all_versions()[-1]})


def kustomization(root: Path) -> dict[str, Any]:
    return yaml.safe_load((root / "kustomization.yaml").read_text())


def built(root: Path) -> list[dict[str, Any]]:
    """What ``kubectl apply -k <root>`` sends."""
    return kustomize(root)


def one(kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [
        r
        for r in built(OVERLAY)
        if r["kind"] == kind and (name is None or r["metadata"]["name"] == name)
    ]
    return found


def _identity(resource: dict[str, Any]) -> tuple[str, str]:
    return resource["kind"], resource["metadata"]["name"]


def test_every_file_is_listed_once_and_the_shared_ones_come_from_the_base() -> None:
    listed = kustomization(OVERLAY)["resources"]
    on_disk = sorted(p.name for p in OVERLAY.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == sorted(["../base", *on_disk]) and len(set(listed)) == len(listed)
    # Nothing of the base is also defined here (a copy would drift; kustomize would refuse the
    # duplicate anyway, but only when rendering).
    shared = {_identity(r) for r in built(SHARED)}
    own = [
        _identity(doc)
        for name in on_disk
        for doc in yaml.safe_load_all((OVERLAY / name).read_text())
        if doc
    ]
    assert not shared & set(own)
    assert shared <= {_identity(r) for r in built(OVERLAY)}
    standalone = kustomization(STANDALONE)
    overlay = kustomization(OVERLAY)
    for key in ("namespace", "labels", "images"):
        assert overlay[key] == standalone[key], key


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
    assert (
        volumes[mounts["/etc/alivemcp"]]["configMap"]["name"]
        == one("ConfigMap")["metadata"]["name"]
    )
    # The replica id is the host name, i.e. the pod name: nothing may override it.
    assert not [e for e in container.get("env", []) if e["name"] == "HOSTNAME"]

    config = load_config_text(one("ConfigMap")["data"]["config.yaml"], source="configmap", env={})
    cluster = config.config.cluster
    assert cluster is not None
    assert (
        yaml.safe_load(one("ConfigMap")["data"]["config.yaml"])["cluster"].get("replica_id", "")
        == ""
    )
    assert config.config.data_dir == "/var/lib/alivemcp"
    _, port = split_listen(config.config.server.listen)
    assert container["ports"][0]["containerPort"] == port
    # A stop fits the grace period: the runs' grace, the engine's overhead, and the cluster's
    # hand-over (results flushed, alert state written).
    needed = (
        config.config.scheduler.shutdown_grace
        + STOP_OVERHEAD_SECONDS
        + sum(CLUSTER_STOP_SECONDS.values())
    )
    assert pod["terminationGracePeriodSeconds"] >= needed


def _location_of(objects: list[dict[str, Any]]) -> str:
    """cluster.location as a replica of these objects loads it (its ConfigMap, its env)."""
    (sts,) = [o for o in objects if o["kind"] == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
    loaded = load_config_text(config_map["data"]["config.yaml"], source="configmap", env=env)
    assert loaded.config.cluster is not None
    return loaded.config.cluster.location


def test_the_location_comes_from_the_pods_environment() -> None:
    assert _location_of(built(OVERLAY)) == "default"
    # Unset (a pod spec of your own): the config's own default.
    config = load_config_text(one("ConfigMap")["data"]["config.yaml"], source="cm", env={})
    assert config.config.cluster is not None and config.config.cluster.location == "default"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_location_overlay_changes_only_the_location_and_the_pod_names(version: str) -> None:
    located = built(LOCATION_OVERLAY)
    for resource in located:
        if (resource["apiVersion"], resource["kind"]) not in CRD_SCHEMAS:
            kubernetes_validate.validate(resource, version, strict=True)
    assert _location_of(located) == "eu-west"
    # The pods (the replica ids) are named after the location: ids must differ across
    # locations, which share the verdict group.
    (sts,) = [r for r in located if r["kind"] == "StatefulSet"]
    assert sts["metadata"]["name"] == "alivemcp-eu-west"
    # Everything else as the cluster overlay renders it: the same config, the same objects.
    plain = {_identity(r): r for r in built(OVERLAY)}
    others = {_identity(r): r for r in located if r["kind"] != "StatefulSet"}
    assert set(others) == {i for i in plain if i[0] != "StatefulSet"}
    assert all(others[i] == plain[i] for i in others)
    plain_sts = plain[("StatefulSet", "alivemcp")]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    (plain_container,) = plain_sts["spec"]["template"]["spec"]["containers"]
    envs = {e["name"]: e for e in container["env"]}
    plain_envs = {e["name"]: e for e in plain_container["env"]}
    assert {k for k in envs if envs[k] != plain_envs.get(k)} == {"ALIVEMCP_LOCATION"}
    renamed = copy.deepcopy(sts)  # the rendered objects are cached: change a copy
    renamed["metadata"]["name"] = "alivemcp"
    renamed["spec"]["template"]["spec"]["containers"][0]["env"] = plain_container["env"]
    assert renamed == plain_sts
