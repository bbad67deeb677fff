"""Several locations, one verdict: real ``alivemcp run`` replicas in three locations on the
3-broker KRaft cluster, probing real MCP servers (the lab's) through one real HTTP proxy per
location (``HTTP_PROXY``, which the probe honours). A location's view of a target is broken
by its proxy dropping the target's connections, a location is killed with SIGKILL, and one is
cut from Kafka by the gates in front of the brokers: the network, not a flag in the probe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alivemcp.testbed.mcp_servers import ServerProcess, surface_lab
from tests.support import DaemonProcess, poll_until
from tests.support.alerting_daemon import per_key
from tests.support.alerting_receivers import StandIn
from tests.support.cluster import (
    GatedKafkaCluster,
    alive,
    cluster_section,
    paging_replica,
    unique_prefix,
)
from tests.support.http_proxy import LocalProxy

LOCATIONS = ("ap-south", "eu-west", "us-east")
#: Each check's interval; its timeout is most of it. With a 0.8 s timeout, two of the three
#: processes once timed out at the same moment on a loaded 2-core machine (a real quorum down
#: and a real page, before the test's fault): the verdicts must come from the faults alone.
INTERVAL = 1.5
FRESHNESS = 3.0  # intervals: a vote is stale 4.5 s after its run
SHARDS = 6
SESSION_TIMEOUT = 6.0
HEARTBEAT = 1.0
#: Long enough for a few rounds of every location (each runs each check once an interval).
ROUND = INTERVAL * 2
TOOLS = [{"name": "echo", "description": "Echo the text.", "inputSchema": {"type": "object"}}]


def pages(events: list[dict[str, Any]]) -> dict[str, int]:
    """Triggers per dedup key (the receivers' view of what paged)."""
    return {key: actions.count("trigger") for key, actions in per_key(events).items()}


class Locations:
    """One replica per location, each probing through its own proxy, paging the stand-ins."""

    def __init__(
        self,
        kafka: GatedKafkaCluster,
        root: Path,
        lab: ServerProcess,
        pd: StandIn,
        checks: dict[str, dict[str, Any]],
        *,
        gated: str = "",
    ) -> None:
        self.pd = pd
        self.checks = checks
        self.urls = {name: surface_lab(lab, {"tools": TOOLS}) for name in checks}
        self.paths = {name: "/" + url.split("/", 3)[3] for name, url in self.urls.items()}
        self.proxies = {location: LocalProxy().__enter__() for location in LOCATIONS}
        prefix = unique_prefix("locations")
        self.daemons: dict[str, DaemonProcess] = {}
        for location in LOCATIONS:
            path = paging_replica(
                root,
                location,
                checks=[
                    {"name": name, "probe": "mcp_endpoint", "params": {"url": self.urls[name]}}
                    | extra
                    for name, extra in checks.items()
                ],
                defaults={"interval": INTERVAL, "timeout": INTERVAL * 0.9},
                receivers=[pd.receiver("pd", timeout=10.0)],
                cluster=cluster_section(
                    kafka.gated_bootstrap if location == gated else kafka.bootstrap,
                    prefix,
                    replica=f"{location}-r0",
                    shards=SHARDS,
                    session_timeout=SESSION_TIMEOUT,
                    heartbeat_interval=HEARTBEAT,
                    location=location,
                    freshness_intervals=FRESHNESS,
                ),
            )
            proxy = self.proxies[location].url
            env = {"HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}
            self.daemons[location] = DaemonProcess(path, env=env)

    def start(self) -> Locations:
        for daemon in self.daemons.values():
            daemon.start()
        for name, check in self.checks.items():  # every location's vote arrived: it is up
            self.wait_verdict(name, "up", timeout=90)
            voters = len(check.get("locations", LOCATIONS))
            poll_until(
                lambda name=name, voters=voters: (
                    all(vote["fresh"] for vote in (self.row(name).get("locations") or {}).values())
                    and len(self.row(name).get("locations") or {}) == voters
                ),
                60,
                f"a fresh vote of {name} from every location",
                every=0.2,
            )
        return self

    def running(self) -> list[DaemonProcess]:
        return alive(self.daemons.values())

    def drop(self, name: str, *locations: str) -> None:
        for location in locations:
            self.proxies[location].drop.add(self.paths[name])

    def heal(self, name: str) -> None:
        for proxy in self.proxies.values():
            proxy.drop.discard(self.paths[name])

    def row(self, name: str, daemon: DaemonProcess | None = None) -> dict[str, Any]:
        return (daemon or self.running()[0]).status_of(name)

    def wait_verdict(
        self,
        name: str,
        status: str,
        *,
        timeout: float = 30,
        daemon: DaemonProcess | None = None,
        votes: Callable[[dict[str, Any]], bool] = lambda votes: True,
        what: str = "",
    ) -> dict[str, Any]:
        """Until the check's verdict has ``status`` (as one running replica shows it) and its
        per-location ``votes`` pass the test given: a verdict is reached at quorum, and the
        locations beyond it vote when their own runs come (one round later at most)."""
        seen: dict[str, Any] = {}

        def reached() -> bool:
            seen.clear()
            seen.update(self.row(name, daemon))
            return seen.get("status") == status and votes(seen.get("locations") or {})

        poll_until(
            reached,
            timeout,
            f"{name} {status} {what}".strip(),
            every=0.2,
            context=lambda: f"row: {seen}",
        )
        return seen

    def decider(self, name: str) -> str:
        for location, daemon in self.daemons.items():
            if daemon in self.running() and self.row(name, daemon).get("decided_here"):
                return location
        return ""

    def wait_rounds(self, name: str, rounds: int = 3) -> None:
        """Until every running location has run the check ``rounds`` more times: a page or
        resolve decided on the runs before has been sent by then."""
        first = self.row(name).get("locations") or {}
        since = {loc: vote["last_run"] for loc, vote in first.items()}
        live = {loc for loc, d in self.daemons.items() if d in self.running()}

        def enough() -> bool:
            votes = self.row(name).get("locations") or {}
            return all(
                votes.get(loc, {}).get("last_run", 0) > since.get(loc, 0) + (rounds - 1) * INTERVAL
                for loc in live
            )

        poll_until(enough, 20 * rounds * INTERVAL, f"{rounds} more rounds of {name}", every=0.2)

    def close(self) -> None:
        for daemon in self.daemons.values():
            try:
                daemon.stop()
            finally:
                daemon.kill()
        for proxy in self.proxies.values():
            proxy.__exit__(None, None, None)


@pytest.fixture(scope="module")
def pd() -> Iterator[StandIn]:
    with StandIn("pagerduty") as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def three(
    kafka3: GatedKafkaCluster,
    tmp_path_factory: pytest.TempPathFactory,
    lab: ServerProcess,
    pd: StandIn,
) -> Iterator[Locations]:
    checks: dict[str, dict[str, Any]] = {
        "everywhere": {},
        "one": {},
        "two": {},
        "pair": {"locations": ["eu-west", "us-east"]},
    }
    rig = Locations(kafka3, tmp_path_factory.mktemp("three"), lab, pd, checks)
    try:
        yield rig.start()
    finally:
        rig.close()


def test_down_everywhere_pages_once_naming_every_location(three: Locations) -> None:
    before = pages(three.pd.events()).get("alivemcp/everywhere", 0)
    three.drop("everywhere", *LOCATIONS)
    row = three.wait_verdict(
        "everywhere",
        "down",
        votes=lambda votes: all(votes.get(loc, {}).get("status") == "down" for loc in LOCATIONS),
        what="with every location's vote down",
    )
    assert row["reason"].startswith("down from 3 of 3 locations: ")
    for location in LOCATIONS:
        assert location in row["reason"]
        assert row["locations"][location]["status"] == "down"
    three.pd.wait_for(
        lambda: pages(three.pd.events()).get("alivemcp/everywhere", 0) > before, 30, "paged"
    )
    three.wait_rounds("everywhere")
    # One page for the fault (counted from it: the module's daemons have run a while).
    assert pages(three.pd.events()).get("alivemcp/everywhere") == before + 1
    page = [e for e in three.pd.events() if e["dedup_key"] == "alivemcp/everywhere"][-1]
    assert page["event_action"] == "trigger"
    assert all(location in str(page["payload"]) for location in LOCATIONS)
    three.heal("everywhere")
    three.wait_verdict("everywhere", "up")
    three.pd.wait_for(
        lambda: per_key(three.pd.events())["alivemcp/everywhere"][-1] == "resolve", 30, "resolve"
    )


def test_down_from_one_location_is_degraded_named_and_no_page(three: Locations) -> None:
    three.drop("one", "eu-west")
    row = three.wait_verdict("one", "degraded")
    assert "down from 1 of 3 locations (quorum 2): eu-west" in row["reason"]
    assert row["locations"]["eu-west"]["status"] == "down"
    assert row["locations"]["us-east"]["status"] == "up"
    # The lower-severity alert of its own, routed apart from the status alert.
    three.pd.wait_for(
        lambda: pages(three.pd.events()).get("alivemcp/one/location_disagrees"),
        30,
        "location_disagrees",
    )
    three.wait_rounds("one")
    assert "alivemcp/one" not in pages(three.pd.events())
    three.heal("one")
    three.wait_verdict("one", "up")


def test_down_from_two_of_three_pages(three: Locations) -> None:
    before = pages(three.pd.events()).get("alivemcp/two", 0)
    three.drop("two", "eu-west", "us-east")
    row = three.wait_verdict("two", "down")
    assert row["reason"].startswith("down from 2 of 3 locations: eu-west")
    assert row["reason"].endswith("; ap-south up")
    three.pd.wait_for(lambda: pages(three.pd.events()).get("alivemcp/two", 0) > before, 30, "paged")
    three.wait_rounds("two")
    assert pages(three.pd.events())["alivemcp/two"] == before + 1
    three.heal("two")
    three.wait_verdict("two", "up")


def test_a_check_is_probed_and_decided_only_where_its_locations_say(three: Locations) -> None:
    row = three.row("pair")
    assert set(row["locations"]) == {"eu-west", "us-east"}
    assert row["reason"] == "up from 2 of 2 locations"
    path = three.paths["pair"]
    assert not [s for s in three.proxies["ap-south"].seen if path in s.target]
    assert [s for s in three.proxies["eu-west"].seen if path in s.target]
    # Two locations, a majority of two: one saying down is a disagreement, not an outage.
    three.drop("pair", "us-east")
    row = three.wait_verdict("pair", "degraded")
    assert "down from 1 of 2 locations (quorum 2): us-east" in row["reason"]
    three.heal("pair")
    three.wait_verdict("pair", "up")


def test_a_location_killed_mid_incident_no_repage_no_resolve_and_it_is_silent(
    kafka3: GatedKafkaCluster, tmp_path: Path, lab: ServerProcess, pd: StandIn
) -> None:
    checks: dict[str, dict[str, Any]] = {
        "api": {},
        "strict": {"locations": list(LOCATIONS), "quorum": 3},
    }
    rig = Locations(kafka3, tmp_path, lab, pd, checks).start()
    try:
        rig.drop("api", *LOCATIONS)
        rig.wait_verdict("api", "down")
        pd.wait_for(lambda: pages(pd.events()).get("alivemcp/api"), 30, "paged")
        # The location whose replica pages for api dies with it (kill -9): another location's
        # replica takes the check's verdict and alert state over.
        victim = rig.decider("api")
        assert victim in LOCATIONS
        # No re-page is promised once the page's record is on the brokers (killed between the
        # send and that record, the next owner sends again: at least once; the receiver's
        # dedup key makes it one incident).
        deciding = rig.daemons[victim]
        poll_until(
            lambda: (
                '"api:target:firing"' in deciding.logs()
                and deciding.metric("alivemcp_cluster_alert_records_pending") == 0
            ),
            30,
            f"{victim}'s page delivered and its alert state written",
            every=0.1,
        )
        rig.daemons[victim].kill()
        survivor = rig.running()[0]
        poll_until(
            lambda: rig.decider("api") not in ("", victim),
            60,
            "another replica deciding api",
            every=0.2,
        )
        # The victim's last vote counts until it is stale (freshness: 2 intervals).
        row = rig.wait_verdict(
            "api",
            "down",
            daemon=survivor,
            votes=lambda votes: votes.get(victim, {}).get("fresh") is False,
            what=f"with {victim}'s vote stale",
        )
        assert row["reason"].startswith("down from 2 of 3 locations")
        assert f"{victim} stale" in row["reason"]
        poll_until(
            lambda: survivor.metric("alivemcp_cluster_location_silent", location=victim) == 1.0,
            30,
            f"{victim} silent",
            every=0.2,
        )
        # Quorum 3 of 3 with a location silent: the monitor cannot decide, never down.
        strict = rig.wait_verdict("strict", "unknown", daemon=survivor)
        assert "only 2 of 3 locations decide (quorum 3)" in strict["reason"]
        assert f"{victim} stale" in strict["reason"]
        rig.wait_rounds("api")
        assert per_key(pd.events())["alivemcp/api"] == ["trigger"]
        assert "alivemcp/strict" not in per_key(pd.events())
    finally:
        rig.close()


def test_a_location_cut_from_kafka_stops_voting_and_the_others_carry_on(
    kafka3: GatedKafkaCluster, tmp_path: Path, lab: ServerProcess, pd: StandIn
) -> None:
    rig = Locations(kafka3, tmp_path, lab, pd, {"cut": {}}, gated="eu-west").start()
    try:
        rig.drop("cut", "eu-west")
        rig.wait_verdict("cut", "degraded")
        others = [d for loc, d in rig.daemons.items() if loc != "eu-west"]
        kafka3.cut()
        try:
            # eu-west's down vote goes stale: the verdict is the others' (up), and says so.
            row = rig.wait_verdict("cut", "up", daemon=others[0])
            assert row["reason"] == "up from 2 of 3 locations; eu-west stale"
            assert row["locations"]["eu-west"]["fresh"] is False
            poll_until(
                lambda: (
                    others[0].metric("alivemcp_cluster_location_silent", location="eu-west") == 1.0
                ),
                30,
                "eu-west silent",
                every=0.2,
            )
        finally:
            kafka3.heal()
        rig.wait_verdict("cut", "degraded", daemon=others[0], timeout=60)
        assert "alivemcp/cut" not in pages(pd.events())
    finally:
        rig.close()
