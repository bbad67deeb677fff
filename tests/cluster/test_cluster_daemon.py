"""Cluster mode end to end: three real ``alivemcp run`` replicas, a real three-broker Kafka.

240 checks (a test probe on loopback that notes each run's start in a file of its own, every
2 s) are shared by three replicas. Two records tell who probed what:

* the results topic (what the replicas published): in steady state each check has exactly one
  result per interval (per point of its schedule grid), all from one replica;
* the run files (what was actually probed, whether or not Kafka heard of it): a check run by
  two replicas at once would show two starts at one grid point, since every replica schedules
  a check on the same grid. Across every test below, no two starts of a check are closer
  than half an interval.

The tests share one trio of replicas (module scope) and each leaves it whole: kill -9 and a
restart, a rolling restart, one broker stopped, Kafka entirely down.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import signal
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from alivemcp.cluster.shards import shard_of
from alivemcp.engine.grid import stable_offset
from tests.support import REPO, DaemonProcess, poll_until, run_until
from tests.support.cluster import GatedKafkaCluster, cluster_section, unique_prefix
from tests.support.metric_names import promql_metric_names, sample_names_from_exposition

CHECKS = 240
INTERVAL = 2.0
SHARDS = 12
# Longer than a replica's restart takes on a loaded machine (a full suite on 2 cores: stop
# and start up to 8.9 s, and the group's join after that), or the rolling restart's replica
# is evicted before it is back, which is the kill test's case, not static membership's.
SESSION = 15.0
HEARTBEAT = 1.0
LEASE = SESSION - 2 * HEARTBEAT
REQUEST_TIMEOUT = 3.0  # cluster_section's Kafka request timeout
REPLICAS = ("r0", "r1", "r2")


def check_names(count: int = CHECKS) -> list[str]:
    return [f"svc-{i:03d}" for i in range(count)]


@dataclass
class Trio:
    cluster: GatedKafkaCluster
    prefix: str
    root: Path
    daemons: dict[str, DaemonProcess]
    names: list[str]

    @property
    def topic(self) -> str:
        return f"{self.prefix}-results"

    def write_configs(self, names: list[str]) -> None:
        self.names = names
        for replica in REPLICAS:
            path = self.root / f"{replica}.yaml"
            doc = {
                "logging": {"format": "json"},
                "data_dir": str(self.root / f"data-{replica}"),
                "checks": [
                    {
                        "name": name,
                        "probe": "test_static",
                        "interval": INTERVAL,
                        "params": {"record_to": str(self.runs_file(name))},
                    }
                    for name in names
                ],
                "cluster": cluster_section(
                    self.cluster.bootstrap,
                    self.prefix,
                    replica=replica,
                    shards=SHARDS,
                    session_timeout=SESSION,
                    heartbeat_interval=HEARTBEAT,
                ),
            }
            path.write_text(yaml.safe_dump(doc))

    def runs_file(self, name: str) -> Path:
        return self.root / "runs" / f"{name}.txt"

    def runs(self, since: float = 0.0, until: float = float("inf")) -> dict[str, list[float]]:
        """Start times of every run of every check, from the run files."""
        out: dict[str, list[float]] = {}
        for name in self.names:
            path = self.runs_file(name)
            times = [float(x) for x in path.read_text().split()] if path.exists() else []
            out[name] = sorted(t for t in times if since <= t < until)
        return out

    def metric(self, replica: str, name: str) -> float:
        text = self.daemons[replica].get("/metrics")[1]
        match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
        assert match, f"{name} not in {replica}'s /metrics"
        return float(match.group(1))

    def shares(self) -> dict[str, int]:
        return {
            r: int(self.metric(r, "alivemcp_cluster_shards_held"))
            for r in REPLICAS
            if self.running(r)
        }

    def running(self, replica: str) -> bool:
        proc = self.daemons[replica].proc
        return proc is not None and proc.poll() is None

    def settled(self) -> bool:
        shares = self.shares()
        return len(shares) == 3 and sorted(shares.values()) == [4, 4, 4]

    def wait_settled(self, timeout: float = 60.0) -> None:
        any_daemon = next(iter(self.daemons.values()))
        any_daemon.wait_for(self.settled, timeout, "4 shards on each of 3 replicas")


def assert_one_prober(runs: dict[str, list[float]]) -> None:
    """No two starts of a check closer than half an interval: a check probed by two replicas
    would start twice at one point of its grid."""
    close = {
        name: [(a, b) for a, b in itertools.pairwise(times) if b - a < INTERVAL / 2]
        for name, times in runs.items()
    }
    close = {name: pairs for name, pairs in close.items() if pairs}
    assert not close, f"checks run twice in one interval: {dict(list(close.items())[:5])}"


def longest_gap(runs: dict[str, list[float]], names: list[str] | None = None) -> float:
    """The longest wait between two runs of one check."""
    return max(b - a for name in (names or list(runs)) for a, b in itertools.pairwise(runs[name]))


def grid_index(name: str, started_at: float) -> int:
    return round((started_at - stable_offset(name, INTERVAL)) / INTERVAL)


async def read_results(trio: Trio, since: float) -> list[dict[str, Any]]:
    """Every result in the results topic produced since ``since`` (up to its current end)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=trio.cluster.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(trio.topic, p) for p in range(SHARDS)]
        consumer.assign(tps)
        starts = await consumer.offsets_for_times({tp: int(since * 1000) for tp in tps})
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            found = starts.get(tp)
            consumer.seek(tp, found.offset if found is not None else ends[tp])
        records: list[dict[str, Any]] = []
        pending = {tp for tp in tps if await consumer.position(tp) < ends[tp]}
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            batch = await consumer.getmany(*pending, timeout_ms=1000)
            for messages in batch.values():
                for message in messages:
                    assert message.partition == shard_of(message.key.decode(), SHARDS)
                    records.append(json.loads(message.value))
            pending = {tp for tp in pending if await consumer.position(tp) < ends[tp]}
        assert not pending, "could not read the results topic to its end"
        return [r for r in records if r["started_at"] >= since]
    finally:
        await consumer.stop()


