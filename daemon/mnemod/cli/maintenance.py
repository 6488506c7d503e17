"""Commands on the whole namespace: gc, stats, history, dedupe --report, export, import."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemod.cli.context import Context
from mnemod.cli.progress import counting, phase
from mnemod.cli.remote import mutate, running_daemon
from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError
from mnemod.files.checkpoint_head import FORMAT
from mnemod.files.journal import read_jsonl, story
from mnemod.files.l1_files import L1Registry

if TYPE_CHECKING:
    from mnemod.store.engine import Engine


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    gc = sub.add_parser("gc", parents=[common], help="expire, merge, mark promotable, promote")
    gc.add_argument(
        "--dry-run", action="store_true", help="report without changing anything (default: apply)"
    )
    gc.set_defaults(handler=cmd_gc)

    stats = sub.add_parser("stats", parents=[common], help="counts per layer and type")
    stats.set_defaults(handler=cmd_stats)

    history = sub.add_parser(
        "history", parents=[common], help="an entry's story (merged ids included)"
    )
    history.add_argument("id", help="entry id, or its key label")
    history.set_defaults(handler=cmd_history)

    dedupe = sub.add_parser("dedupe", parents=[common], help="near-duplicate candidates for review")
    dedupe.add_argument(
        "--report", action="store_true", required=True, help="list the pairs (required)"
    )
    dedupe.add_argument(
        "--threshold",
        type=fraction,
        metavar="0..1",
        help="lowest keyword Jaccard listed, above 0 and at most 1 "
        "(default: dedup.floor minus 0.15, at least 0.05)",
    )
    dedupe.set_defaults(handler=cmd_dedupe)

    export = sub.add_parser("export", parents=[common], help="all L2 and L3 entries as JSON lines")
    export.add_argument("--output", "-o", help="file to write (default: standard output)")
    export.set_defaults(handler=cmd_export)

    imp = sub.add_parser("import", parents=[common], help="restore entries from `export` output")
    imp.add_argument("file", help="JSON lines file, or - for standard input")
    imp.set_defaults(handler=cmd_import)


STATS_WAIT_SECONDS = 3.0  # for the daemon's answer to `stats`, before reading the files
# Entries named by records after the checkpoint that `stats` reads from the checkpoint
# rather than ask a running daemon: each is a search of the file (about 10 ms at 100,000
# entries); asking costs 0.13 s of CPU to import the client.
STATS_REPLAY_MOST = 8


def fraction(text: str) -> float:
    """A similarity threshold: a number above 0 and at most 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not above 0 and at most 1")
    return value


def cmd_gc(ctx: Context) -> int:
    def local(engine: Engine) -> tuple[Any, str]:
        with phase("gc: expiring, merging, promoting"):
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
    """From the checkpoint's counts and the records after it when these name few entries
    (store.reader); else from the running daemon when one answers; else from the checkpoint
    and all the records after it, or, when those do not read that way, from every entry."""
    from mnemod.store.reader import committed_stats

    quick = committed_stats(ctx.paths, most=STATS_REPLAY_MOST)
    answer = _daemon_stats(ctx) if quick is None else None
    if answer is not None:
        counts, last_event_id = answer["counts"], answer["last_event_id"]
        l1_count, problems = answer["l1"], answer["l1_problems"]
    else:
        quick = quick or committed_stats(ctx.paths)
        if quick is not None:
            counts, last_event_id = quick
            l1 = L1Registry(ctx.l1_dir, ctx.config.limits)
            problems = [str(p) for p in l1.reload_all()]
            l1_count = len(l1.items())
        else:
            with ctx.engine(write=False) as engine:
                counts, last_event_id = engine.stats(), engine.last_event_id
                l1_count = len(engine.l1_items())
                problems = [str(p) for p in engine.l1_problems]
    data = {
        "namespace": ctx.namespace,
        "l1": l1_count,
        "l2": counts["l2"],
        "l3": counts["entries"],
        "l3_by_type": counts["by_type"],
        "l2_by_type": counts["l2_by_type"],
        "promotable": counts["promotable"],
        "tokens_l3": counts["tokens"],
        "last_event_id": last_event_id,
        "l1_problems": problems,
    }
    text = "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in data.items())
    ctx.emit(data, text)
    return 0


def _daemon_stats(ctx: Context) -> dict[str, Any] | None:
    """The running daemon's answer to a stats request, or None (no daemon runs, or it does
    not answer in time or understand the request: the files answer instead). At 100,000
    entries the files beside a daemon can hold many records after the checkpoint to replay
    (after a GC, some 20,000 entries' worth: 1.7 s); the daemon has them in memory."""
    client = running_daemon(ctx, socket_timeout=STATS_WAIT_SECONDS)
    if client is None:
        return None
    from mnemod.client import ClientError

    with client:
        try:
            return client.stats(timeout=STATS_WAIT_SECONDS)
        except ClientError:
            return None


def cmd_history(ctx: Context) -> int:
    """The entry's history records (by id or key label) and, in time order among them,
    every text of it that left the index (archived: merged, superseded, expired, removed),
    so none is unreadable."""
    records = _story(ctx, ctx.args.id)
    related = {ctx.args.id}
    for r in records:
        related.update(str(i) for i in [r.get("id"), *r.get("merged", []), r.get("into")] if i)
    records += archived(ctx.paths.archive, related)
    if not records:
        raise InvalidInputError("id", f"no history for {ctx.args.id!r}")
    records.sort(key=lambda r: str(r.get("at", "")))
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


