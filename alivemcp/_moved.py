"""The import paths of modules that moved into the role packages (0.2), kept working for code
written against 0.1: ``import alivemcp.daemon`` gives the module ``alivemcp.app.daemon``, the
same object under both names (so patching one patches the other), with a
``DeprecationWarning`` naming the new path. To be removed in a later minor version.

A finder on ``sys.meta_path`` that answers only for the names below; everything else goes to
the ordinary finders.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

#: Old module path -> where it lives now.
MOVED: dict[str, str] = {
    f"alivemcp.{old}": f"alivemcp.{new}"
    for old, new in {
        "redact": "hygiene.redact",
        "untrusted": "hygiene.untrusted",
        "logging": "hygiene.logging",
        "heap": "hygiene.heap",
        "yamlfile": "config.yamlfile",
        "schema": "config.schema",
        "secrets": "config.secrets",
        "registry": "config.registry",
        "results": "engine.results",
        "runner": "engine.runner",
        "status": "engine.status",
        "checks": "engine.checks",
        "pipeline": "engine.pipeline",
        "scheduler": "engine.scheduler",
        "server": "web.server",
        "api": "web.api",
        "badges": "web.badges",
        "statuspage": "web.statuspage",
        "metrics": "web.metrics",
        "daemon": "app.daemon",
        "configload": "app.configload",
        "datadir": "app.datadir",
        "lifecycle": "app.lifecycle",
        "listen": "app.listen",
        "report": "cli.report",
        "demo": "cli.demo",
        "scaffold": "cli.scaffold",
    }.items()
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=3
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        # The module ran under its new name already; the import system has put it in
        # sys.modules under the old name too. Keep the new name its own.
        sys.modules.setdefault(module.__name__, module)


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
