"""Never let a public list aim the prober inward, in the real daemon: with the MCP registry
source's default (``allow_private_addresses: false``) a loopback MCP server listed in a local
registry is never contacted, whether the entry names it by address or by a name that resolves
there at discovery, or by a name that turns inward only afterwards (DNS rebinding: the run is
refused at connect time and says why).

The first test runs ``alivemcp run`` as a subprocess; the second runs the daemon in this
process, whose name lookups the test answers (the loopback-only machine has no other way to
make a name resolve first outward, then inward).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alivemcp.app.daemon import Daemon
from alivemcp.probe import Status
from alivemcp.testbed.mcp_registry import LocalRegistry, remote
from tests.discovery.daemon_support import (
    INTERVAL,
    REFRESH,
    TIMEOUT,
    ServedLab,
    daemon_in_process,
    registry_source,
    rows,
    running_daemon,
    sample,
    samples,
    settled,
    source_of,
    template,
    until,
    within,
    write_config,
)
from tests.discovery.support import PUBLIC_IP, Lookups


async def test_a_loopback_target_is_never_connected_to(
    tmp_path: Path, lab: ServedLab, registry: LocalRegistry
) -> None:
    """With the registry's default (``allow_private_addresses: false``), entries aimed at a
    loopback MCP server, by address or by name, and at other non-public ranges, are skipped
    as ``private_address``; not one request reaches that server, while a trusted source's
    check on another server runs several times meanwhile."""
    async with ServedLab().serving() as inward, LocalRegistry() as trusted:
        port = inward.base.rsplit(":", 1)[1]
        registry.add("io.github.x/loopback", remotes=[remote(inward.url("/json"))])
        registry.add("io.github.x/localhost", remotes=[remote(f"http://localhost:{port}/sse")])
        registry.add("io.github.x/v6", remotes=[remote(f"http://[::1]:{port}/json")])
        registry.add("io.github.x/legacy", remotes=[remote(inward.url("/legacy"), "sse")])
        registry.add("io.github.x/metadata", remotes=[remote("http://169.254.169.254/mcp")])
        registry.add("io.github.x/lan", remotes=[remote("http://10.0.0.1/mcp")])
        trusted.add("io.github.lab/control", remotes=[remote(lab.url("/json"))])
        control = {
            # Loopback servers only on this machine: this one is let run them.
            **registry_source(
                "trusted", trusted.url, refresh=REFRESH, allow_private_addresses=True
            ),
            "template": template(INTERVAL, TIMEOUT),
        }
        public = {
            # allow_private_addresses left at the registry's default, false.
            **registry_source("public", registry.url, refresh=REFRESH),
            "template": template(INTERVAL, TIMEOUT),
        }
        config = write_config(tmp_path / "c.yaml", [public, control])
        async with running_daemon(config) as d:
            # Three reads of the public list, and three runs of the trusted check, later:
            reads = len(registry.requests)
            await until(
                d,
                lambda: (
                    len(registry.requests) >= reads + 3
                    and len(rows(d).get("trusted/io.github.lab/control", {}).get("history", []))
                    >= 3
                ),
                within(refreshes=3, refresh=REFRESH, runs=3, interval=INTERVAL),
                "three refreshes and three runs of the control check",
            )
            assert inward.requests() == 0, inward.state.seen
            assert [name for name in rows(d) if name.startswith("public/")] == []
            source = source_of(d, "public")
            assert source["ok"] and source["targets"] == 0
            assert source["skipped"] == {"private_address": 6}
            examples = " ".join(source["skipped_examples"]["private_address"])
            assert "loopback" in examples and "allow_private_addresses: false" in examples
            metrics = samples(d)
            assert (
                sample(
                    metrics,
                    "alivemcp_discovery_skipped_targets",
                    source="public",
                    reason="private_address",
                )
                == 6.0
            )
            assert sample(metrics, "alivemcp_discovery_targets", source="public") == 0.0
        assert inward.requests() == 0, inward.state.seen


class TurnsInward(Lookups):
    """DNS rebinding: ``rebind.example.com`` answers a public address the first time it is
    looked up (discovery's look), and loopback every time after (the run's connection)."""

    def __call__(
        self, host: str, port: Any, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
    ) -> list[Any]:
        if host == "rebind.example.com":
            self.answers[host] = [PUBLIC_IP] if host not in self.calls else ["127.0.0.1"]
        return super().__call__(host, port, family, type, proto, flags)


async def test_a_name_that_turns_inward_after_discovery_is_refused_at_connect_time(
    tmp_path: Path, lab: ServedLab, registry: LocalRegistry
) -> None:
    """A name that resolved to a public address when it was discovered and to loopback when
    its check runs (the daemon in this process, its name lookups answered by the test): the
    run is ``unknown`` naming the rule, and nothing reaches the server. A name that resolves
    to loopback at discovery is skipped there."""
    port = lab.base.rsplit(":", 1)[1]
    registry.add(
        "io.github.x/rebinding", remotes=[remote(f"http://rebind.example.com:{port}/json")]
    )
    registry.add("io.github.x/inward", remotes=[remote(f"http://inward.example.com:{port}/sse")])
    public = {
        **registry_source("public", registry.url, refresh=REFRESH),  # (private: refused)
        "template": template(INTERVAL, TIMEOUT),
    }
    config = write_config(tmp_path / "c.yaml", [public], server={"listen": "127.0.0.1:0"})
    lookups = TurnsInward()
    lookups.answers["inward.example.com"] = ["127.0.0.1"]

    def answered_by_the_test(daemon: Daemon) -> None:
        daemon.plumbing.http.resolver.getaddrinfo = lookups
        daemon.plumbing.http.resolver.cache_seconds = 0  # (every lookup asked again)

    async with daemon_in_process(config, answered_by_the_test) as daemon:
        name = "public/io.github.x/rebinding"
        state = await settled(
            lambda: (s := daemon.store.get(name)) is not None and s.last is not None and s,
            within(refreshes=1, refresh=REFRESH, runs=1, interval=INTERVAL),
            "the rebinding name's first run",
        )
        result = state.last
        assert result.status is Status.UNKNOWN
        assert result.reason == (
            "refused to connect to rebind.example.com (127.0.0.1): not a public address "
            "(loopback), and this check may only reach public ones "
            "(allow_private_addresses: false)"
        )
        assert lookups.calls.count("rebind.example.com") >= 2  # discovery's look, the run's
        assert lab.requests() == 0, lab.state.seen
        snapshot = {s.name: s for s in daemon.discovery.snapshot()}["public"]
        assert snapshot.targets == 1 and snapshot.skipped == {"private_address": 1}
        assert "inward.example.com" in snapshot.skipped_examples["private_address"][0]
