"""``composite``: one verdict from other checks' latest results (e.g. "can we fail over now").

A DR region is ready only when its MCP endpoint answers *and* its data is replicated: a green
endpoint probe beside a red replication-lag probe means the DR server is up but would answer
from a stale bucket. A composite check names such checks as ``members`` and judges them by a
rule, so alerts, history and metrics can follow the one question that matters.

It never runs its members: it reads the latest result each member's own schedule recorded
(``CheckContext.results``), so every member still runs exactly once per its interval. A member
that has not finished a run yet, or whose latest result is older than ``max_age`` (default: three
of its intervals), counts as ``unknown``: the composite cannot vouch for what it has not seen.
At start-up (and after a reload that rebuilt members) the first runs of a composite and its
members go off in the same start window, in no set order; so a run that finds a member without
any result yet waits briefly for one (:data:`FIRST_RESULT_WAIT`, within its own timeout) rather
than reporting ``unknown`` for what is only a matter of order.

Rules, over the members' statuses in the one severity order (up < unknown < degraded < down):

- ``worst`` (default): all up → up; any down → down; else the worst of them.
- ``any_up``: up when at least one member is up; else the best of them.
- ``quorum``: up when at least ``quorum`` members are up; else the ``quorum``-th best status.

All three are the same judgement: the k-th best member status, with k = every member, one, or
``quorum``. So a member that is ``unknown`` makes the verdict ``unknown`` only when the rule's
outcome hangs on it, and ``down`` members never hide behind ``unknown`` ones.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, model_validator

from alivemcp.probe import (
    SEVERITY,
    Duration,
    Observable,
    Probe,
    ProbeParams,
    ProbeResult,
    Status,
)

__all__ = ["CompositeParams", "CompositeProbe"]

#: A member's result counts as fresh for this many of its intervals when ``max_age`` is unset:
#: a steady run finishes within one interval plus its timeout (at most another interval), and a
#: check's first run after a reload may come up to one and a half intervals after the previous.
DEFAULT_MAX_AGE_INTERVALS = 3.0
#: Longest a run waits for members that have no result at all yet (a start-up race, not a
#: fault); at most this share of the composite's own timeout, so the run never times out on it
#: (a timeout would read as ``down``).
FIRST_RESULT_WAIT = 10.0
FIRST_RESULT_WAIT_SHARE = 0.5
FIRST_RESULT_POLL = 0.1
#: Members that are not up named in the reason before the rest are counted as "+N more".
MAX_LISTED = 5
#: Up members named by name in the reason; beyond this they are counted.
MAX_UP_LISTED = 3
#: A member's own reason is cut to this many characters inside the composite's reason.
MAX_MEMBER_REASON = 160


class CompositeParams(ProbeParams):
    members: list[str] = Field(
        min_length=1,
        description="Names of the checks to combine. The base name of a multi-target check "
        "stands for all of its targets (each counts as one member); a check's own name always "
        "wins over a base name. Members may be composites themselves, but not in a cycle.",
    )
    rule: Literal["worst", "any_up", "quorum"] = Field(
        "worst",
        description="worst: all up is up, any down is down, else the worst member status; "
        "any_up: up if at least one member is up, else the best member status; quorum: up if "
        "at least `quorum` members are up, else the quorum-th best member status.",
    )
    quorum: int | None = Field(
        None,
        ge=1,
        description="With rule quorum: how many members must be up (counting each target of a "
        "multi-target member).",
    )
    max_age: Duration | None = Field(
        None,
        description="A member whose latest result finished longer ago than this counts as "
        "unknown (no fresh result). Default: three times that member's interval.",
    )

    @model_validator(mode="after")
    def _rule_params(self) -> CompositeParams:
        if self.rule == "quorum" and self.quorum is None:
            raise ValueError("rule quorum needs quorum: how many members must be up")
        if self.rule != "quorum" and self.quorum is not None:
            raise ValueError(f"quorum is only used with rule quorum (rule is {self.rule})")
        repeated = sorted({m for m in self.members if self.members.count(m) > 1})
        if repeated:
            raise ValueError(f"members named more than once: {', '.join(repeated)}")
        return self

    def referenced_checks(self) -> list[tuple[str, str]]:
        """The checks this composite reads, for the config loader to resolve and validate."""
        return [(f"members[{i}]", name) for i, name in enumerate(self.members)]


@dataclass(frozen=True, slots=True)
class _Judged:
    """One member as the composite sees it now."""

    name: str
    status: Status
    reason: str
    age_seconds: float | None


class CompositeProbe(Probe[CompositeParams]):
    """Judges other checks' latest results by a rule; never runs them."""

    Params = CompositeParams
    summary = "one verdict from other checks' latest results (e.g. DR readiness)"
    observables = (
        Observable(
            "members",
            "Checks this composite combines (each target of a multi-target member counts).",
        ),
        Observable("members_up", "Members whose latest fresh result is up."),
    )

    async def probe(self) -> ProbeResult:
        names = self._member_checks()
        await self._wait_for_first_results(names)
        now = time.time()
        judged = [self._judge(name, now) for name in names]
        total = len(judged)
        up = sum(1 for m in judged if m.status is Status.UP)
        needed = self._needed(total)
        observations = {"members": float(total), "members_up": float(up)}
        details: dict[str, Any] = {
            "rule": self.params.rule,
            "needed_up": needed,
            "members": [
                {
                    "check": m.name,
                    "status": m.status.value,
                    "reason": m.reason,
                    "age_seconds": None if m.age_seconds is None else round(m.age_seconds, 3),
                }
                for m in judged
            ],
        }
        if needed > total:
            # Only reachable when targets were removed from a multi-target member since the
            # quorum was written: the rule cannot be judged, which is the config's fault.
            return ProbeResult.unknown(
                f"quorum {needed} cannot be met by {total} member(s)",
                observations=observations,
                details=details,
            )
        best_first = sorted((m.status for m in judged), key=SEVERITY.__getitem__)
        status = best_first[needed - 1]
        reason = _reason(judged)
        if self.params.rule != "worst":
            reason = f"{up} of {total} up (need {needed}): {reason}"
        return ProbeResult(status, reason, observations=observations, details=details)

    def _member_checks(self) -> list[str]:
        """Concrete member checks in config order, each once (a check named directly and also
        through its multi-target base name counts once)."""
        seen: dict[str, None] = {}
        for name in self.params.members:
            for check in self.context.results.checks_named(name) or (name,):
                seen.setdefault(check, None)
        return list(seen)

    async def _wait_for_first_results(self, names: list[str]) -> None:
        """Give members that have never finished a run a moment to finish their first."""
        budget = min(FIRST_RESULT_WAIT, FIRST_RESULT_WAIT_SHARE * self.context.timeout)
        deadline = time.monotonic() + budget
        results = self.context.results
        # Polled: results reach the store through the pipeline, which offers no event to
        # await, and the wait happens only while members have never reported.
        while (left := deadline - time.monotonic()) > 0:
            if all(results.latest(n) is not None for n in names):
                return
            await asyncio.sleep(min(FIRST_RESULT_POLL, left))

    def _needed(self, total: int) -> int:
        """How many members must be up for the composite to be up."""
        if self.params.rule == "any_up":
            return 1
        if self.params.rule == "quorum":
            assert self.params.quorum is not None  # the params validator guarantees it
            return self.params.quorum
        return total

    def _judge(self, name: str, now: float) -> _Judged:
        latest = self.context.results.latest(name)
        if latest is None:
            return _Judged(name, Status.UNKNOWN, "no result yet", None)
        age = latest.age(now)
        limit = self.params.max_age or DEFAULT_MAX_AGE_INTERVALS * latest.interval
        if age > limit:
            return _Judged(
                name,
                Status.UNKNOWN,
                f"no fresh result: last one {age:.0f}s old, max_age {limit:g}s",
                age,
            )
        return _Judged(name, latest.status, latest.reason, age)


def _reason(judged: list[_Judged]) -> str:
    """Members that are not up first, worst first, each with its status and reason; then the
    up ones by name (or counted, when there are many)."""
    bad = sorted(
        (m for m in judged if m.status is not Status.UP), key=lambda m: -SEVERITY[m.status]
    )
    parts = [f"{m.name} {m.status.value} ({_cut(m.reason)})" for m in bad[:MAX_LISTED]]
    if len(bad) > MAX_LISTED:
        parts.append(f"+{len(bad) - MAX_LISTED} more not up")
    ups = [m.name for m in judged if m.status is Status.UP]
    if len(ups) <= MAX_UP_LISTED:
        parts.extend(f"{name} up" for name in ups)
    else:
        parts.append(f"{len(ups)} {'others' if bad else 'members'} up")
    return "; ".join(parts)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MEMBER_REASON else text[: MAX_MEMBER_REASON - 1] + "…"