@pytest.fixture(scope="module")
async def trio(
    kafka3: GatedKafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Trio]:
    root = tmp_path_factory.mktemp("trio")
    (root / "runs").mkdir()
    trio = Trio(kafka3, unique_prefix("trio"), root, {}, [])
    trio.write_configs(check_names())
    try:
        for replica in REPLICAS:
            trio.daemons[replica] = DaemonProcess(root / f"{replica}.yaml").start()
        trio.wait_settled(90)
        yield trio
    finally:
        kafka3.heal()
        for daemon in trio.daemons.values():
            try:
                daemon.stop()
            finally:
                daemon.kill()


@pytest.fixture
def whole_and_one_prober(trio: Trio) -> Iterator[Trio]:
    """Each test starts with three settled replicas and ends with every check probed by one
    replica at a time over its whole span."""
    trio.wait_settled(90)
    began = time.time()
    yield trio
    trio.wait_settled(90)
    assert_one_prober(trio.runs(began))


def owners(trio: Trio) -> dict[str, str]:
    return {row["check"]: row["owner"] for row in trio.daemons["r0"].get_json("/status")["checks"]}


def probed_again(trio: Trio, after: float) -> bool:
    return all(times for times in trio.runs(after).values())


def wait_rows_fresh(trio: Trio, since: float) -> None:
    """Until every row of r0's /status comes from a run started after ``since``: each row's
    owner is the replica probing the check now (after the last rebalance)."""
    stale: list[str] = []

    def fresh() -> bool:
        rows = trio.daemons["r0"].get_json("/status")["checks"]
        stale[:] = [row["check"] for row in rows if (row["last_run"] or 0.0) < since]
        return not stale

    poll_until(
        fresh,
        10 * INTERVAL,
        "every row of r0's /status from a run after the last rebalance",
        every=0.2,
        context=lambda: f"{len(stale)} rows older: {stale[:10]}",
    )


async def wait_results_in_topic(
    trio: Trio, since: float, names: list[str], points: int = 1
) -> None:
    """Until the results topic holds, for every check of ``names``, results at ``points``
    grid points started at or after ``since``. Each check's results come from one producer,
    in order: its earlier ones are in the topic by then too."""

    async def missing() -> list[str]:
        seen: dict[str, set[int]] = defaultdict(set)
        for record in await read_results(trio, since):
            seen[record["check"]].add(grid_index(record["check"], record["started_at"]))
        return [name for name in names if len(seen[name]) < points]

    await run_until(
        missing,
        lambda names_missing: not names_missing,
        f"results at {points} grid points of every check in the topic",
        within=(points + 10) * INTERVAL,
        pause=0.5,
    )


