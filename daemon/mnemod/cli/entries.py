"""Commands on single entries: add, get, list, access, update, remove, promote."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from mnemod.cli.context import Context
from mnemod.cli.remote import mutate
from mnemod.clock import parse_time
from mnemod.domain.validation import NewEntry, check_new_entry
from mnemod.errors import InvalidInputError, NotFoundError
from mnemod.files.l1_files import L1Item, L1Registry
from mnemod.ids import new_id

if TYPE_CHECKING:
    from mnemod.store.engine import Engine


TYPES_HELP = (
    "memory type: context, preference, progress, relation, insight, or one added under "
    "[ttl] in the config; sets the base lifetime (default: context)"
)
ID_HELP = "entry id, or its key label"


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    add = sub.add_parser("add", parents=[common], help="store a memory (an L3 entry)")
    add.add_argument("content", help="the memory's text; - reads it from standard input")
    add.add_argument("--type", default="context", help=TYPES_HELP)
    add.add_argument(
        "--importance",
        type=int,
        default=3,
        choices=range(1, 6),
        metavar="1-5",
        help="1 (lifetime ×0.5) to 5 (×2) (default: 3)",
    )
    add.add_argument(
        "--key", help="a label to find the entry by, instead of its id (default: none)"
    )
    add.add_argument(
        "--tag",
        action="append",
        default=[],
        dest="tags",
        metavar="TAG",
        help="a tag; repeatable (default: none)",
    )
    add.add_argument(
        "--keyword",
        action="append",
        default=None,
        dest="keywords",
        metavar="KEYWORD",
        help="a keyword for dedup and recall; repeatable (default: extracted from the content)",
    )
    add.add_argument(
        "--tier",
        default="cold",
        choices=["hot", "warm", "cold"],
        help="hot: in every context; warm: when a --trigger matches the prompt; "
        "cold: when it ranks high enough (default: cold)",
    )
    add.add_argument(
        "--trigger",
        action="append",
        default=[],
        dest="triggers",
        metavar="REGEX",
        help="a regular expression (RE2 syntax) matched against prompts, for warm entries; "
        "repeatable (default: none)",
    )
    add.add_argument(
        "--once", action="store_true", help="hot entries: inject once per session (default: off)"
    )
    add.add_argument(
        "--id", dest="entry_id", metavar="ID", help="entry id to use (default: a new sortable id)"
    )
    add.add_argument(
        "--created-at",
        metavar="TIME",
        help="ISO-8601 time with a zone, e.g. 2026-01-31T08:00:00Z (default: now)",
    )
    add.set_defaults(handler=cmd_add)

    get = sub.add_parser("get", parents=[common], help="show one entry (by id or key)")
    get.add_argument("id", help=f"{ID_HELP}, or an L1 item's id")
    get.set_defaults(handler=cmd_get)

    lst = sub.add_parser("list", parents=[common], help="list entries of every layer")
    lst.add_argument("--type", help="only entries of this memory type (default: every type)")
    lst.add_argument(
        "--layer", choices=["l1", "l2", "l3"], help="only this layer (default: every layer)"
    )
    lst.set_defaults(handler=cmd_list)

    access = sub.add_parser("access", parents=[common], help="record an access (extends TTL)")
    access.add_argument("id", help=ID_HELP)
    access.set_defaults(handler=cmd_access)

    update = sub.add_parser("update", parents=[common], help="change fields of an entry")
    update.add_argument("id", help=ID_HELP)
    update.add_argument(
        "fields",
        help="JSON object of the fields to change, e.g. '{\"importance\": 5}'; "
        "fields: content, importance, key, tags, keywords, tier, triggers, once, type",
    )
    update.set_defaults(handler=cmd_update)

    remove = sub.add_parser(
        "remove", parents=[common], help="remove an entry (kept in archive.jsonl)"
    )
    remove.add_argument("id", help=ID_HELP)
    remove.set_defaults(handler=cmd_remove)

    promote = sub.add_parser("promote", parents=[common], help="promote an L3 entry to L2")
    promote.add_argument("id", nargs="?", help=f"{ID_HELP} (or use --all)")
    promote.add_argument(
        "--all",
        action="store_true",
        help="every entry marked promotable (default: only the id given)",
    )
    promote.set_defaults(handler=cmd_promote)


def cmd_add(ctx: Context) -> int:
    a = ctx.args
    created = parse_time(a.created_at, "--created-at") if a.created_at else None
    new = NewEntry(
        content=read_content(a.content),
        type=a.type,
        importance=a.importance,
        key=a.key,
        tags=a.tags,
        keywords=a.keywords,
        tier=a.tier,
        triggers=a.triggers,
        once=a.once,
        created_at=created,
        id=a.entry_id or new_id(created or ctx.clock.now()),
    )
    check_new_entry(new, ctx.config)
    data: dict[str, Any] = {
        k: v
        for k, v in {
            "content": new.content,
            "type": new.type,
            "importance": new.importance,
            "key": new.key,
            "tags": new.tags,
            "keywords": new.keywords,
            "tier": new.tier,
            "triggers": new.triggers,
            "once": new.once,
            "id": new.id,
            "created_at": a.created_at,
        }.items()
        if v not in (None, [], False)
    }

    def local(engine: Engine) -> tuple[Any, str]:
        entry = engine.add(new)
        return entry.to_dict(), f"{engine.last_outcome}: {ctx.entry_line(entry)}"

    mutate(ctx, "add", data, local)
    return 0


def read_content(argument: str) -> str:
    """The content argument, or with `-` standard input (one trailing newline dropped)."""
    if argument != "-":
        return argument
    if sys.stdin is None:
        raise InvalidInputError("content", "- reads standard input, but there is none")
    try:
        text = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            "content", f"standard input is not UTF-8 (byte {exc.start})"
        ) from exc
    return text[:-1] if text.endswith("\n") else text


def cmd_get(ctx: Context) -> int:
    """An entry by its id as committed, read alone (store.reader); by a key label, a
    merged id or an L1 id, or when that read cannot tell, from every entry."""
    from mnemod.store.reader import committed_entry

    quick = committed_entry(ctx.paths, ctx.args.id)
    if quick is not None:
        ctx.emit({**quick[0].to_dict(), "layer": quick[1]}, ctx.entry_detail(*quick))
        return 0
    with ctx.engine(write=False) as engine:
        entry = engine.find(ctx.args.id)
        if entry is not None:
            layer = engine.layer_of(entry)
            ctx.emit({**entry.to_dict(), "layer": layer}, ctx.entry_detail(entry, layer))
            return 0
        for item in engine.l1_items():
            if item.id == ctx.args.id:
                data = {
                    "id": item.id,
                    "layer": "l1",
                    "content": item.content,
                    "triggers": list(item.triggers),
                    "once": item.once,
                    "tags": list(item.tags),
                    "source": item.source,
                }
                ctx.emit(
                    data,
                    "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in data.items()),
                )
                return 0
    raise NotFoundError(f"entry {ctx.args.id!r} in namespace {ctx.namespace!r}")


def cmd_list(ctx: Context) -> int:
    """The entries as committed, read from the checkpoint and the log (store.listing);
    when that read cannot tell, from the opened namespace."""
    from mnemod.store.heap import collector_paused
    from mnemod.store.listing import committed_rows, listed_text

    a = ctx.args
    with collector_paused():  # 100,000 rows, each kept to the end: a collection finds nothing
        text = None
        if not ctx.as_json and a.layer != "l1":
            text = listed_text(ctx.paths, a.type, a.layer)
        quick: list[tuple[dict[str, Any], str]] | None = None
        if a.layer == "l1" or text is not None:
            quick = []
        if quick is None:
            quick = committed_rows(ctx.paths, a.type, a.layer)
        if quick is not None:
            l1 = L1Registry(ctx.l1_dir, ctx.config.limits)
            l1.reload_all()
            list_rows(ctx, l1.items(), quick, text)
            exit_keeping_rows()
            return 0
    with ctx.engine(write=False) as engine:
        found = engine.select(a.type, a.layer)
        list_rows(ctx, engine.l1_items(), [(e.to_dict(), engine.layer_of(e)) for e in found])
    return 0


def exit_keeping_rows() -> None:
    """End the process once the output is out, without freeing the rows one by one (0.09 s
    at 100,000): the command is done, and the system takes back its memory at once. Returns
    when the output cannot be flushed (a closed pipe), which is then reported as before."""
    import logging

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    logging.shutdown()
    os._exit(0)


def list_rows(
    ctx: Context,
    l1: list[L1Item],
    entries: list[tuple[dict[str, Any], str]],
    entry_text: bytes | memoryview | None = None,
) -> None:
    """`list`'s output: the L1 items (unless a type or a layer leaves them out), then the
    entries as (`to_dict()`, layer), or their lines already made (`entry_text`: UTF-8,
    each ended by a newline)."""
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    if ctx.args.layer in (None, "l1") and ctx.args.type is None:
        for item in l1:
            rows.append(
                {"id": item.id, "layer": "l1", "content": item.content, "source": item.source}
            )
            first_line = (item.content.strip().splitlines() or [""])[0][:80]
            lines.append(f"{item.id}  l1 {item.source}  {first_line}")
    if ctx.as_json:  # 100,000 rows: only what is printed
        rows.extend({**data, "layer": layer} for data, layer in entries)
    elif entry_text:
        ctx.emit_lines(lines, entry_text)
        return
    else:
        lines.extend(ctx.row_line(data, layer) for data, layer in entries)
    ctx.emit(rows, "\n".join(lines) or "(no entries)")


def cmd_access(ctx: Context) -> int:
    def local(engine: Engine) -> tuple[Any, str]:
        entry = engine.access(ctx.args.id)
        return entry.to_dict(), ctx.entry_line(entry)

    mutate(ctx, "access", {"id": ctx.args.id}, local)
    return 0


def cmd_update(ctx: Context) -> int:
    try:
        fields = json.loads(ctx.args.fields)
    except json.JSONDecodeError as exc:
        raise InvalidInputError("fields", f"not valid JSON: {exc.msg}") from exc
    if not isinstance(fields, dict):
        raise InvalidInputError("fields", "must be a JSON object")

    def local(engine: Engine) -> tuple[Any, str]:
        entry = engine.update(ctx.args.id, fields)
        return entry.to_dict(), ctx.entry_line(entry)

    mutate(ctx, "update", {"id": ctx.args.id, **fields}, local)
    return 0


def cmd_remove(ctx: Context) -> int:
    def local(engine: Engine) -> tuple[Any, str]:
        entry = engine.remove(ctx.args.id)
        return entry.to_dict(), f"removed (archived): {entry.id}"

    mutate(ctx, "remove", {"id": ctx.args.id}, local)
    return 0


def cmd_promote(ctx: Context) -> int:
    if not ctx.args.id and not ctx.args.all:
        raise InvalidInputError("id", "give an id, or --all for every promotable entry")
    if ctx.args.all:
        with ctx.engine(write=False) as view:
            targets = [e.id for e in view.select(layer="l3") if e.promotable]
    else:
        targets = [ctx.args.id]
    for target in targets:

        def local(engine: Engine, target: str = target) -> tuple[Any, str]:
            entry = engine.promote(target)
            return entry.to_dict(), f"promoted to L2 ({entry.type}.md): {entry.id}"

        mutate(ctx, "promote", {"id": target}, local)
    if not targets:
        ctx.emit([], "nothing to promote")
    return 0
