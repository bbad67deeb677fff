"""One version everywhere it is written down: pyproject, the image, the manifests, the changelog."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

from alivemcp import __version__

REPO = Path(__file__).resolve().parents[2]


def project_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_installed_version_is_the_project_version() -> None:
    assert __version__ == project_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", project_version())


def test_changelog_has_a_section_for_this_version() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert re.search(
        rf"^## \[{re.escape(project_version())}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.MULTILINE
    )
    assert "## [Unreleased]" in text


def test_image_and_manifests_carry_this_version() -> None:
    version = project_version()
    assert f"ARG VERSION={version}\n" in (REPO / "Dockerfile").read_text()
    kustomization = yaml.safe_load((REPO / "deploy/kubernetes/kustomization.yaml").read_text())
    assert [i["newTag"] for i in kustomization["images"]] == [version]
    for workload in (
        "deploy/kubernetes/deployment.yaml",
        "deploy/kubernetes/cluster/statefulset.yaml",
    ):
        manifest = yaml.safe_load((REPO / workload).read_text())
        images = [c["image"] for c in manifest["spec"]["template"]["spec"]["containers"]]
        assert images == [f"alivemcp:{version}"], workload
    assert {i["name"] for i in kustomization["images"]} == {"alivemcp"}
