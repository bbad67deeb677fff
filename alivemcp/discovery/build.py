"""From a source's candidates to checks: the template's rules, the private-address rule, and
names no hand-written check has.

The checks are made by :meth:`~alivemcp.config.templates.TemplatePlan.make_check` (the rules
a hand-written check is made by); a candidate it refuses is skipped as ``invalid_entry``. With
``allow_private_addresses: false`` a target whose host is, or resolves to, only non-public
addresses is skipped as ``private_address`` before it is ever run (the probe's own session
holds every later connection to the same rule, should the name move inward afterwards).

Tens of thousands of candidates are made into checks a slice at a time, with the event loop
let run in between: validating each one's params takes tens of microseconds.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from alivemcp.config import ResolvedCheck
from alivemcp.config.templates import TemplatePlan
from alivemcp.discovery.found import Candidate, Found
from alivemcp.plumbing.http import HttpClients

__all__ = ["ADDRESS_LOOKUPS", "Built", "CheckBuilder"]

#: Host lookups for the private-address rule in flight at once.
ADDRESS_LOOKUPS = 32
#: Time allowed for one such lookup.
ADDRESS_LOOKUP_SECONDS = 5.0
#: Checks made between two turns of the event loop.
_SLICE = 200


@dataclass(slots=True)
class Built:
    """A source's checks by name, and what was left out by reason (with examples)."""

    checks: dict[str, ResolvedCheck] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)


class CheckBuilder:
    """Makes one source's candidates into checks. ``taken``: names of the hand-written checks
    (a discovered check never replaces one); ``allow_private``: the source's
    ``allow_private_addresses``."""

    def __init__(
        self,
        plan: TemplatePlan,
        http: HttpClients,
        *,
        allow_private: bool,
        taken: Collection[str] = (),
    ) -> None:
        self.plan = plan
        self.http = http
        self.allow_private = allow_private
        self.taken = taken

    async def build(
        self, found: Found, previous: Mapping[str, ResolvedCheck] | None = None
    ) -> Built:
        """The checks of ``found``. A check equal to its ``previous`` self (:meth:`same_as`)
        is that very object: the engine tells it unchanged at a glance, and a refresh that
        changes nothing keeps what it holds."""
        previous = previous or {}
        refused = {} if self.allow_private else await self._refused_hosts(found.candidates)
        skips = Found(skipped=Counter(found.skipped), examples=found.examples)
        checks: dict[str, ResolvedCheck] = {}
        for index, candidate in enumerate(found.candidates):
            if index % _SLICE == _SLICE - 1:
                await asyncio.sleep(0)
            if candidate.name in self.taken or candidate.name in checks:
                skips.skip("duplicate_name", f"{candidate.name}: the name of another check")
                continue
            host = _host_key(candidate.target) if refused else None
            refusal = None if host is None else refused.get(host)
            if refusal is not None:
                skips.skip("private_address", f"{candidate.name}: {refusal}")
                continue
            errors: list[str] = []
            check = self.plan.make_check(
                candidate.name,
                candidate.target,
                match=candidate.match,
                origin=candidate.origin,
                identity=candidate.identity,
                labels=candidate.labels,
                extra_params=candidate.extra_params,
                errors=errors,
            )
            if check is None:
                skips.skip("invalid_entry", f"{candidate.name}: {'; '.join(errors[:3])}")
                continue
            before = previous.get(candidate.name)
            checks[candidate.name] = (
                before if before is not None and before.same_as(check) else check
            )
        return Built(checks, skips.skipped, skips.examples)

    async def _refused_hosts(self, candidates: list[Candidate]) -> Mapping[str, str]:
        """Host → why the private-address rule refuses it, for the hosts of ``candidates``
        (each host looked up once, :data:`ADDRESS_LOOKUPS` at a time)."""
        by_host: dict[str, str] = {}
        for candidate in candidates:
            key = _host_key(candidate.target)
            if key is not None:
                by_host.setdefault(key, candidate.target)
        gate = asyncio.Semaphore(ADDRESS_LOOKUPS)

        async def judge(url: str) -> str | None:
            async with gate:
                problem = await self.http.address_problem(url, timeout=ADDRESS_LOOKUP_SECONDS)
            return None if problem is None else str(problem)

        hosts = list(by_host)
        verdicts = await asyncio.gather(*(judge(by_host[host]) for host in hosts))
        return {host: why for host, why in zip(hosts, verdicts, strict=True) if why is not None}


def _host_key(target: str) -> str | None:
    """The host of a URL target (lower case), None for a target that is not a URL."""
    if "://" not in target:
        return None
    try:
        host = urlsplit(target).hostname
    except ValueError:
        return None
    return host or None
