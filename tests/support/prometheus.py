"""A real Prometheus server for the tests that need one (``make test`` installs it): started
on a free loopback port with a given config, asked through its HTTP API."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import free_port, poll_until

INSTALL_HINT = (
    "Prometheus is required: apt-get install -y prometheus (`make test` does this itself)"
)


def binary(name: str = "prometheus") -> str:
    """The path of ``prometheus`` or ``promtool``; a missing one fails the test (no skip)."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(INSTALL_HINT)
    return path


class Prometheus:
    def __init__(self, workdir: Path, config: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.log_path = workdir / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary(),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )

    @classmethod
    def scraping(
        cls, workdir: Path, scrape_configs: list[dict[str, Any]], interval: str = "1s"
    ) -> Prometheus:
        """One whose config is these scrape jobs, scraped every ``interval``."""
        config = workdir / "prometheus.yml"
        global_ = {"scrape_interval": interval, "scrape_timeout": interval}
        config.write_text(yaml.safe_dump({"global": global_, "scrape_configs": scrape_configs}))
        return cls(workdir, config)

    def api(self, path: str, **params: str) -> Any:
        """A GET of the HTTP API, parsed; raises OSError while it is not listening yet."""
        assert self.proc.poll() is None, self.log_path.read_text()
        url = f"http://127.0.0.1:{self.port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=30) as resp:
            return json.loads(resp.read())

    def values(self, query: str) -> dict[str, float]:
        """An instant query's value per job ({} while Prometheus is not listening yet)."""
        try:
            answer = self.api("/api/v1/query", query=query)
        except OSError:
            return {}
        return {r["metric"].get("job", ""): float(r["value"][1]) for r in answer["data"]["result"]}

    def wait_for(self, what: str, predicate: Any, timeout: float = 60) -> Any:
        """Until ``predicate()`` is truthy (an OSError counts as not yet), with a deadline:
        Prometheus answers over HTTP and scrapes on its own schedule, so it is polled."""

        def answered() -> Any:
            assert self.proc.poll() is None, self.log_path.read_text()
            try:
                return predicate()
            except OSError:
                return None

        return poll_until(
            answered,
            timeout,
            what,
            every=0.25,
            context=lambda: self.log_path.read_text()[-3000:],
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