def _story(ctx: Context, id_or_key: str) -> list[dict[str, Any]]:
    """The records of an id; else of the entries added with that key label (removed ones
    too); else of the entry holding that key now (a key given later by an update)."""
    path = ctx.paths.history
    records = story(path, id_or_key)
    if records:
        return records
    ids = list(dict.fromkeys(r["id"] for r in read_jsonl(path) if r.get("key") == id_or_key))
    if not ids:
        with ctx.engine(write=False) as engine:
            entry = engine.find(id_or_key)
        ids = [entry.id] if entry is not None else []
    found = {json.dumps(r, sort_keys=True): r for i in ids for r in story(path, str(i))}
    return sorted(found.values(), key=lambda r: str(r.get("at", "")))


def archived(path: Path, ids: set[str]) -> list[dict[str, Any]]:
    """Archive records of the entries `ids`, shaped as history records (`op` "archived",
    with the reason and the text that left)."""
    found = []
    for record in read_jsonl(path):
        entry = record.get("entry")
        if isinstance(entry, dict) and entry.get("id") in ids:
            found.append(
                {
                    "at": record.get("archived_at"),
                    "op": "archived",
                    "id": entry.get("id"),
                    "by": record.get("by"),
                    "reason": record.get("reason"),
                    "content": entry.get("content"),
                }
            )
    return found


def cmd_dedupe(ctx: Context) -> int:
    """Every candidate pair and what would happen to it: its score against the threshold,
    the step that refuses it (the Jaccard floor, the score, a guard), and for a merge how
    the two texts would merge (domain.merge.decide_merge)."""
    from mnemod.domain.dedup import judged_pairs  # loaded for this command alone
    from mnemod.domain.merge import MergeKind, decide_merge, older_first

    threshold = ctx.args.threshold
    floor = ctx.config.dedup.floor
    if threshold is None:
        threshold = max(0.05, floor - 0.15)
    with ctx.engine(write=False) as engine:
        entries = engine.select(layer="l3")
        by_id = {e.id: e for e in entries}
        with phase(f"comparing {len(entries)} entries"):
            judged = judged_pairs(entries, ctx.config.dedup, below=threshold)
    rows = []
    for pair, verdict in judged:
        older, newer = older_first(by_id[pair.a], by_id[pair.b])
        merge = decide_merge(older, newer) if verdict.merges else None
        rows.append(
            {
                "a": older.id,
                "b": newer.id,
                **verdict.as_dict(),
                "would_merge": merge is not None and merge.kind is not MergeKind.KEEP_APART,
                "merge": merge.as_dict() if merge is not None else None,
                "a_content": older.content,
                "b_content": newer.content,
            }
        )
    ctx.emit(rows, "\n".join(_dedupe_line(r) for r in rows) or f"no candidates at {threshold:.2f}")
    return 0


_GUARD_SAYS = {
    "negation": "one negates, the other not",
    "numbers": "numbers differ",
    "days": "days differ",
    "names": "names differ",
}


def _dedupe_line(row: dict[str, Any]) -> str:
    refused = row["refused_by"]
    # the penalties, the credit and the rewordings read as one within the score, if any
    score = f"score {row['score']:.3f}"
    terms = ("wording", "clause", "figures", "both_negate", "synonyms", "acronyms", "compounds",
             "forenames")  # fmt: skip
    penalties = [f"{name} {row[name]:+.3f}" for name in terms if row.get(name)]
    if penalties:
        score += f" ({', '.join(penalties)})"
    if refused == "floor":
        why = f"jaccard {row['jaccard']:.3f} < floor {row['floor']:.2f}"
    elif refused == "score":
        why = f"{score} < threshold {row['threshold']:.2f}"
    elif refused is not None:
        guard = _GUARD_SAYS.get(refused, refused)
        why = f"{score} ≥ {row['threshold']:.2f}, refused: {guard}"
    else:
        merge = row["merge"]
        conflicts = f" ({', '.join(merge['conflicts'])})" if merge["conflicts"] else ""
        why = f"{score} ≥ {row['threshold']:.2f}: {merge['kind']}{conflicts}"
    verdict = "merge" if row["would_merge"] else "keep"
    return (
        f"{verdict:<5} {row['a']} ~ {row['b']}  jaccard {row['jaccard']:.3f}; {why}\n"
        f"    a: {str(row['a_content'])[:100]}\n    b: {str(row['b_content'])[:100]}"
    )


def cmd_export(ctx: Context) -> int:
    with ctx.engine(write=False) as engine:
        selected = engine.select()
        lines = [
            json.dumps(
                {"format": FORMAT, "layer": engine.layer_of(e), "entry": e.to_dict()},
                ensure_ascii=False,
            )
            for e in counting(selected, "exporting", total=len(selected))
        ]
    payload = "".join(line + "\n" for line in lines)
    if ctx.args.output:
        try:
            Path(ctx.args.output).write_text(payload, encoding="utf-8")
        except OSError as exc:
            raise InvalidInputError("--output", f"{ctx.args.output}: {exc.strerror}") from exc
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
    numbered = text.splitlines()
    for number, line in enumerate(counting(numbered, "reading", len(numbered), "lines"), 1):
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
    with ctx.engine(write=True) as engine, phase(f"restoring {len(parsed)} entries"):
        restored = engine.restore(parsed)
    ctx.emit(
        {"imported": restored, "skipped": len(parsed) - restored},
        f"imported {restored}, skipped {len(parsed) - restored} already present",
    )
    return 0
