"""``alivemcp tools``: a check's tool surface, read and approved from the command line.

``show`` prints the current surface (digest, approval, items by kind, findings, versions),
``diff`` what changed between two versions (by default from the approved one to the latest),
``approve`` makes a version (by default the latest) the approved baseline. The config file is
read only for ``data_dir`` and the check names; the surfaces are in ``data_dir/surfaces.sqlite``
(SQLite in WAL mode), so the commands work with or without a daemon running, and a running one
takes an approval within a second (it polls the approvals table).

Exit codes: 0 done, 1 no surface seen yet for the check, 2 a usage or config error, an unknown
check or an unknown digest. Everything a server wrote is printed inert (escapes for invisible
and bidirectional characters, lengths capped).
"""

from __future__ import annotations

import argparse
import difflib
import getpass
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from alivemcp.config import ConfigError, load_config
from alivemcp.hygiene.untrusted import inert_text

if TYPE_CHECKING:
    from alivemcp.toolsurface.store import SurfaceStore

__all__ = ["add_arguments", "approved_by", "main", "run_from_args"]

EXIT_OK, EXIT_NO_SURFACE, EXIT_USAGE = 0, 1, 2
_T = TypeVar("_T")
#: Items listed by ``show`` before the rest are counted.
SHOW_ITEMS = 200


class _Refused(Exception):
    """A command that cannot go on: the message and the exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The sub-commands of ``alivemcp tools``."""
    sub = parser.add_subparsers(title="sub-commands", metavar="SUB-COMMAND", dest="tools_command")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        one = sub.add_parser(name, help=help_text, description=help_text)
        one.add_argument("--config", "-c", required=True, type=Path, help="YAML config file")
        one.add_argument("check", metavar="CHECK", help="the check's name")
        one.add_argument("--json", action="store_true", help="one JSON document")
        return one

    command("show", "the current tool surface: digest, approval, items, findings, versions")
    diff = command("diff", "what changed between two surfaces (default: approved → latest)")
    diff.add_argument(
        "--from",
        dest="from_digest",
        metavar="HASH",
        help="the older surface (digest or a unique prefix; default the approved one)",
    )
    diff.add_argument(
        "--to",
        dest="to_digest",
        metavar="HASH",
        help="the newer surface (digest or a unique prefix; default the latest)",
    )
    approve = command("approve", "approve a surface (default the latest) as the baseline")
    approve.add_argument(
        "--surface",
        metavar="HASH",
        help="the surface to approve (digest or a unique prefix; default the latest)",
    )
    parser.set_defaults(tools_usage=parser.format_usage)


def run_from_args(args: argparse.Namespace) -> int:
    if not getattr(args, "tools_command", None):
        print(args.tools_usage().rstrip(), file=sys.stderr)
        print("alivemcp tools: give a sub-command: show, diff or approve", file=sys.stderr)
        return EXIT_USAGE
    return main(
        args.tools_command,
        args.config,
        args.check,
        as_json=args.json,
        from_digest=getattr(args, "from_digest", None),
        to_digest=getattr(args, "to_digest", None),
        surface=getattr(args, "surface", None),
    )


def main(
    command: str,
    config_path: str | Path,
    check: str,
    *,
    as_json: bool = False,
    from_digest: str | None = None,
    to_digest: str | None = None,
    surface: str | None = None,
) -> int:
    """Run one sub-command; print to standard output (errors to standard error)."""
    try:
        store = _open(Path(config_path), check)
        try:
            if command == "show":
                return _show(store, check, as_json)
            if command == "diff":
                return _diff(store, check, from_digest, to_digest, as_json)
            if command == "approve":
                return _approve(store, check, surface, as_json)
            raise _Refused(f"unknown sub-command {command!r}", EXIT_USAGE)
        finally:
            store.close()
    except _Refused as refused:
        print(f"alivemcp tools: {refused}", file=sys.stderr)
        return refused.code
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return EXIT_USAGE