async def test_each_check_is_probed_by_exactly_one_replica_per_interval(
    whole_and_one_prober: Trio,
) -> None:
    trio = whole_and_one_prober
    # Past the first runs of the last rebalance (extra runs off the grid): every check
    # probed since the replicas settled.
    settled_at = time.time()
    trio.daemons["r0"].wait_for(
        lambda: probed_again(trio, settled_at), 10 * INTERVAL, "every check probed once settled"
    )
    since = time.time()
    # why: not a wait for an event: the steady state is watched over four intervals.
    await asyncio.sleep(4 * INTERVAL)
    until = time.time()

    def last_point(name: str) -> int:  # the last grid point of the check before ``until``
        return math.floor((until - stable_offset(name, INTERVAL)) / INTERVAL)

    # The results of the window's grid points in the topic: a result of a point after them
    # is there (however late a loaded machine ran or published them).
    await wait_results_in_topic(trio, until, trio.names)
    records = [
        r
        for r in await read_results(trio, since)
        if grid_index(r["check"], r["started_at"]) <= last_point(r["check"])
    ]
    per_check: dict[str, Counter[int]] = defaultdict(Counter)
    replicas_of: dict[str, set[str]] = defaultdict(set)
    for record in records:
        per_check[record["check"]][grid_index(record["check"], record["started_at"])] += 1
        replicas_of[record["check"]].add(record["replica"])
    assert set(per_check) == set(trio.names)
    for name, counts in per_check.items():
        assert set(counts.values()) == {1}, (name, counts)  # one result per grid point
        # Every grid point of the window (a run starts after its point: at or after since).
        first = math.ceil((since - stable_offset(name, INTERVAL)) / INTERVAL)
        last = last_point(name)
        missing = set(range(first, last + 1)) - set(counts)
        assert not missing, (name, sorted(counts), first, last)
    assert all(len(r) == 1 for r in replicas_of.values())
    owners = Counter(next(iter(r)) for r in replicas_of.values())
    assert set(owners) == set(REPLICAS)
    # Shards spread evenly (4 of 12 each), and so the checks (about 80 each).
    assert trio.shares() == {"r0": 4, "r1": 4, "r2": 4}
    assert all(50 <= n <= 110 for n in owners.values()), owners
    # Any replica serves every check, with the owner that produced its last result.
    rows = trio.daemons["r1"].get_json("/status")
    assert rows["replica"] == "r1"
    by_name = {row["check"]: row for row in rows["checks"]}
    assert set(by_name) == set(trio.names)
    for name, replicas in replicas_of.items():
        assert by_name[name]["owner"] == next(iter(replicas))
    # /metrics of a replica exports the checks it owns, and only those.
    for replica in REPLICAS:
        text = trio.daemons[replica].get("/metrics")[1]
        exported = set(re.findall(r'^alivemcp_check_up\{check="([^"]+)"', text, re.M))
        assert exported == {n for n, r in replicas_of.items() if replica in r}
    print(
        f"\nsteady state: {len(records)} results over {until - since:.1f}s, every check once "
        f"per interval; checks per replica {dict(owners)}"
    )


def test_cluster_alert_rules_query_metrics_a_replica_exports(trio: Trio) -> None:
    rules = yaml.safe_load((REPO / "deploy/prometheus/alivemcp-rules.yaml").read_text())
    [group] = [g for g in rules["groups"] if g["name"] == "alivemcp-cluster"]
    used = set().union(*(promql_metric_names(rule["expr"]) for rule in group["rules"]))
    exported = sample_names_from_exposition(trio.daemons["r0"].get("/metrics")[1])
    assert used and used <= exported, used - exported


