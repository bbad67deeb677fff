"""The configured checks as alerting sees them: policy, receivers, and who depends on whom.

Built once per config (start and reloads) so that a result's decision looks things up
instead of matching routes and merging policy overrides on every run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import structlog

from alivemcp.alerting.config import AlertingConfig, AlertPolicy, AlertPolicyOverride
from alivemcp.alerting.routing import Router
from alivemcp.engine.results import CheckInfo

__all__ = ["AlertedCheck", "CheckCatalog"]

log = structlog.get_logger("alivemcp.alerting")


@dataclass(slots=True)
class AlertedCheck:
    info: CheckInfo
    policy: AlertPolicy
    enabled: bool
    receivers: tuple[str, ...]  # target and flapping alerts
    owners: tuple[str, ...]  # probe-broken alerts

    @property
    def match_labels(self) -> dict[str, str]:
        """The labels plus ``check`` and ``probe``, for matchers. Made when asked (a decision
        held by a maintenance calendar), not kept: kept, that was a dict per check (about
        200 bytes, made again by every reload)."""
        return match_labels(self.info)

    @classmethod
    def removed(cls, info: CheckInfo, config: AlertingConfig, router: Router) -> AlertedCheck:
        """A check no longer configured (or with alerting disabled), as far as closing its
        open incidents goes: the default policy and routes."""
        return cls(
            info=info,
            policy=config.policy,
            enabled=True,
            receivers=router.receivers_for(match_labels(info)),
            owners=router.owners,
        )


class CheckCatalog:
    """``checks`` by name, and ``dependants``: the checks that name a check in ``depends_on``
    (their pages wait while it fails)."""

    def __init__(self) -> None:
        self.checks: dict[str, AlertedCheck] = {}
        self.dependants: dict[str, tuple[str, ...]] = {}
        self._config: AlertingConfig | None = None  # what the entries were made with

    def load(
        self,
        config: AlertingConfig,
        router: Router,
        checks: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
    ) -> dict[str, AlertedCheck]:
        """Replace the catalog with ``checks``; returns the previous one."""
        previous = self.checks
        for _ in self.loading(config, router, checks):
            pass
        return previous

    def loading(
        self,
        config: AlertingConfig,
        router: Router,
        checks: Iterable[tuple[CheckInfo, AlertPolicyOverride | None]],
    ) -> Iterator[None]:
        """:meth:`load` a check at a time, yielding after each: the caller may let other work
        run in between (at 100,000 checks the whole took a quarter of a second). The catalog
        changes only after the last check, all at once.

        A check given with the very info its entry was made with (a reload keeps the info of
        a check that did not change, and its override with it) keeps its entry if the
        alerting config is the same too, so a reload that changes a few of 100,000 checks
        makes a few entries, not 100,000."""
        entries: dict[str, AlertedCheck] = {}
        dependants: dict[str, list[str]] = {}
        previous = self.checks if self._config is not None and self._config == config else {}
        # The configured receivers by name: one set, not a search of the list per check.
        known = {r.name for r in config.receivers}
        for info, override in checks:
            kept = previous.get(info.name)
            entry = entries[info.name] = (
                kept
                if kept is not None and kept.info is info
                else _entry(info, override, config, router)
            )
            for dep in info.depends_on:
                dependants.setdefault(dep, []).append(info.name)
            # Checked here, a check at a time (after the loop, in one go over 100,000 entries,
            # it held the loop for tens of milliseconds).
            unknown = [r for r in entry.receivers if r not in known]
            if unknown:
                log.warning(
                    "check routes to receivers that are not configured",
                    check=info.name,
                    receivers=unknown,
                )
            yield
        self.checks = entries
        self._config = config
        self.dependants = {k: tuple(v) for k, v in dependants.items()}

    def change(
        self,
        router: Router,
        added: Sequence[tuple[CheckInfo, AlertPolicyOverride | None]],
        removed: Sequence[str],
    ) -> None:
        """Add or replace some entries and drop others under the current config, leaving the
        rest alone. The catalog is replaced whole (copied, then changed), as :meth:`loading`
        does, so a reader never sees it half-changed."""
        if self._config is None:
            raise RuntimeError("change() before the catalog was loaded")
        entries = dict(self.checks)
        dependants = {k: list(v) for k, v in self.dependants.items()}
        for name in (*removed, *(info.name for info, _ in added)):
            gone = entries.pop(name, None)
            if gone is not None:
                for dep in gone.info.depends_on:
                    names = dependants.get(dep)
                    if names is not None and name in names:
                        names.remove(name)
        for info, override in added:
            entries[info.name] = _entry(info, override, self._config, router)
            for dep in info.depends_on:
                dependants.setdefault(dep, []).append(info.name)
        self.checks = entries
        self.dependants = {k: tuple(v) for k, v in dependants.items() if v}

    def info_of(self, name: str, probe_type: str, labels: dict[str, str]) -> CheckInfo:
        """The check's info, or (a check no longer configured) one made of what was saved."""
        check = self.checks.get(name)
        if check is not None:
            return check.info
        return CheckInfo(name=name, probe_type=probe_type, labels=dict(labels))

    def why_not_alerting(self, name: str) -> str:
        """Why a check's incidents are closed: the reason its resolves carry."""
        if name in self.checks:
            return "alerting disabled for this check"
        return "check removed from the configuration"

    def alerting(self, name: str) -> bool:
        """Whether the check is configured with alerting enabled."""
        check = self.checks.get(name)
        return check is not None and check.enabled


def _entry(
    info: CheckInfo, override: AlertPolicyOverride | None, config: AlertingConfig, router: Router
) -> AlertedCheck:
    policy = override.apply_to(config.policy) if override else config.policy
    if override is not None and override.receivers is not None:
        receivers = tuple(override.receivers)
    else:
        receivers = router.receivers_for(match_labels(info))
    return AlertedCheck(
        info=info,
        policy=policy,
        enabled=override.enabled if override else True,
        receivers=receivers,
        owners=router.owners,
    )


def match_labels(info: CheckInfo) -> dict[str, str]:
    """What route and calendar matchers see of a check: its labels plus ``check`` and
    ``probe``."""
    return {**info.labels, "check": info.name, "probe": info.probe_type}
