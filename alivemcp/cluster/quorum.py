"""Several locations, one verdict: each location's latest result of a check is its vote, and the
check's verdict is the quorum of the fresh votes.

A vote is fresh while it is younger than ``cluster.freshness_intervals`` of the check's
intervals; a stale vote does not count, and the reason says so. With ``M`` locations (the
check's ``locations``, else every location known) and a quorum ``Q`` (the check's ``quorum``,
else a majority of ``M``):

- fewer fresh votes that decide (up, degraded or down: ``unknown`` means the prober could not
  decide) than ``Q``: **unknown**, never down (the monitor cannot tell);
- at least ``Q`` say down: **down**;
- at least ``Q`` say up and none says otherwise: **up**;
- anything else: **degraded** (a minority says down, or the locations disagree).

The check's status alert goes by the quorum too: a degraded verdict fires it only when at
least ``Q`` locations say degraded or down; a minority saying down is the lower-severity
``location_disagrees`` alert instead (and the status alert sees the check up, or unknown when
fewer than ``Q`` say up).

A check with a single location keeps that location's result as it is (status and reason; a
stale one becomes unknown), so a deployment with one location reads as before locations.

Locations known: this replica's, those the checks name, and those whose results were seen in
the last :data:`FORGET_SECONDS`. A known location with no fresh vote on any check is *silent*:
its replicas are dead or cut off from Kafka (``alivemcp_cluster_location_silent``; the rule
AlivemcpLocationSilent).

Pacing: a location's vote arrives once per interval, so a check of three locations gets a new
verdict three times an interval. Alerting counts consecutive results and history counts runs:
they are given a verdict when its status changes, or when the last one they were given is at
least :data:`PACE_SHARE` of an interval old (about one an interval, as from one location).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alivemcp.engine.results import CheckInfo, CheckResult, LocationVote
from alivemcp.probe import LabeledObservation, Status
from alivemcp.surface import Surface

__all__ = ["FORGET_SECONDS", "RESULT_FIELDS", "QuorumBoard", "Verdict", "new_result"]

#: A location not heard from for this long is no longer known (decommissioned).
FORGET_SECONDS = 86400.0
#: A verdict of the same status is passed on (alerting, history) at most once per this share of
#: the check's interval.
PACE_SHARE = 0.9
#: A vote's reason as quoted in the verdict's reason.
QUOTED_REASON_CHARS = 120
#: Used when a check's interval is not known (a result of a check this config lacks).
FALLBACK_INTERVAL = 60.0

_DECIDING = (Status.UP, Status.DEGRADED, Status.DOWN)


@dataclass(slots=True)
class _Ballot:
    """One check's votes and what was last made of them."""

    votes: dict[str, LocationVote]
    #: The latest verdict (one made when a vote expires is built on it): the latest result
    #: taken with the verdict's status, reason, times and votes (what is built on it is the
    #: rest, the same in both; the result itself is not kept).
    latest: CheckResult | None = None
    #: The earliest moment a fresh vote of it goes stale (inf: none fresh).
    expires_at: float = float("inf")
    status: Status | None = None  # of the latest verdict
    fed_at: float = 0.0  # when a verdict was last passed on
    fed_status: Status | None = None
    #: What the votes were judged to say (status, reason, dissent, alert status) and for which
    #: locations and quorum; None: judge them again (a vote came, went or changed status,
    #: reason or freshness). Most votes repeat the last one: the verdict's words are made once.
    judged: tuple[Status, str, tuple[str, ...], Status] | None = None
    judged_for: tuple[tuple[str, ...], int] | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check's verdict now, and whether to pass it on to alerting and history."""

    result: CheckResult
    #: Its status differs from the previous verdict's.
    changed: bool
    #: Alerting and history take it (a change, or the first one of about an interval).
    paced: bool
    #: Locations saying down, when fewer than the quorum do (a ``location_disagrees``).
    dissent: tuple[str, ...] = ()
    #: The status the check's status alert goes by: a minority of locations saying down (or
    #: degraded) is not a failure of the check for it (the verdict shows it; the
    #: ``location_disagrees`` alert tells of it), unless a quorum says degraded or worse.
    alert_status: Status | None = None


