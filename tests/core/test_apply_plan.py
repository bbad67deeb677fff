"""ApplyPlan: what applying a config builds before anything running changes. A check equal to
a running one is that running object with its info (found by position, or by name when the
order changed); a probe instance is built only for a check this process schedules that is not
scheduled as it is now."""

from __future__ import annotations

from dataclasses import dataclass

from alivemcp.applyplan import ApplyPlan
from alivemcp.checks import check_info
from alivemcp.config import ResolvedCheck, load_config_text
from alivemcp.results import CheckInfo
from alivemcp.runner import ProbeHandle


@dataclass
class _Scheduled:
    fingerprint: bytes


def _checks(text: str) -> tuple[ResolvedCheck, ...]:
    return load_config_text(text).checks


RUNNING = _checks("""
checks:
  - {name: a, probe: test_static, interval: 30, params: {reason: one}}
  - {name: b, probe: test_static, interval: 30, params: {reason: one}}
  - {name: c, probe: test_static, interval: 30, params: {reason: one}}
""")


async def test_kept_checks_are_the_running_objects_and_only_the_others_are_built() -> None:
    infos = [check_info(c) for c in RUNNING]
    scheduled = {c.name: _Scheduled(c.fingerprint()) for c in RUNNING}
    built: list[str] = []

    def build(check: ResolvedCheck, info: CheckInfo) -> ProbeHandle:
        built.append(check.name)
        assert info.name == check.name
        return object()  # type: ignore[return-value]

    # c first (order changed), b's params changed, a unchanged, d new; slices of 2.
    new = _checks("""
checks:
  - {name: c, probe: test_static, interval: 30, params: {reason: one}}
  - {name: b, probe: test_static, interval: 30, params: {reason: two}}
  - {name: a, probe: test_static, interval: 30, params: {reason: one}}
  - {name: d, probe: test_static, interval: 30}
""")
    plan = ApplyPlan(RUNNING, infos, scheduled, None, build, 2)  # type: ignore[arg-type]
    await plan.add(new[:1])
    await plan.add(new[1:])
    assert [c.name for c in plan.checks] == ["c", "b", "a", "d"]
    assert plan.checks[0] is RUNNING[2] and plan.infos[0] is infos[2]
    assert plan.checks[2] is RUNNING[0] and plan.infos[2] is infos[0]
    assert plan.checks[1] is new[1] and plan.infos[1] is not infos[1]
    assert built == ["b", "d"] and set(plan.fresh) == {"b", "d"}
    assert plan.fresh["b"][1] == new[1].fingerprint()


async def test_a_check_not_probed_here_or_already_scheduled_as_it_is_is_not_built() -> None:
    infos = [check_info(c) for c in RUNNING]
    # a is not scheduled (another replica's, or a shard gained later), b is scheduled with an
    # older fingerprint, c is scheduled as it is.
    scheduled = {"b": _Scheduled(b"old"), "c": _Scheduled(RUNNING[2].fingerprint())}
    built: list[str] = []

    def build(check: ResolvedCheck, info: CheckInfo) -> ProbeHandle:
        built.append(check.name)
        return object()  # type: ignore[return-value]

    plan = ApplyPlan(RUNNING, infos, scheduled, lambda name: name != "a",  # type: ignore[arg-type]
                     build, 1000)
    await plan.add(RUNNING)
    assert built == ["b"]
    assert all(p is r for p, r in zip(plan.checks, RUNNING, strict=True))
