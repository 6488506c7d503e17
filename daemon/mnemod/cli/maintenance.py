"""Commands on the whole namespace: gc, stats, history, dedupe --report, export, import."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemod.cli.context import Context
from mnemod.cli.remote import mutate
from mnemod.domain.dedup import candidate_pairs
from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError
from mnemod.files.journal import story
from mnemod.files.l3_store import FORMAT

if TYPE_CHECKING:
    from mnemod.store.engine import Engine


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    gc = sub.add_parser("gc", parents=[common], help="expire, merge, mark promotable, promote")
    gc.add_argument("--dry-run", action="store_true", help="report without changing anything")
    gc.set_defaults(handler=cmd_gc)

    stats = sub.add_parser("stats", parents=[common], help="counts per layer and type")
    stats.set_defaults(handler=cmd_stats)

    history = sub.add_parser(
        "history", parents=[common], help="an entry's story (merged ids included)"
    )
    history.add_argument("id")
    history.set_defaults(handler=cmd_history)

    dedupe = sub.add_parser("dedupe", parents=[common], help="near-duplicate candidates for review")
    dedupe.add_argument("--report", action="store_true", required=True)
    dedupe.add_argument("--threshold", type=float, help="default: the dedup threshold minus 0.15")
    dedupe.set_defaults(handler=cmd_dedupe)

    export = sub.add_parser("export", parents=[common], help="all L2 and L3 entries as JSON lines")
    export.add_argument("--output", "-o", help="file (default: standard output)")
    export.set_defaults(handler=cmd_export)

    imp = sub.add_parser("import", parents=[common], help="restore entries from `export` output")
    imp.add_argument("file", help="JSON lines file, or - for standard input")
    imp.set_defaults(handler=cmd_import)


def cmd_gc(ctx: Context) -> int:
    def local(engine: Engine) -> tuple[Any, str]:
        report = engine.gc(dry_run=ctx.args.dry_run, by="cli")
        summary = " ".join(f"{k}={v}" for k, v in report.as_dict(summary=True).items())
        return report.as_dict(), ("dry run: " if report.dry_run else "") + summary

    if ctx.args.dry_run:  # changes nothing: the files can be read beside a running daemon
        with ctx.engine(write=False) as engine:
            ctx.emit(*local(engine))
        return 0
    mutate(ctx, "gc", {}, local)
    return 0


def cmd_stats(ctx: Context) -> int:
    with ctx.engine(write=False) as engine:
        l3 = engine.select(layer="l3")
        l2 = engine.select(layer="l2")
        data = {
            "namespace": ctx.namespace,
            "l1": len(engine.l1_items()),
            "l2": len(l2),
            "l3": len(l3),
            "l3_by_type": engine.counts_by_type(),
            "l2_by_type": _by_type(l2),
            "promotable": sum(1 for e in l3 if e.promotable),
            "tokens_l3": sum(e.tokens for e in l3),
            "last_event_id": engine.last_event_id,
            "l1_problems": [str(p) for p in engine.l1_problems],
        }
    text = "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in data.items())
    ctx.emit(data, text)
    return 0


def _by_type(entries: list[Entry]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.type] = counts.get(entry.type, 0) + 1
    return dict(sorted(counts.items()))


def cmd_history(ctx: Context) -> int:
    records = story(ctx.paths.history, ctx.args.id)
    if not records:
        raise InvalidInputError("id", f"no history for {ctx.args.id!r}")
    lines = []
    for r in records:
        extra = " ".join(
            f"{k}={json.dumps(v, ensure_ascii=False)}"
            for k, v in r.items()
            if k not in {"at", "op", "id", "by"}
        )
        lines.append(
            f"{r.get('at')}  {r.get('op'):<8} {r.get('id')}  by={r.get('by')} {extra}".rstrip()
        )
    ctx.emit(records, "\n".join(lines))
    return 0


def cmd_dedupe(ctx: Context) -> int:
    threshold = ctx.args.threshold
    if threshold is None:
        threshold = max(0.05, ctx.config.dedup.threshold - 0.15)
    with ctx.engine(write=False) as engine:
        entries = engine.select(layer="l3")
        by_id = {e.id: e for e in entries}
        pairs = candidate_pairs(entries, threshold)
    rows = [
        {
            "a": p.a,
            "b": p.b,
            "score": round(p.score, 3),
            "would_merge": p.score >= ctx.config.dedup.threshold,
            "a_content": by_id[p.a].content,
            "b_content": by_id[p.b].content,
        }
        for p in pairs
    ]
    lines = [
        f"{r['score']:.3f} {'merge' if r['would_merge'] else 'review'}  {r['a']} ~ {r['b']}\n"
        f"    a: {str(r['a_content'])[:100]}\n    b: {str(r['b_content'])[:100]}"
        for r in rows
    ]
    ctx.emit(rows, "\n".join(lines) or f"no candidates at threshold {threshold:.2f}")
    return 0


def cmd_export(ctx: Context) -> int:
    with ctx.engine(write=False) as engine:
        lines = [
            json.dumps(
                {"format": FORMAT, "layer": engine.layer_of(e), "entry": e.to_dict()},
                ensure_ascii=False,
            )
            for e in engine.select()
        ]
    payload = "".join(line + "\n" for line in lines)
    if ctx.args.output:
        Path(ctx.args.output).write_text(payload, encoding="utf-8")
        sys.stderr.write(f"exported {len(lines)} entries to {ctx.args.output}\n")
    else:
        ctx.out.write(payload)
    return 0


def cmd_import(ctx: Context) -> int:
    source = sys.stdin if ctx.args.file == "-" else None
    name = "<stdin>" if source else ctx.args.file
    try:
        text = source.read() if source else Path(ctx.args.file).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError("file", f"{name}: {exc.strerror}") from exc
    parsed: list[tuple[str, Entry]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{name}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError("line", f"not valid JSON ({exc.msg})", where) from exc
        if not isinstance(record, dict) or not isinstance(record.get("entry"), dict):
            raise InvalidInputError("entry", 'each line is {"layer":..., "entry":{...}}', where)
        layer = record.get("layer", "l3")
        if layer not in ("l2", "l3"):
            raise InvalidInputError("layer", "must be l2 or l3", where)
        entry = Entry.from_dict(record["entry"], where)
        if entry.type not in ctx.config.types and layer == "l3":
            raise InvalidInputError("type", f"unknown type {entry.type!r}", where)
        parsed.append((layer, entry))
    with ctx.engine(write=True) as engine:
        restored = engine.restore(parsed)
    ctx.emit(
        {"imported": restored, "skipped": len(parsed) - restored},
        f"imported {restored}, skipped {len(parsed) - restored} already present",
    )
    return 0