async def test_a_killed_replicas_checks_resume_elsewhere_within_the_session_timeout(
    whole_and_one_prober: Trio,
) -> None:
    trio = whole_and_one_prober
    victim = trio.daemons["r2"]
    # Settled means the shards are held; run alone (first), this test could start before
    # r2's results had reached r0, and checks r0 did not yet see as r2's counted as others.
    wait_rows_fresh(trio, time.time())  # every row's owner up to date after the last rebalance
    held = trio.metric("r2", "alivemcp_cluster_shards_held")
    theirs = {
        row["check"]
        for row in trio.daemons["r0"].get_json("/status")["checks"]
        if row["owner"] == "r2"
    }
    assert len(theirs) > 20 and held == 4
    killed_at = time.time()
    victim.kill()
    try:
        trio.daemons["r0"].wait_for(
            lambda: probed_again(trio, killed_at + SESSION - 1),
            SESSION + 30,
            "every check probed after the kill",
        )
        runs = trio.runs(killed_at - 3 * INTERVAL)
        resumed = {name: next(t for t in runs[name] if t > killed_at) for name in theirs}
        before = {name: max(t for t in runs[name] if t <= killed_at) for name in theirs}
        gaps = sorted(resumed[n] - before[n] for n in theirs)
        after_kill = sorted(resumed[n] - killed_at for n in theirs)
        others = [n for n in trio.names if n not in theirs]
        worst = longest_gap(runs, others)
        print(
            f"\nkill -9 of r2 ({len(theirs)} checks): first run elsewhere "
            f"{after_kill[0]:.2f}s to {after_kill[-1]:.2f}s after the kill; gap between runs "
            f"up to {gaps[-1]:.2f}s (session timeout {SESSION:g}s + interval {INTERVAL:g}s = "
            f"{SESSION + INTERVAL:g}s); the survivors' own checks: longest gap {worst:.2f}s"
        )
        # The group notices after the session timeout; the others learn of the rebalance at
        # their next heartbeat; join, sync and the new owner's read of the alert state (0.55 s
        # measured) get 3 s on a loaded 2-core machine (a clean-clone suite there: 19.8 s,
        # 2.8 s past the session timeout and interval); the next grid point is at most an
        # interval later. A second session timeout's wait would be far past this.
        assert after_kill[-1] <= SESSION + HEARTBEAT + INTERVAL + 3.0
        # The others' checks went on meanwhile (a rebalance moves nothing of theirs off the
        # grid for more than the rebalance takes).
        assert worst <= INTERVAL + 3.0, worst
        assert sorted(trio.shares().values()) == [6, 6]
    finally:
        # Back with its id (a rebalance gives it 4 shards again), also when an assertion
        # failed: the later tests share the trio and need all three replicas.
        victim.start()


async def test_a_rolling_restart_keeps_every_check_probed(whole_and_one_prober: Trio) -> None:
    trio = whole_and_one_prober
    wait_rows_fresh(trio, time.time())  # every row's owner up to date after the last rebalance
    began = time.time()
    owners_before = owners(trio)
    longest_stop = 0.0
    for replica in REPLICAS:
        daemon = trio.daemons[replica]
        stopped = time.monotonic()
        assert daemon.stop() == 0
        daemon.start()
        longest_stop = max(longest_stop, time.monotonic() - stopped)
        daemon.wait_for(
            lambda r=replica: trio.metric(r, "alivemcp_cluster_shards_held") == 4,
            30,
            f"{replica} holding its shards again",
        )
    trio.wait_settled()
    runs = trio.runs(began - INTERVAL)
    worst = longest_gap(runs)
    wait_rows_fresh(trio, time.time())
    moved = sum(owners_before[n] != owner for n, owner in owners(trio).items())
    print(
        f"\nrolling restart: replicas down up to {longest_stop:.1f}s each; longest gap between "
        f"two runs of a check {worst:.2f}s; checks whose owner changed: {moved}"
    )
    # Static membership: a replica back within the session timeout resumes its own shards,
    # so a check waits for its replica's restart, never for a session timeout on top. The
    # rejoin (join, sync, the alert state's read) gets a heartbeat and 3 s on a loaded 2-core
    # machine (a clean-clone suite there: a 14.0 s gap after an 8.4 s restart); a session
    # timeout on top would be 15 s more.
    assert worst <= longest_stop + HEARTBEAT + 2 * INTERVAL + 3.0


async def test_reload_schedules_added_checks_on_their_owner_only(
    whole_and_one_prober: Trio,
) -> None:
    trio = whole_and_one_prober
    names = check_names(CHECKS + 30)[30:]  # 30 removed, 30 added
    trio.write_configs(names)
    for daemon in trio.daemons.values():
        daemon.signal(signal.SIGHUP)
    reloaded = time.time()
    added = names[-30:]
    trio.daemons["r0"].wait_for(
        lambda: all(trio.runs(reloaded)[n] for n in added), 30, "added checks probed"
    )
    for daemon in trio.daemons.values():  # a replica slow to apply it still runs removed ones
        daemon.wait_for(
            lambda d=daemon: (
                (d.metric("alivemcp_config_last_reload_success_timestamp_seconds") or 0)
                >= reloaded - 1
            ),
            30,
            "the reload applied",
        )
    since = time.time() + INTERVAL
    # Two grid points of every check in the topic: a check scheduled on two replicas, or a
    # removed one still scheduled, would have results there too by then.
    await wait_results_in_topic(trio, since, names, points=2)
    records = await read_results(trio, since)
    owners: dict[str, set[str]] = defaultdict(set)
    for record in records:
        owners[record["check"]].add(record["replica"])
    assert set(owners) == set(names)  # the removed checks are probed nowhere
    assert all(len(r) == 1 for r in owners.values())


