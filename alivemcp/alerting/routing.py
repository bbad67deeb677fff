"""Routes: label matchers -> receivers, first match wins unless ``continue``; else default."""

from __future__ import annotations

from collections.abc import Mapping

from alivemcp.alerting.config import AlertingConfig
from alivemcp.alerting.matchers import Matcher, match_all, parse_matchers

__all__ = ["Router"]


class Router:
    def __init__(self, config: AlertingConfig) -> None:
        self._routes: list[tuple[tuple[Matcher, ...], tuple[str, ...], bool]] = [
            (parse_matchers(r.matchers), tuple(r.receivers), r.continue_matching)
            for r in config.routes
        ]
        self._default = tuple(config.default_receivers)
        owners = config.owner_receivers
        self._owners = tuple(owners) if owners is not None else self._default
        #: The labels the routes look at, and the answer for each combination of their values
        #: seen so far: a config load asks for every check (100,000 at a time), and checks
        #: mostly share the labels routes match on.
        self._keys = tuple(sorted({m.label for matchers, _, _ in self._routes for m in matchers}))
        self._memo: dict[tuple[str, ...], tuple[str, ...]] = {}

    def receivers_for(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        if not self._routes:
            return self._default
        # (A matcher reads an absent label as "", so that is its key too.)
        key = tuple([labels.get(k, "") for k in self._keys])
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = self._match(labels)
        return found

    def _match(self, labels: Mapping[str, str]) -> tuple[str, ...]:
        found: list[str] = []
        for matchers, receivers, keep_going in self._routes:
            if match_all(matchers, labels):
                found.extend(r for r in receivers if r not in found)
                if not keep_going:
                    break
        return tuple(found) if found else self._default

    @property
    def owners(self) -> tuple[str, ...]:
        return self._owners
