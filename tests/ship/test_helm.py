"""deploy/helm/alivemcp: the chart lints (``helm lint --strict``) and renders (``helm template``)
for every ci/*-values.yaml, with the helm on the PATH or the one ``make test-deps`` builds from
the Go module proxy into .cache/bin. Every rendered object validates as in test_kubernetes.py:
built-in kinds against kubernetes-validate's schemas (strict; the oldest Kubernetes the chart
supports and the newest known), ServiceMonitor and PrometheusRule against the CRD schema subsets
in tests/ship/schemas/. Unit tests assert on the rendered objects; the rendered config goes
through ``alivemcp validate``; values.schema.json is exercised through helm itself.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "alivemcp"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
SOURCE_RULES = REPO / "deploy" / "prometheus" / "alivemcp-rules.yaml"
RUNBOOK = REPO / "docs" / "runbook.md"
DEFAULT_RUNBOOK = "https://github.com/alivemcp/alivemcp/blob/main/docs/runbook.md"
SCHEMAS = Path(__file__).parent / "schemas"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SCHEMAS / "servicemonitor-v1-tls.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): SCHEMAS / "prometheusrule-v1.json",
}
OLDEST_SUPPORTED = "1.27.0"  # Chart.yaml kubeVersion
VERSIONS = sorted({OLDEST_SUPPORTED, all_versions()[-1]})
RELEASE, NAMESPACE = "prober", "monitoring"
FULLNAME = f"{RELEASE}-alivemcp"
WEB_ON = "webConfig.enabled=true"

#: What each ci values file renders: kind -> names.
BASE = {"ServiceAccount": {FULLNAME}, "Service": {FULLNAME}, "PodDisruptionBudget": {FULLNAME}}
CONFIG = {"ConfigMap": {f"{FULLNAME}-config"}}
STANDALONE = {"Deployment": {FULLNAME}, "PersistentVolumeClaim": {f"{FULLNAME}-data"}}
CLUSTER = {"StatefulSet": {FULLNAME}, "Service": {FULLNAME, f"{FULLNAME}-replicas"}}
MONITORING = {"ServiceMonitor": {FULLNAME}}
EXTRAS = {
    "Secret": {f"{FULLNAME}-web-config"},
    "NetworkPolicy": {FULLNAME},
    "PrometheusRule": {FULLNAME},
}
EXPECTED = {
    "default-values.yaml": BASE | CONFIG | STANDALONE,
    "cluster-values.yaml": BASE | CONFIG | CLUSTER,
    "existing-config-web-config-values.yaml": BASE | STANDALONE | MONITORING,
    "everything-on-values.yaml": BASE | CONFIG | CLUSTER | MONITORING | EXTRAS,
}


def helm_binary() -> str:
    found = shutil.which("helm") or str(REPO / ".cache" / "bin" / "helm")
    if not os.access(found, os.X_OK):
        raise AssertionError("no helm on the PATH nor in .cache/bin: run make test-deps")
    return found


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def _template(
    values: tuple[str, ...], sets: tuple[str, ...], version: str
) -> subprocess.CompletedProcess[str]:
    args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version", version]
    args += [a for path in values for a in ("-f", path)] + [a for s in sets for a in ("--set", s)]
    return helm(*args)


@functools.cache
def _rendered(values: tuple[str, ...], sets: tuple[str, ...], version: str) -> str:
    proc = _template(values, sets, version)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def render(
    values: str | None = None, *sets: str, version: str = OLDEST_SUPPORTED
) -> list[dict[str, Any]]:
    """The objects ``helm template`` renders with ci/<values> (None: the defaults) and --set."""
    files = (str(CHART / "ci" / values),) if values else ()
    text = _rendered(files, tuple(sets), version)
    return copy.deepcopy([doc for doc in yaml.safe_load_all(text) if doc])


def render_fails(*sets: str) -> str:
    proc = _template((), sets, OLDEST_SUPPORTED)
    assert proc.returncode != 0, f"helm template {sets} should have failed"
    return proc.stderr


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return found


def kinds(objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for o in objects:
        out.setdefault(o["kind"], set()).add(o["metadata"]["name"])
    return out


def workload(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] in {"Deployment", "StatefulSet"}]
    return found


def pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = workload(objects)["spec"]["template"]["spec"]
    return spec


def volumes(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_spec(objects)["volumes"]}


def container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any]
    (found,) = pod_spec(objects)["containers"]
    return found


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector's verdict on a set of labels."""
    if not selector["matchLabels"].items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if not {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]:
            return False
    return True