async def test_one_broker_of_three_stopped_and_probing_goes_on(whole_and_one_prober: Trio) -> None:
    trio = whole_and_one_prober
    admin = AIOKafkaAdminClient(bootstrap_servers=trio.cluster.bootstrap)
    await admin.start()
    try:
        coordinator = await admin.find_coordinator(f"{trio.prefix}-group")
    finally:
        await admin.close()
    paused_at = time.time()
    with trio.cluster.paused(coordinator):  # the worst broker to lose: the group's coordinator
        # The replicas lose their lease while the coordinator moves (a replica cannot tell a
        # dead coordinator from a partition that hides a live one), then go on with two
        # brokers: every check probed again, its results in the topic (RF 3, min ISR 2).
        # why: not a wait for an event (a lease may run out, or the coordinator move first):
        # past a session timeout every lease has run out or been renewed by the new one.
        await asyncio.sleep(SESSION)
        after = time.time()
        trio.daemons["r0"].wait_for(
            lambda: probed_again(trio, after), 30, "every check probed with one broker stopped"
        )
        await wait_results_in_topic(trio, after, trio.names)
        records = await read_results(trio, after)
        assert {r["check"] for r in records} == set(trio.names)
        assert sorted(trio.shares().values()) == [4, 4, 4]
        worst = longest_gap(trio.runs(paused_at - INTERVAL))
    fenced = {r: trio.metric(r, "alivemcp_cluster_fenced_total") for r in REPLICAS}
    print(
        f"\ncoordinator broker {coordinator} stopped: longest gap between two runs of a check "
        f"{worst:.2f}s; fences {fenced}"
    )
    # The lease, the coordinator's move (the broker fenced after 3 s, requests to it timing
    # out after 3 s), the alert state read again (its own 3 s request timeout when a leader
    # moved), the next grid point, and 2 s for a loaded machine.
    assert worst <= LEASE + 3 * REQUEST_TIMEOUT + INTERVAL + 2.0


async def test_kafka_fully_down_stops_probing_and_recovery_resumes_it(
    whole_and_one_prober: Trio,
) -> None:
    trio = whole_and_one_prober
    fenced_before = {r: trio.metric(r, "alivemcp_cluster_fenced_total") for r in REPLICAS}
    with trio.cluster.all_paused():
        down_at = time.time()
        # Cut off from the coordinator, every replica fences itself within its lease: after
        # that (and a run already started), nothing is probed anywhere.
        trio.daemons["r0"].wait_for(
            lambda: all(
                trio.metric(r, "alivemcp_cluster_fenced_total") > fenced_before[r] for r in REPLICAS
            ),
            SESSION + 30,
            "every replica fenced",
        )
        quiet_from = down_at + LEASE + HEARTBEAT + INTERVAL
        # why: a negative check (nothing probed), anchored on the fences just seen: the quiet
        # looked at lasts a interval and a half from when the last fence was due.
        await asyncio.sleep(max(0.0, quiet_from + 1.5 * INTERVAL - time.time()))
        assert not any(trio.runs(quiet_from).values()), "probing went on without Kafka"
        for replica in REPLICAS:
            assert trio.metric(replica, "alivemcp_cluster_member") == 0.0
            assert trio.metric(replica, "alivemcp_cluster_fenced_total") == (
                fenced_before[replica] + 1
            )
            assert trio.metric(replica, "alivemcp_cluster_shards_held") == 0.0
        last_run = max(t for times in trio.runs(down_at).values() for t in times)
        up_at = time.time()
    trio.daemons["r0"].wait_for(
        lambda: probed_again(trio, up_at), 90, "every check probed after Kafka is back"
    )
    back = max(min(times) for times in trio.runs(up_at).values()) - up_at
    print(
        f"\nKafka down: last run {last_run - down_at:.2f}s after it went down "
        f"(lease {LEASE:g}s); every check probed again {back:.2f}s after it came back"
    )
    assert last_run - down_at <= LEASE + HEARTBEAT + INTERVAL