class QuorumBoard:
    """Every check's votes, by location; every replica keeps the whole board."""

    def __init__(
        self,
        location: str,
        freshness_intervals: float = 2.0,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.location = location
        self.freshness = freshness_intervals
        self._clock = clock
        self._ballots: dict[str, _Ballot] = {}
        #: Location → the latest moment one of its votes stays fresh.
        self._fresh_until: dict[str, float] = {}
        #: Location → when a result of it was last seen (unix time).
        self._seen: dict[str, float] = {}
        #: Locations the checks name (set by the config).
        self._named: frozenset[str] = frozenset()
        self._born = clock()
        self._known: tuple[str, ...] = (location,)

    # -- what is known ------------------------------------------------------------------------

    def name_locations(self, named: Iterable[str]) -> None:
        """The locations the config's checks name: known (and silent until heard) even
        before any of their results is seen."""
        self._named = frozenset(named)
        self._refresh_known()

    def known(self) -> tuple[str, ...]:
        """Every location known, sorted."""
        return self._known

    def _refresh_known(self) -> None:
        horizon = self._clock() - FORGET_SECONDS
        for gone in [loc for loc, at in self._seen.items() if at < horizon]:
            del self._seen[gone]
            self._fresh_until.pop(gone, None)
        self._known = tuple(sorted({self.location, *self._named, *self._seen}))

    def silent(self, now: float | None = None) -> dict[str, bool]:
        """Known location → whether it is silent (no fresh vote on any check). This replica's
        own location is never silent to itself; one named but never heard from is silent once
        this board has been up for a freshness window of a minute's interval."""
        now = self._clock() if now is None else now
        out = {}
        for location in self._known:
            until = self._fresh_until.get(location)
            if location == self.location:
                out[location] = False
            elif until is None:
                out[location] = now - self._born > self.freshness * FALLBACK_INTERVAL
            else:
                out[location] = now > until
        return out

    def last_seen(self) -> Mapping[str, float]:
        return self._seen

    def locations_of(self, info: CheckInfo) -> tuple[str, ...]:
        return info.locations or self._known

    def quorum_of(self, info: CheckInfo, locations: tuple[str, ...]) -> int:
        return info.quorum or len(locations) // 2 + 1

    # -- votes --------------------------------------------------------------------------------

    def vote(self, result: CheckResult, location: str) -> Verdict | None:
        """``location``'s latest result of its check; the check's verdict now. None: an older
        result than the location's vote already counted (a replay, a handover's echo)."""
        name = result.check.name
        ballot = self._ballots.get(name)
        if ballot is None:
            ballot = self._ballots[name] = _Ballot({})
        previous = ballot.votes.get(location)
        if previous is not None and result.started_at < previous.started_at:
            return None
        interval = result.check.interval or FALLBACK_INTERVAL
        window = self.freshness * interval
        status, reason = result.status, result.reason
        if (
            previous is None
            or previous.status is not status
            or not previous.fresh
            or previous.reason != reason
        ):
            ballot.judged = None
        ballot.votes[location] = LocationVote(
            status,
            reason,
            result.started_at,
            result.finished_at,
            result.replica,
            True,
        )
        until = result.finished_at + window
        if until > self._fresh_until.get(location, 0.0):
            self._fresh_until[location] = until
        if result.finished_at > self._seen.get(location, 0.0):
            if location not in self._seen:
                self._seen[location] = result.finished_at
                self._refresh_known()
            self._seen[location] = result.finished_at
        return self._decide(result, ballot, self._clock())

    def expired(self, now: float | None = None) -> Iterable[Verdict]:
        """Verdicts of the checks one of whose votes went stale since they were decided (a
        location went quiet); called every few seconds."""
        now = self._clock() if now is None else now
        for ballot in list(self._ballots.values()):
            if ballot.expires_at <= now:
                verdict = self._redecide(ballot, now)
                if verdict is not None:
                    yield verdict

    def _redecide(self, ballot: _Ballot, now: float) -> Verdict | None:
        if ballot.latest is None:
            return None
        verdict = self._decide(ballot.latest, ballot, now)
        return verdict if verdict.changed else None

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the ballots of checks no longer configured."""
        for name in [n for n in self._ballots if not keep(n)]:
            del self._ballots[name]

    def votes(self, name: str) -> Mapping[str, LocationVote]:
        ballot = self._ballots.get(name)
        return ballot.votes if ballot is not None else {}

    # -- deciding -----------------------------------------------------------------------------

    def _decide(self, latest: CheckResult, ballot: _Ballot, now: float) -> Verdict:
        info = latest.check
        interval = info.interval or FALLBACK_INTERVAL
        window = self.freshness * interval
        locations = self.locations_of(info)
        quorum = self.quorum_of(info, locations)
        every = ballot.votes
        votes: dict[str, LocationVote] = {}
        expires = float("inf")
        started = finished = float("-inf")
        for location in locations:
            vote = every.get(location)
            if vote is None:
                continue
            ends = vote.finished_at + window
            is_fresh = now <= ends
            if vote.fresh is not is_fresh:
                vote = every[location] = dataclasses.replace(vote, fresh=is_fresh)
                ballot.judged = None
            votes[location] = vote
            if is_fresh and ends < expires:
                expires = ends
            if vote.started_at > started:
                started = vote.started_at
            if vote.finished_at > finished:
                finished = vote.finished_at
        # The verdict's times are over every vote, stale ones and those of locations the check
        # no longer has too: they never go back (the status store keeps a result of another
        # replica only when it is not older than the one it shows).
        if len(votes) != len(every):
            for vote in every.values():
                if vote.started_at > started:
                    started = vote.started_at
                if vote.finished_at > finished:
                    finished = vote.finished_at
        ballot.expires_at = expires
        judged = ballot.judged
        judged_for = (locations, quorum)
        # What is judged depends on the fresh votes' locations, statuses and reasons, the stale
        # ones and the quorum, nothing else: kept while none of them changes.
        if judged is None or ballot.judged_for != judged_for:
            fresh = [(location, vote) for location, vote in votes.items() if vote.fresh]
            stale = [loc for loc in locations if loc not in votes or not votes[loc].fresh]
            status, reason, dissent = _judge(latest, locations, quorum, fresh, stale)
            alert_status = status
            if status is Status.DEGRADED:
                failing = sum(1 for _, v in fresh if v.status in (Status.DEGRADED, Status.DOWN))
                ups = sum(1 for _, v in fresh if v.status is Status.UP)
                if failing < quorum:
                    alert_status = Status.UP if ups >= quorum else Status.UNKNOWN
            judged = ballot.judged = (status, reason, dissent, alert_status)
            ballot.judged_for = judged_for
        status, reason, dissent, alert_status = judged
        result = ballot.latest = _verdict_result(latest, status, reason, started, finished, votes)
        changed = status is not ballot.status
        ballot.status = status
        paced = (
            changed
            or status is not ballot.fed_status
            or now - ballot.fed_at >= (PACE_SHARE * interval)
        )
        if paced:
            ballot.fed_at = now
            ballot.fed_status = status
        return Verdict(result, changed, paced, dissent, alert_status)


#: CheckResult's fields in order (a test holds it to ``dataclasses.fields(CheckResult)``).
RESULT_FIELDS = (
    "check",
    "status",
    "reason",
    "duration_seconds",
    "started_at",
    "finished_at",
    "observations",
    "labeled_observations",
    "details",
    "lateness_seconds",
    "replica",
    "surface",
    "location",
    "locations",
)
# A frozen dataclass's __init__ sets each field through object.__setattr__; with 14 fields that
# is most of what a result costs to make, and the view and the board make two for every record
# of every location. The slots' own descriptors set them at less than half the cost.
_new = object.__new__
(
    _set_check,
    _set_status,
    _set_reason,
    _set_duration,
    _set_started,
    _set_finished,
    _set_observations,
    _set_labeled,
    _set_details,
    _set_lateness,
    _set_replica,
    _set_surface,
    _set_location,
    _set_locations,
) = (getattr(CheckResult, name).__set__ for name in RESULT_FIELDS)


def new_result(
    check: CheckInfo,
    status: Status,
    reason: str,
    duration_seconds: float,
    started_at: float,
    finished_at: float,
    observations: Mapping[str, float],
    labeled_observations: Sequence[LabeledObservation],
    details: Mapping[str, Any] | None,
    lateness_seconds: float,
    replica: str,
    surface: Surface | None,
    location: str,
    locations: Mapping[str, LocationVote] | None,
) -> CheckResult:
    """``CheckResult(...)`` with every field given, in order, made faster (see above)."""
    result: CheckResult = _new(CheckResult)
    _set_check(result, check)
    _set_status(result, status)
    _set_reason(result, reason)
    _set_duration(result, duration_seconds)
    _set_started(result, started_at)
    _set_finished(result, finished_at)
    _set_observations(result, observations)
    _set_labeled(result, labeled_observations)
    _set_details(result, details)
    _set_lateness(result, lateness_seconds)
    _set_replica(result, replica)
    _set_surface(result, surface)
    _set_location(result, location)
    _set_locations(result, locations)
    return result


def _verdict_result(
    latest: CheckResult,
    status: Status,
    reason: str,
    started: float,
    finished: float,
    votes: Mapping[str, LocationVote],
) -> CheckResult:
    """``dataclasses.replace(latest, ...)`` with the verdict's status, reason, times and votes,
    and no surface, at a fifth of its cost (it runs for every vote)."""
    return new_result(
        latest.check,
        status,
        reason,
        latest.duration_seconds,
        started,
        finished,
        latest.observations,
        latest.labeled_observations,
        latest.details,
        latest.lateness_seconds,
        latest.replica,
        None,
        latest.location,
        votes,
    )


def _judge(
    latest: CheckResult,
    locations: tuple[str, ...],
    quorum: int,
    fresh: list[tuple[str, LocationVote]],
    stale: list[str],
) -> tuple[Status, str, tuple[str, ...]]:
    """(status, reason, locations dissenting below the quorum)."""
    if len(locations) == 1:
        if fresh:
            _, vote = fresh[0]
            return vote.status, vote.reason, ()
        return Status.UNKNOWN, f"no fresh result from {locations[0]} (location silent)", ()
    total = len(locations)
    downs = [(loc, v) for loc, v in fresh if v.status is Status.DOWN]
    ups = [(loc, v) for loc, v in fresh if v.status is Status.UP]
    deciding = [(loc, v) for loc, v in fresh if v.status in _DECIDING]
    rest = _others(fresh, stale, exclude={loc for loc, _ in downs})
    if len(downs) >= quorum:
        return (
            Status.DOWN,
            f"down from {len(downs)} of {total} locations: {_quoted(downs)}{rest}",
            (),
        )
    if len(deciding) < quorum:
        said = _quoted(fresh) if fresh else "none"
        return (
            Status.UNKNOWN,
            f"only {len(deciding)} of {total} locations decide (quorum {quorum}): "
            f"{said}{_stale_part(stale)}",
            (),
        )
    if downs:
        return (
            Status.DEGRADED,
            f"down from {len(downs)} of {total} locations (quorum {quorum}): "
            f"{_quoted(downs)}{rest}",
            tuple(loc for loc, _ in downs),
        )
    if len(ups) >= quorum and len(ups) == len(deciding):
        return Status.UP, f"up from {len(ups)} of {total} locations{_stale_part(stale)}", ()
    return (
        Status.DEGRADED,
        f"locations disagree (quorum {quorum}): {_quoted(fresh)}{_stale_part(stale)}",
        (),
    )


def _quote(location: str, vote: LocationVote, *, with_status: bool) -> str:
    reason = vote.reason
    if len(reason) > QUOTED_REASON_CHARS:
        reason = reason[: QUOTED_REASON_CHARS - 1] + "…"
    head = f"{location} {vote.status.value}" if with_status else location
    return f"{head} ({reason})" if reason and vote.status is not Status.UP else head


def _quoted(votes: list[tuple[str, LocationVote]]) -> str:
    same = len({v.status for _, v in votes}) == 1 and votes and votes[0][1].status is Status.DOWN
    return ", ".join(_quote(loc, v, with_status=not same) for loc, v in votes)


def _others(fresh: list[tuple[str, LocationVote]], stale: list[str], *, exclude: set[str]) -> str:
    by_status: dict[str, list[str]] = {}
    for location, vote in fresh:
        if location not in exclude:
            by_status.setdefault(vote.status.value, []).append(location)
    parts = [f"{', '.join(locs)} {status}" for status, locs in by_status.items()]
    if stale:
        parts.append(f"{', '.join(stale)} stale")
    return f"; {'; '.join(parts)}" if parts else ""


def _stale_part(stale: list[str]) -> str:
    return f"; {', '.join(stale)} stale" if stale else ""