def config_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(one(objects, "ConfigMap")["data"]["config.yaml"])
    return config


def checksum(objects: list[dict[str, Any]]) -> str | None:
    annotations: dict[str, str] = workload(objects)["spec"]["template"]["metadata"].get(
        "annotations", {}
    )
    return annotations.get("checksum/config")


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings."""
    headings = re.findall(r"^#{1,6} (.+)$", markdown, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


# -- the chart as a whole -----------------------------------------------------------------------


def test_chart_carries_the_project_version_and_ci_covers_the_cases() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == version
    assert chart["kubeVersion"] == f">={OLDEST_SUPPORTED}-0"
    assert sorted(p.name for p in CI_VALUES) == sorted(EXPECTED)


def test_the_rules_file_of_the_chart_is_up_to_date() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    import gen_helm_rules

    on_disk = gen_helm_rules.OUTPUT.read_text()
    assert on_disk == gen_helm_rules.render(), (
        "deploy/helm/alivemcp/files/alivemcp-rules.yaml is out of date: run "
        ".venv/bin/python scripts/gen_helm_rules.py"
    )
    copied = yaml.safe_load(on_disk)
    assert copied["groups"] == yaml.safe_load(SOURCE_RULES.read_text())["groups"]


def test_every_source_rule_links_its_runbook_entry() -> None:
    anchors = github_anchors(RUNBOOK.read_text())
    rules = [r for g in yaml.safe_load(SOURCE_RULES.read_text())["groups"] for r in g["rules"]]
    assert rules
    for rule in rules:
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == DEFAULT_RUNBOOK, rule["alert"]
        assert anchor == rule["alert"].lower() and anchor in anchors, rule["alert"]


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_lint_strict(values: Path) -> None:
    for version in VERSIONS:
        proc = helm("lint", "--strict", str(CHART), "-f", str(values), "--kube-version", version)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_every_rendered_object_validates(values: Path, version: str) -> None:
    objects = render(values.name, version=version)
    assert kinds(objects) == EXPECTED[values.name]
    for resource in objects:
        schema_path = CRD_SCHEMAS.get((resource["apiVersion"], resource["kind"]))
        if schema_path is None:
            kubernetes_validate.validate(resource, version, strict=True)
        else:
            jsonschema.validate(resource, json.loads(schema_path.read_text()))
        meta = resource["metadata"]
        assert meta["namespace"] == NAMESPACE, meta
        assert meta["labels"]["app.kubernetes.io/part-of"] == "alivemcp", meta
        assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE, meta


def test_servicemonitor_schema_catches_a_typo() -> None:
    # Guard against a schema that accepts anything.
    monitor = one(render("everything-on-values.yaml"), "ServiceMonitor")
    schema = json.loads(CRD_SCHEMAS[(monitor["apiVersion"], monitor["kind"])].read_text())
    monitor["spec"]["endpoints"][0]["tlsConfig"]["serverNam"] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, schema)


def test_values_schema_refuses_typos_and_nonsense() -> None:
    assert "enabeld" in render_fails("serviceMonitor.enabeld=true")
    assert "replicaz" in render_fails("cluster.replicaz=3")
    assert "mode" in render_fails("mode=clustered")
    assert "scheme" in render_fails("webConfig.scheme=ftp")
    # The web config file's own keys are checked too (exporter-toolkit's names).
    assert "basic_auth_user" in render_fails(WEB_ON, "webConfig.config.basic_auth_user.x=y")
    # The shipped values and every ci file satisfy the schema (helm checks the merged values;
    # this checks each file on its own, so none relies on another to be valid).
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    for values in [CHART / "values.yaml", *CI_VALUES]:
        jsonschema.validate(yaml.safe_load(values.read_text()) or {}, schema)


# -- the pod ------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_pod_is_locked_down_and_probed(values: Path) -> None:
    objects = render(values.name)
    pod = pod_spec(objects)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001  # the Dockerfile's USER
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    c = container(objects)
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert "limits" in c["resources"] and "requests" in c["resources"]
    (port,) = c["ports"]
    probes = {p: c[p]["httpGet"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert {p: (get["path"], get["port"]) for p, get in probes.items()} == {
        "startupProbe": ("/healthz", port["name"]),
        "livenessProbe": ("/healthz", port["name"]),
        "readinessProbe": ("/readyz", port["name"]),
    }
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert "subPath" not in json.dumps(c["volumeMounts"])  # mounted edits reach the pod
    assert {"/etc/alivemcp", "/var/lib/alivemcp", "/tmp"} <= mounts.keys()
    assert c["args"][:4] == ["--config", "/etc/alivemcp/config.yaml", "--listen", "0.0.0.0:9464"]
    # Every mount has its volume, and the Service reaches the pod's port.
    claims = workload(objects)["spec"].get("volumeClaimTemplates", [])
    assert {m["name"] for m in c["volumeMounts"]} <= volumes(objects).keys() | {
        t["metadata"]["name"] for t in claims
    }
    service = one(objects, "Service", FULLNAME)
    assert service["spec"]["ports"][0]["targetPort"] == port["name"]
    pod_labels = workload(objects)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert selects(one(objects, "PodDisruptionBudget")["spec"]["selector"], pod_labels)


def test_standalone_is_one_deployment_with_a_claim() -> None:
    objects = render("default-values.yaml")
    assert "StatefulSet" not in kinds(objects)
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    vols = volumes(objects)
    claim = one(objects, "PersistentVolumeClaim")
    assert vols["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert vols["config"]["configMap"]["name"] == one(objects, "ConfigMap")["metadata"]["name"]
    assert "env" not in container(objects)  # no replica id outside cluster mode
    config = config_of(objects)
    assert config["data_dir"] == "/var/lib/alivemcp" and "cluster" not in config
    assert config["server"]["listen"] == "0.0.0.0:9464"
    # An existing claim is used as it is; without persistence the data lives in an emptyDir.
    existing = render(None, "persistence.existingClaim=alivemcp-state")
    assert "PersistentVolumeClaim" not in kinds(existing)
    assert volumes(existing)["data"]["persistentVolumeClaim"]["claimName"] == "alivemcp-state"
    ephemeral = render(None, "persistence.enabled=false")
    assert "PersistentVolumeClaim" not in kinds(ephemeral)
    assert volumes(ephemeral)["data"] == {"name": "data", "emptyDir": {}}


def test_cluster_mode_is_a_statefulset_with_replica_ids_from_pod_names() -> None:
    objects = render("cluster-values.yaml")
    assert {"Deployment", "PersistentVolumeClaim"}.isdisjoint(kinds(objects))
    sts = one(objects, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    headless = one(objects, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    (env,) = container(objects)["env"]
    assert env["name"] == "ALIVEMCP_REPLICA_ID"
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    config = config_of(objects)
    assert config["cluster"]["replica_id"] == "${ALIVEMCP_REPLICA_ID}"
    assert config["cluster"]["kafka"]["bootstrap_servers"]
    (template,) = sts["spec"]["volumeClaimTemplates"]
    assert template["metadata"]["name"] == "data"
    assert "data" not in {v["name"] for v in pod_spec(objects)["volumes"]}
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    spread = pod_spec(objects)["topologySpreadConstraints"]
    keys = sorted(s["topologyKey"] for s in spread)
    assert keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert all(selects(s["labelSelector"], pod_labels) for s in spread)
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    # A replica id the config sets itself is kept.
    fixed = render("cluster-values.yaml", "config.cluster.replica_id=r1")
    assert config_of(fixed)["cluster"]["replica_id"] == "r1"


def test_cluster_location_goes_into_the_config_and_the_pods_environment() -> None:
    objects = render("cluster-values.yaml", "cluster.location=eu-west")
    assert config_of(objects)["cluster"]["location"] == "eu-west"
    env = {e["name"]: e for e in container(objects)["env"]}
    assert env["ALIVEMCP_LOCATION"]["value"] == "eu-west"
    # The same location in both places is fine; two different ones are refused.
    same = render(
        "cluster-values.yaml", "cluster.location=eu-west", "config.cluster.location=eu-west"
    )
    assert config_of(same)["cluster"]["location"] == "eu-west"
    assert "differ" in render_fails(
        "mode=cluster", "config.cluster.kafka.bootstrap_servers=k:9092",
        "cluster.location=eu-west", "config.cluster.location=us-east",
    )  # fmt: skip
    assert "location" in render_fails("cluster.location=not a name")
    # Unset: nothing of it in the config or the environment (the config's default applies).
    plain = render("cluster-values.yaml")
    assert "location" not in config_of(plain)["cluster"]
    assert "ALIVEMCP_LOCATION" not in {e["name"] for e in container(plain)["env"]}


def test_mode_and_config_must_agree() -> None:
    assert "cluster:" in render_fails("mode=cluster")
    assert "mode: cluster" in render_fails("config.cluster.group=alivemcp")


# -- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values", [p for p in CI_VALUES if "ConfigMap" in EXPECTED[p.name]], ids=lambda p: p.name
)
def test_rendered_config_is_a_valid_alivemcp_config(values: Path, tmp_path: Path) -> None:
    text = one(render(values.name), "ConfigMap")["data"]["config.yaml"]
    (tmp_path / "config.yaml").write_text(text)
    # The pod's environment: its replica id, the secrets the config names.
    env = {"ALIVEMCP_REPLICA_ID": f"{FULLNAME}-0", "PAGERDUTY_ROUTING_KEY": "R" * 32}
    env |= {**os.environ, "SLACK_WEBHOOK_URL": "https://hooks.slack.com/x"}
    exe = Path(sys.executable).parent / "alivemcp"
    proc = subprocess.run(
        [str(exe), "validate", str(tmp_path / "config.yaml")],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if "cluster" in yaml.safe_load(text):
        assert f"replica '{FULLNAME}-0'" in proc.stdout, proc.stdout


def test_config_in_a_secret_and_existing_config() -> None:
    in_secret = render(None, "configInSecret=true")
    secret = one(in_secret, "Secret", f"{FULLNAME}-config")
    assert yaml.safe_load(secret["stringData"]["config.yaml"])["data_dir"] == "/var/lib/alivemcp"
    volume = volumes(in_secret)["config"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]

    existing = render("existing-config-web-config-values.yaml")
    assert not {"ConfigMap"} & kinds(existing).keys()
    volume = volumes(existing)["config"]
    assert volume["secret"] == {
        "secretName": "alivemcp-config",
        "items": [{"key": "alivemcp.yaml", "path": "config.yaml"}],
    }
    # The chart cannot see that config: no checksum, and NOTES say how to roll by hand.
    assert checksum(existing) is None
    assert container(existing)["envFrom"] == [{"secretRef": {"name": "alivemcp-secrets"}}]


def test_config_checksum_rolls_pods_only_when_the_config_changes() -> None:
    for values in ("default-values.yaml", "cluster-values.yaml"):
        before = checksum(render(values))
        assert before and re.fullmatch(r"[0-9a-f]{64}", before)
        assert checksum(render(values, "config.logging.level=debug")) != before
        assert checksum(render(values, "resources.limits.memory=2Gi")) == before
        assert checksum(render(values, "rollOnConfigChange=false")) is None
    objects = render(None, "podAnnotations.team=platform")
    annotations = workload(objects)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["team"] == "platform" and "checksum/config" in annotations


# -- web config -----------------------------------------------------------------------------------


def _web_mount(objects: list[dict[str, Any]]) -> tuple[str, str]:
    """(the --web.config.file argument, the Secret mounted over its directory)."""
    c = container(objects)
    flag = c["args"][c["args"].index("--web.config.file") + 1]
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(Path(flag).parent))
    volume = volumes(objects)[mount["name"]]
    return flag, volume["secret"]["secretName"]


def test_web_config_from_values_is_a_mounted_secret_passed_as_the_flag() -> None:
    objects = render("everything-on-values.yaml")
    flag, secret_name = _web_mount(objects)
    secret = one(objects, "Secret", secret_name)
    web = yaml.safe_load(secret["stringData"][Path(flag).name])
    from alivemcp.web.webconfig import WebConfigFile

    WebConfigFile.model_validate(web)  # the daemon's own check of the format (no files read)
    assert set(web) == {"tls_server_config", "basic_auth_users"}
    # TLS files come from the cert-manager Secret, filled in where the values leave them out.
    tls = web["tls_server_config"]
    mounts = {m["name"]: m["mountPath"] for m in container(objects)["volumeMounts"]}
    vols = volumes(objects)
    assert vols["tls"]["secret"]["secretName"] == "alivemcp-tls"
    assert (tls["cert_file"], tls["key_file"], tls["client_ca_file"]) == tuple(
        f"{mounts['tls']}/{key}" for key in ("tls.crt", "tls.key", "ca.crt")
    )
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container(objects)[probe]["httpGet"]["scheme"] == "HTTPS"


def test_existing_web_config_secret_is_mounted_and_passed() -> None:
    objects = render("existing-config-web-config-values.yaml")
    assert _web_mount(objects) == ("/etc/alivemcp-web/web.yml", "alivemcp-web-config")
    assert "Secret" not in kinds(objects)
    assert container(objects)["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_no_web_config_no_flag() -> None:
    objects = render("default-values.yaml")
    assert not any(a.startswith("--web") for a in container(objects)["args"])
    assert container(objects)["livenessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert "webConfig.existingSecret or webConfig.config" in render_fails(WEB_ON)
    # TLS settings without a certificate do not turn TLS on (as in exporter-toolkit).
    versions = render(None, WEB_ON, "webConfig.config.tls_server_config.min_version=TLS13")
    assert container(versions)["livenessProbe"]["httpGet"]["scheme"] == "HTTP"


# -- ServiceMonitor -------------------------------------------------------------------------------


def test_service_monitor_only_when_enabled() -> None:
    for values in ("default-values.yaml", "cluster-values.yaml"):
        assert "ServiceMonitor" not in kinds(render(values))
    plain = one(render(None, "serviceMonitor.enabled=true"), "ServiceMonitor")
    (endpoint,) = plain["spec"]["endpoints"]
    assert endpoint["scheme"] == "http" and endpoint["path"] == "/metrics"
    assert "tlsConfig" not in endpoint and "basicAuth" not in endpoint


@pytest.mark.parametrize("values", ["everything-on-values.yaml", "cluster-values.yaml"])
def test_service_monitor_scrapes_the_service_once(values: str) -> None:
    objects = render(values, "serviceMonitor.enabled=true")
    monitor = one(objects, "ServiceMonitor")
    services = [o for o in objects if o["kind"] == "Service"]
    scraped = [s for s in services if selects(monitor["spec"]["selector"], s["metadata"]["labels"])]
    # Not also through the headless Service: every replica would be scraped twice.
    assert [s["metadata"]["name"] for s in scraped] == [FULLNAME]
    assert monitor["spec"]["endpoints"][0]["port"] == scraped[0]["spec"]["ports"][0]["name"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}


def test_service_monitor_tls_and_basic_auth_follow_values() -> None:
    existing = one(render("existing-config-web-config-values.yaml"), "ServiceMonitor")
    (given,) = existing["spec"]["endpoints"]
    assert given["scheme"] == "https"
    assert given["tlsConfig"] == {
        "ca": {"configMap": {"name": "alivemcp-ca", "key": "ca.crt"}},
        "serverName": "alivemcp.monitoring.svc",
    }
    assert given["basicAuth"] == {
        "username": {"name": "alivemcp-scrape-credentials", "key": "username"},
        "password": {"name": "alivemcp-scrape-credentials", "key": "password"},
    }
    everything = one(render("everything-on-values.yaml"), "ServiceMonitor")
    (derived,) = everything["spec"]["endpoints"]
    assert derived["scheme"] == "https"
    assert derived["tlsConfig"] == {
        "ca": {"secret": {"name": "alivemcp-tls", "key": "ca.crt"}},
        "serverName": f"{FULLNAME}.{NAMESPACE}.svc",
    }
    assert derived["basicAuth"]["password"]["name"] == "alivemcp-scrape-credentials"
    assert everything["metadata"]["labels"]["release"] == "prometheus"
    # https with nothing to verify the server against is refused, not scraped insecurely.
    https = ("webConfig.existingSecret=web", "webConfig.scheme=https")
    assert "serviceMonitor.tlsConfig" in render_fails("serviceMonitor.enabled=true", WEB_ON, *https)


# -- PrometheusRule ---------------------------------------------------------------------------


def _rules(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    groups = one(objects, "PrometheusRule")["spec"]["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"]}


def test_prometheus_rule_carries_the_project_rules_with_runbook_urls() -> None:
    objects = render("everything-on-values.yaml")
    source_groups = yaml.safe_load(SOURCE_RULES.read_text())["groups"]
    source = {r["alert"]: r for g in source_groups for r in g["rules"]}
    rules = _rules(objects)
    assert rules.keys() == source.keys()
    anchors = github_anchors(RUNBOOK.read_text())
    for name, rule in rules.items():
        base, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert base == DEFAULT_RUNBOOK and anchor in anchors, name
        # Otherwise the source rule, but for the release's job and the extra label.
        expected = copy.deepcopy(source[name])
        expected["expr"] = expected["expr"].replace('job="alivemcp"', f'job="{FULLNAME}"')
        expected["labels"] = {"team": "platform", **expected["labels"]}
        assert rule == expected, name
    assert f'job="{FULLNAME}"' in rules["AlivemcpDown"]["expr"]


def test_prometheus_rule_follows_values() -> None:
    assert "PrometheusRule" not in kinds(render("cluster-values.yaml"))
    base = "https://wiki.example.com/alivemcp/runbook"
    on, job = "prometheusRule.enabled=true", "prometheusRule.job=alivemcp"
    disabled = "prometheusRule.disabledAlerts={AlivemcpManyAlertsFiring}"
    standalone = _rules(render(None, on, f"prometheusRule.runbookBaseUrl={base}", job, disabled))
    # The cluster group only in cluster mode; a disabled alert is gone.
    assert not any(name.startswith("AlivemcpCluster") for name in standalone)
    assert "AlivemcpManyAlertsFiring" not in standalone and "AlivemcpCheckDown" in standalone
    assert all(r["annotations"]["runbook_url"].startswith(base + "#") for r in standalone.values())
    assert standalone["AlivemcpDown"]["annotations"]["runbook_url"] == f"{base}#alivemcpdown"
    assert 'job="alivemcp"' in standalone["AlivemcpDown"]["expr"]
    # The rule's own labels win over the added ones.
    relabelled = _rules(render(None, on, "prometheusRule.additionalRuleLabels.severity=x"))
    assert relabelled["AlivemcpCheckDown"]["labels"]["severity"] == "critical"


# -- NetworkPolicy --------------------------------------------------------------------------------


def test_network_policy_selects_the_pods_and_their_port() -> None:
    assert "NetworkPolicy" not in kinds(render("default-values.yaml"))
    objects = render("everything-on-values.yaml")
    policy = one(objects, "NetworkPolicy")
    pod_labels = workload(objects)["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"], pod_labels)
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": container(objects)["ports"][0]["name"], "protocol": "TCP"}]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    dns, out = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert out["to"][0]["ipBlock"]["except"] == ["169.254.169.254/32"]
    assert 443 in {p["port"] for p in out["ports"]}
    open_egress = one(
        render(None, "networkPolicy.enabled=true", "networkPolicy.egress.enabled=false"),
        "NetworkPolicy",
    )
    assert open_egress["spec"]["policyTypes"] == ["Ingress"] and "egress" not in open_egress["spec"]


# -- NOTES.txt ------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_notes_render(values: Path, tmp_path: Path) -> None:
    """NOTES.txt renders (``helm template`` skips it and ``helm install --dry-run`` needs a
    cluster, so a copy of the chart renders it as an ordinary template)."""
    chart = tmp_path / "alivemcp"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "files/notes.txt") . | toJson }}\n'
    )
    proc = helm(
        "template", RELEASE, str(chart), "-n", NAMESPACE, "-f", str(values),
        "--kube-version", OLDEST_SUPPORTED, "--show-only", "templates/zz-notes.yaml",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    notes = yaml.safe_load(proc.stdout)["notes"]
    assert f"port-forward svc/{FULLNAME} 9464" in notes
    scheme = "https" if "web-config" in values.name or "everything" in values.name else "http"
    assert f"{scheme}://127.0.0.1:9464/" in notes
    assert ("cluster mode" in notes) == ("StatefulSet" in EXPECTED[values.name])