def approved_by() -> str:
    """``cli:USER`` (``cli`` when the user cannot be named)."""
    try:
        user = getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry (a bare container)
        return "cli"
    return f"cli:{user}" if user else "cli"


# -- opening ------------------------------------------------------------------------------------


def _open(config_path: Path, check: str) -> SurfaceStore:
    """The store of the config's data_dir, once ``check`` is known there. A check is known
    when the config names it or the store has its surface (a discovered check)."""
    from alivemcp.toolsurface.store import FILE_NAME, SurfaceStore

    # The secrets are not needed to read surfaces; data_dir must be known, though.
    loaded = load_config(config_path, allow_missing_env=True)
    for line in loaded.unchecked:
        if line.startswith("data_dir:"):
            raise ConfigError([line], str(config_path))
    directory = Path(loaded.config.data_dir)
    names = [c.name for c in loaded.checks]
    path = directory / FILE_NAME
    # Never create a database where there is none (a mistyped data_dir, a dry run).
    store = SurfaceStore(directory) if path.exists() else None
    stored = store.checks() if store is not None else []
    if check not in names and check not in stored:
        if store is not None:
            store.close()
        hint = difflib.get_close_matches(check, [*names, *stored], n=1)
        more = f"; did you mean {hint[0]!r}?" if hint else ""
        raise _Refused(
            f"no check named {inert_text(check, 200)!r} in {config_path} nor in {path}{more}",
            EXIT_USAGE,
        )
    if store is None or check not in stored:
        if store is not None:
            store.close()
        where = "" if directory.is_absolute() else f" (data_dir {str(directory)!r} is relative)"
        raise _Refused(
            f"no tool surface seen yet for {inert_text(check, 200)!r} in {path}{where}: "
            "the daemon records it when the check runs",
            EXIT_NO_SURFACE,
        )
    return store


