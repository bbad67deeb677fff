"""`alivemcp probes --schema` describes exactly what the loader accepts: every config in the
repository (and the README's) passes both a real JSON Schema validator and the loader, and a
table of mistakes is refused by both."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from alivemcp.config import ConfigError, load_config_text
from tests.support import REPO, cli

README = (REPO / "README.md").read_text()


def _schema() -> dict[str, Any]:
    # Through the real CLI, as an editor integration would get it.
    proc = cli("probes", "--schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(_schema())


def _repo_configs() -> dict[str, str]:
    configs = {
        str(p.relative_to(REPO)): p.read_text()
        for p in [*sorted((REPO / "config").glob("*.yaml")), REPO / "deploy/docker/config.yaml"]
    }
    for path in ("deploy/kubernetes/configmap.yaml", "deploy/kubernetes/cluster/configmap.yaml"):
        configmap = yaml.safe_load((REPO / path).read_text())
        configs[path] = configmap["data"]["config.yaml"]
    # (The README's plugin config names a probe type that only its own test installs.)
    for tag in re.findall(r"<!-- readme-test: ([\w-]*config[\w-]*) -->", README):
        if tag.startswith("plugin"):
            continue
        block = re.search(rf"<!-- readme-test: {tag} -->\n```\w+\n(.*?)\n```", README, re.DOTALL)
        assert block
        configs[f"README.md ({tag})"] = block.group(1)
    return configs


CONFIGS = _repo_configs()


class _AnyEnv(dict[str, str]):
    """Every ${VAR} is set (to a value that fits where the repo's configs use them)."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        if key.endswith(("_URL", "_ENDPOINT")):
            return "http://127.0.0.1:9/x"
        if "OLAP" in key and key.endswith("_ARN"):
            return "arn:aws:s3-object-lambda:us-east-1:123456789012:accesspoint/olap"
        if key.endswith("_ARN"):
            return "arn:aws:s3:us-east-1:123456789012:accesspoint/ap"
        if key.endswith("LISTEN"):
            return "127.0.0.1:9464"
        if key.endswith("BOOTSTRAP"):
            return "127.0.0.1:9092"
        return "value-of-" + key.lower().replace("_", "-")


def test_repo_has_configs_to_check() -> None:
    assert {
        "config/alivemcp.example.yaml",
        "config/demo.yaml",
        "deploy/kubernetes/configmap.yaml",
        "deploy/kubernetes/cluster/configmap.yaml",
        "README.md (config)",
    } <= set(CONFIGS)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_repo_config_passes_the_schema_and_the_loader(
    name: str, validator: jsonschema.Draft202012Validator
) -> None:
    text = CONFIGS[name]
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(yaml.safe_load(text))
    ]
    assert not errors, "\n".join(errors)
    load_config_text(text, source=name, base_dir=REPO / "config", env=_AnyEnv())


MISTAKES = {
    "typo in a section": "defaults: {intervall: 30s}\n",
    "bad duration": "defaults: {interval: soon}\n",
    "negative duration": "defaults: {interval: -5}\n",
    "duration beyond a year": "defaults: {interval: 40000000}\n",
    "unknown probe type": "checks: [{name: a, probe: mcp_endpointt, params: {url: 'http://x'}}]\n",
    "params of another type": "checks: [{name: a, probe: mcp_endpoint, params: {bucket: b}}]\n",
    "missing target param": "checks: [{name: a, probe: mcp_endpoint}]\n",
    "unknown top-level key": "chekcs: []\n",
    "zero concurrency": "scheduler: {max_concurrency: 0}\n",
    "zero per-type limit": "scheduler: {per_probe_type: {mcp_endpoint: 0}}\n",
}

ACCEPTED = {
    "x- anchor keys": "x-common: &c {interval: 30s}\nchecks: [{name: a, probe: mcp_endpoint, "
    "<<: *c, params: {url: 'http://127.0.0.1:9/mcp'}}]\n",
    "durations as strings and numbers": "defaults: {interval: 1.5m, timeout: 10}\n",
    "targets fill the target param": "checks: [{name: m, probe: mcp_endpoint, "
    "targets: ['http://127.0.0.1:9/a']}]\n",
    "a number from the environment": "scheduler: {max_concurrency: '${MAX_RUNS}'}\n",
}


@pytest.mark.parametrize("case", list(MISTAKES))
def test_mistakes_are_refused_by_schema_and_loader(
    case: str, validator: jsonschema.Draft202012Validator
) -> None:
    text = MISTAKES[case]
    assert list(validator.iter_errors(yaml.safe_load(text))), f"schema accepted: {text}"
    with pytest.raises(ConfigError):
        load_config_text(text, env={})


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_valid_spellings_are_accepted_by_schema_and_loader(
    case: str, validator: jsonschema.Draft202012Validator
) -> None:
    text = ACCEPTED[case]
    errors = [e.message for e in validator.iter_errors(yaml.safe_load(text))]
    assert not errors, errors
    load_config_text(text, env={"MAX_RUNS": "50"})


def test_schema_file_path_loads_repo_config_from_cli(tmp_path: Path) -> None:
    # The same config through the CLI's validator, so the schema and `validate` agree.
    proc = cli("validate", "--allow-missing-env", "-c", str(REPO / "config/demo.yaml"))
    assert proc.returncode == 0, proc.stderr
