"""The quiet-check shortcut of alerting decisions (an ``up`` result for a check that was up with
nothing open) decides exactly what the full path decides.

Each scenario runs twice on the same fake clock: once as is, once with the shortcut turned off
(``CheckState.steadily_up`` always False, so every result takes apply_result and
update_flapping). After every step the two must agree on every check's alert state, on what
the ledger marks as changed and as needing attention, and on every notification sent.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from alivemcp.alerting.catalog import CheckCatalog
from alivemcp.alerting.config import AlertingConfig, AlertPolicyOverride
from alivemcp.alerting.decisions import Decider
from alivemcp.alerting.ledger import AlertLedger
from alivemcp.alerting.metrics import AlertingMetrics
from alivemcp.alerting.model import Notification
from alivemcp.alerting.policy import CheckState
from alivemcp.alerting.routing import Router
from alivemcp.engine.results import CheckInfo, CheckResult
from alivemcp.probe import Status

Step = tuple[str, str, str] | tuple[str, float]  # ("run", check, status) or ("tick", seconds)


class Engine:
    """A Decider with its parts, a fake clock, and a record of everything it sent."""

    def __init__(
        self, config: dict[str, Any], checks: Sequence[tuple[CheckInfo, dict[str, Any] | None]]
    ) -> None:
        self.now = 1_000_000.0
        self.sent: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.catalog = CheckCatalog()
        self.ledger = AlertLedger(AlertingMetrics(CollectorRegistry()))
        self.infos = {info.name: info for info, _ in checks}
        alerting = AlertingConfig.model_validate(config)
        router = Router(alerting)
        self.catalog.load(alerting, router, self._overrides(checks))
        self.decider = Decider(
            alerting,
            router,
            self.catalog,
            self.ledger,
            self._dispatch,
            clock=lambda: self.now,
            owns=lambda _: True,
            status_of=None,
        )

    @staticmethod
    def _overrides(
        checks: Sequence[tuple[CheckInfo, dict[str, Any] | None]],
    ) -> list[tuple[CheckInfo, AlertPolicyOverride | None]]:
        return [
            (info, None if alert is None else AlertPolicyOverride.model_validate(alert))
            for info, alert in checks
        ]

    def _dispatch(self, receivers: Sequence[str], notification: Notification) -> None:
        self.sent.append(
            (
                tuple(receivers),
                {
                    "id": notification.id,
                    "check": notification.check,
                    "kind": notification.kind,
                    "event": notification.event,
                    "severity": notification.severity,
                    "status": notification.status,
                    "reason": notification.reason,
                    "since": notification.since,
                    "created_at": notification.created_at,
                    "observations": notification.observations,
                },
            )
        )

    def reconfigure(
        self, config: dict[str, Any], checks: Sequence[tuple[CheckInfo, dict[str, Any] | None]]
    ) -> None:
        alerting = AlertingConfig.model_validate(config)
        router = Router(alerting)
        self.decider.configure(alerting, router)
        previous = self.catalog.load(alerting, router, self._overrides(checks))
        self.decider.apply_config(previous)

    def step(self, step: Step) -> None:
        if step[0] == "tick":
            self.now += float(step[1])
            self.decider.tick()
            return
        name, status = str(step[1]), str(step[-1])
        self.now += 1.0
        info = self.infos[name]
        self.decider.observe(
            CheckResult(
                check=info,
                status=Status(status),
                reason=f"{name} is {status} at {self.now}",
                duration_seconds=0.01,
                started_at=self.now,
                finished_at=self.now,
                observations={"latency_seconds": self.now % 7},
            )
        )

    def snapshot(self) -> dict[str, Any]:
        states = {
            name: (
                state.to_json(),
                dict(state.observations),
                {kind: repr(alert) for kind, alert in state.alerts.items()},
            )
            for name, state in self.ledger.states.items()
        }
        return {
            "states": states,
            "changed": sorted(self.ledger.changed),
            "attention": sorted(self.ledger.attention),
            "sent": list(self.sent),
            "firing": self.ledger.firing_alerts(),
            "generation": self.ledger.generation,
        }


@contextmanager
def shortcut_off() -> Iterator[None]:
    real = CheckState.steadily_up
    CheckState.steadily_up = lambda self: False  # type: ignore[method-assign]
    try:
        yield
    finally:
        CheckState.steadily_up = real  # type: ignore[method-assign]


def trace(
    make: Callable[[], Engine], steps: Sequence[Step | Callable[[Engine], None]]
) -> list[dict[str, Any]]:
    engine = make()
    out = []
    for step in steps:
        if callable(step):
            step(engine)
        else:
            engine.step(step)
        out.append(engine.snapshot())
    return out


def assert_same(
    make: Callable[[], Engine], steps: Sequence[Step | Callable[[Engine], None]]
) -> list[dict[str, Any]]:
    fast = trace(make, steps)
    with shortcut_off():
        full = trace(make, steps)
    for index, (a, b) in enumerate(zip(fast, full, strict=True)):
        assert a == b, f"step {index} ({steps[index]!r}) differs"
    return fast


POLICY = {
    "failures_to_fire": 2,
    "successes_to_resolve": 2,
    "repeat_interval": 30,
    "max_reminders": 3,
    "flap_window": 120,
    "flap_threshold": 4,
}
CONFIG = {
    "receivers": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/"}],
    "default_receivers": ["hook"],
    "policy": POLICY,
}


def infos() -> list[tuple[CheckInfo, dict[str, Any] | None]]:
    db = CheckInfo(name="db", probe_type="test_file", labels={"team": "data"})
    api = CheckInfo(
        name="api", probe_type="test_file", labels={"severity": "warning"}, depends_on=("db",)
    )
    web = CheckInfo(name="web", probe_type="test_file", labels={})
    return [(db, None), (api, {"failures_to_fire": 1}), (web, {"flap_threshold": 0})]


def test_a_check_that_goes_down_after_many_quiet_runs_still_pages() -> None:
    steps: list[Step] = [*[("run", "db", "up")] * 50, *[("run", "db", "down")] * 2]
    snapshots = assert_same(lambda: Engine(CONFIG, infos()), steps)
    sent = snapshots[-1]["sent"]
    assert [n["event"] for _, n in sent] == ["firing"]
    assert sent[0][1]["check"] == "db"
    # The shortcut was taken: nothing was marked changed by the quiet runs.
    assert snapshots[49]["changed"] == []


def test_reminders_resolves_and_flapping_are_unchanged() -> None:
    steps: list[Step] = [
        *[("run", "db", "up")] * 5,
        *[("run", "db", "down")] * 3,
        ("tick", 31.0),
        ("tick", 31.0),
        ("tick", 31.0),
        ("tick", 31.0),
        ("tick", 31.0),
        *[("run", "db", "up")] * 4,
        *[("run", "db", s) for s in ("down", "up") * 4],
        *[("run", "db", "up")] * 10,
        ("tick", 200.0),
        *[("run", "db", "up")] * 5,
    ]
    snapshots = assert_same(lambda: Engine(CONFIG, infos()), steps)
    events = [n["event"] for _, n in snapshots[-1]["sent"]]
    assert events.count("reminder") == 3
    assert "resolved" in events and "firing" in events


def test_a_reload_that_changes_policy_still_takes_effect() -> None:
    strict = {**CONFIG, "policy": {**POLICY, "failures_to_fire": 1}}

    def reload(engine: Engine) -> None:
        engine.reconfigure(strict, infos())

    steps: list[Step | Callable[[Engine], None]] = [
        *[("run", "db", "up")] * 20,
        reload,
        ("run", "db", "down"),
    ]
    snapshots = assert_same(lambda: Engine(CONFIG, infos()), steps)
    assert [n["event"] for _, n in snapshots[-1]["sent"]] == ["firing"]


def test_a_dependency_that_recovers_quietly_does_not_unhold_its_dependant_early() -> None:
    steps: list[Step] = [
        *[("run", name, "up") for name in ("db", "api")] * 3,
        ("run", "db", "down"),
        ("run", "db", "down"),
        ("run", "api", "down"),
        *[("run", "db", "up")] * 3,
        ("run", "api", "down"),
        *[("run", name, "up") for name in ("db", "api")] * 4,
    ]
    assert_same(lambda: Engine(CONFIG, infos()), steps)


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_decide_the_same(seed: int) -> None:
    rng = random.Random(seed)
    names = ["db", "api", "web"]
    statuses = ["up"] * 12 + ["down", "degraded", "unknown"]
    steps: list[Step] = []
    for _ in range(400):
        if rng.random() < 0.08:
            steps.append(("tick", rng.choice([0.5, 5.0, 31.0, 130.0])))
        else:
            steps.append(("run", rng.choice(names), rng.choice(statuses)))
    config = (
        {
            **CONFIG,
            "maintenance": [
                # The clock starts at 1,000,000 s: this window opens after 200 s, for 10 minutes.
                {
                    "name": "m",
                    "matchers": ['team="data"'],
                    "start": "1970-01-12T13:50:00Z",
                    "end": "1970-01-12T14:00:00Z",
                }
            ],
        }
        if seed % 3 == 0
        else CONFIG
    )
    assert_same(lambda: Engine(config, infos()), steps)