def _call(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` (a document of :mod:`alivemcp.web.tools`, shared with the HTTP API),
    its refusals as the CLI's."""
    from alivemcp.web.tools import ToolsError

    try:
        return function(*args)
    except ToolsError as err:
        code = EXIT_NO_SURFACE if err.status == 404 else EXIT_USAGE
        message = err.message
        if err.parameter in ("from", "to", "surface"):  # the option's name, not the API's
            message = "--" + message
        raise _Refused(message, code) from None


# -- show ---------------------------------------------------------------------------------------


def _when(at: Any) -> str:
    if not isinstance(at, int | float):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(at))


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 or thing == "instructions" else f"{n} {thing}s"


def _show(store: SurfaceStore, check: str, as_json: bool) -> int:
    from alivemcp.toolsurface.tracker import FIRST_SEEN
    from alivemcp.web.tools import surface_document

    doc = _call(surface_document, store, check)
    if as_json:
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    approval = doc["approved"]
    mode = f", mode {doc['mode']}" if doc["mode"] else ""
    lines = [
        f"check:    {inert_text(check, 200)}",
        f"surface:  {doc['digest']} ({doc['state']}{mode}), seen {_when(doc['first_seen'])} "
        f"to {_when(doc['last_seen'])}",
    ]
    if approval is None:
        lines.append("approved: none")
    else:
        who = approval["approved_by"]
        by = "taken on first sight" if who == FIRST_SEEN else f"by {who}"
        lines.append(f"approved: {approval['digest']} at {_when(approval['approved_at'])}, {by}")
    lines.append(f"current surface approved: {'yes' if doc['current_approved'] else 'no'}")
    kinds = Counter(item["kind"] for item in doc["items"])
    counted = ", ".join(_count(n, kind) for kind, n in sorted(kinds.items())) or "none"
    lines.append(f"items:    {counted}")
    for item in doc["items"][:SHOW_ITEMS]:
        lines.append(f"  {item['kind']:<12} {item['digest']}  {item['name']}")
    if len(doc["items"]) > SHOW_ITEMS:
        lines.append(f"  … and {len(doc['items']) - SHOW_ITEMS} more")
    if doc["documents_dropped"]:
        lines.append(f"  ({doc['documents_dropped']} item documents not kept: too many or too big)")
    findings = doc["findings"]
    lines.append(f"findings: {len(findings) or 'none'}")
    for f in findings:
        lines.append(_finding_line(f))
    lines.append(f"versions: {len(doc['versions'])} kept, {doc['pruned']} pruned")
    approved_digest = approval["digest"] if approval else None
    for v in doc["versions"]:
        marks = [
            m
            for m, on in (
                ("current", v["digest"] == doc["digest"]),
                ("approved", v["digest"] == approved_digest),
            )
            if on
        ]
        lines.append(
            f"  {v['digest']}  first seen {_when(v['first_seen'])}  last seen "
            f"{_when(v['last_seen'])}  {_count(v['items'], 'item')}  "
            f"{_count(v['findings'], 'finding')}" + (f"  ({', '.join(marks)})" if marks else "")
        )
    print("\n".join(lines))
    return EXIT_OK


def _finding_line(finding: dict[str, Any]) -> str:
    # Already inert (surface_document); inert again on one line, as a list item.
    def one(key: str, limit: int) -> str:
        return inert_text(str(finding.get(key, "")), limit)

    line = (
        f"  [{one('severity', 20)}] {one('rule', 60)} in {one('item', 120)}: {one('message', 300)}"
    )
    evidence = finding.get("evidence")
    if evidence:
        line += f" (evidence: {inert_text(str(evidence), 200)})"
    return line


# -- diff ---------------------------------------------------------------------------------------


def _diff(store: SurfaceStore, check: str, from_: str | None, to: str | None, as_json: bool) -> int:
    from alivemcp.web.tools import diff_document

    doc = _call(diff_document, store, check, from_, to)
    if as_json:
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    approval = store.approval(check)
    latest = store.latest(check)

    def named(digest: str | None) -> str:
        if digest is None:
            return "(nothing: every item is new)"
        marks = [
            m
            for m, on in (
                ("approved", approval is not None and approval.digest == digest),
                ("latest", digest == latest),
            )
            if on
        ]
        return digest + (f" ({', '.join(marks)})" if marks else "")

    print(f"{inert_text(check, 200)}: from {named(doc['from'])} to {named(doc['to'])}")
    print(doc["summary"])
    return EXIT_OK


# -- approve ------------------------------------------------------------------------------------


def _approve(store: SurfaceStore, check: str, surface: str | None, as_json: bool) -> int:
    from alivemcp.toolsurface.tracker import FIRST_SEEN
    from alivemcp.web.tools import resolve

    digest = _call(resolve, store, check, surface, "surface") if surface else store.latest(check)
    if digest is None:  # checked by _open; the store was emptied meanwhile
        raise _Refused(f"no tool surface seen yet for {inert_text(check, 200)!r}", EXIT_NO_SURFACE)
    previous = store.approval(check)
    approval = store.approve(check, digest, time.time(), approved_by())
    if as_json:
        print(
            json.dumps(
                {
                    "check": check,
                    "digest": approval.digest,
                    "approved_at": approval.approved_at,
                    "approved_by": approval.approved_by,
                    "previous": previous.digest if previous is not None else None,
                },
                indent=2,
            )
        )
        return EXIT_OK
    was = f" (was {previous.digest})" if previous is not None else ""
    if previous is not None and previous.digest == digest:
        by_hand = previous.approved_by != FIRST_SEEN
        was = " (approved again)" if by_hand else " (taken on first sight; now approved by hand)"
    print(
        f"approved surface {digest} of {inert_text(check, 200)} as {approval.approved_by}{was}; "
        "a running daemon takes it within a few seconds"
    )
    return EXIT_OK


def _cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="alivemcp tools", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(_cli())
