"""GC merge planning at 10k, 50k and 100k memories: from scratch, after new memories, and
against the exhaustive pass GC made before.

The store is the corpus of `resolve_speed.py`: LoCoMo turns, then copies with about 40 % of
their longer words swapped for words of the whole corpus, 30 s apart; keywords extracted and
tokens counted as the add path does. Entries are made directly, as an import loads them (no dedup on
the way in), so near-duplicates stay for GC to merge: about one memory in eight is folded.
All in process, pure domain code (`domain.gc.plan_gc`); nothing is written.

For each size:
- `scratch`: `plan_gc` without an index (it builds one and looks from every entry), as
  the first GC after start-up;
- the plan is applied as the engine applies it (expired and folded entries leave the
  index, survivors are added again), the index settled; `examine` is what the engine does
  next in the same GC run (store.gc_run): the pairs of what the run changed (the merges'
  survivors) judged at once (domain.gc.examining), and `first_gc_cpu_s` the plan and that
  together; then `--new` more memories of the same corpus are added, and `after_new` is
  the plan from the index (looking only from the entries changed since: the new ones);
- `full_check`: whether that plan equals the plan from scratch of the same entries with
  the same word counts;
- `looked_from`: how many entries that plan looks from; `pending`: the pairs it judges
  again (the pairs the examination accepted: word weights come from counts the index
  keeps until a share of the store changed, so a refused pair waits for one of its
  entries to change);
- `exhaustive`: the pass GC made before (`domain.dedup.merge_groups` over every live
  entry, whose candidate pairs from a prefix filter are all enumerated and kept in a set,
  then judged by `domain.dedup.compare`):
  timed up to `--exhaustive-max` entries, and extrapolated beyond as n² from the largest
  size timed (marked `extrapolated`); `exhaustive_check` says whether the merges matched.

Times are wall seconds and process CPU seconds (the machine may be shared: CPU time says
what the planning itself took), with the cyclic collector held to young collections as a
GC run holds it. `peak_mb` is the peak of memory allocated during one plan
(tracemalloc, in a separate run: tracing slows Python down); `index_mb` what the index
built from all entries keeps, and `lookup_mb` what the engine's `Lookup` keeps for its
near-duplicate check on add, for comparison.

    python bench/gc_scale.py [--data PATH] [--sizes 10000,50000,100000] [--new 1000]
        [--exhaustive-max 10000] [--no-peak] [--out bench/results/gc_scale.json]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import resolve_speed as speed  # noqa: E402
from mnemod.config import Config  # noqa: E402
from mnemod.domain import dedup  # noqa: E402
from mnemod.domain.gc import GcPlan, examining, mergeable, plan_gc  # noqa: E402
from mnemod.domain.keywords import extract_keywords  # noqa: E402
from mnemod.domain.merge import decide_merge, merge_into  # noqa: E402
from mnemod.domain.model import Entry  # noqa: E402
from mnemod.domain.retention import is_expired  # noqa: E402
from mnemod.domain.similar_pairs import KeywordIndex, WordCounts  # noqa: E402
from mnemod.domain.steps import run_through  # noqa: E402
from mnemod.store.heap import YoungOnly  # noqa: E402
from mnemod.store.lookup import Lookup  # noqa: E402
from mnemod.tokens import token_counter  # noqa: E402
from results import write_results  # noqa: E402

START = datetime(2023, 1, 1, tzinfo=UTC)
STEP = timedelta(seconds=30)
LIFETIME = timedelta(days=3650)
T = TypeVar("T")


def make_entries(source: Iterator[str], first: int, count: int, limit: int) -> list[Entry]:
    """Entries as the add path stores them: keywords extracted and tokens counted (the pair
    rule reads both: the balance of the lengths, the wording and clause penalties)."""
    counter = token_counter(Config().tokens.encoding)
    out = []
    for index in range(first, first + count):
        content = next(source)
        at = START + STEP * index
        out.append(
            Entry(
                id=f"m{index:07d}",
                type="context",
                content=content,
                created_at=at,
                updated_at=at,
                last_accessed_at=at,
                expires_at=at + LIFETIME,
                keywords=extract_keywords(content, limit),
                tokens=counter.count(content),
            )
        )
    return out


def timed(call: Callable[[], T]) -> tuple[T, float, float]:
    """The result, wall seconds and process CPU seconds, the cyclic collector held to
    young collections as a GC run holds it (store.gc_run.run_gc, the daemon's
    maintenance: store.heap.YoungOnly)."""
    collector = YoungOnly(freeze=False)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        result = call()
        collector.collect()
        return result, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        collector.release()


def peak_mb(call: Callable[[], object]) -> float:
    """Peak memory allocated during `call` (what it keeps included), in MB."""
    tracemalloc.start()
    try:
        call()
        return round(tracemalloc.get_traced_memory()[1] / 2**20, 1)
    finally:
        tracemalloc.stop()


def kept_mb(build: Callable[[], object]) -> float:
    """Memory still held by what `build` returns, in MB."""
    tracemalloc.start()
    try:
        kept = build()
        held = tracemalloc.get_traced_memory()[0]
        del kept
        return round(held / 2**20, 1)
    finally:
        tracemalloc.stop()


def lookup_of(entries: list[Entry]) -> Lookup:
    lookup = Lookup()
    for entry in entries:
        lookup.add(entry)
    return lookup


def exhaustive_merges(
    entries: list[Entry], config: Config, now: datetime, counts: WordCounts | None = None
) -> list[Any]:
    """The merges of the pass GC made before the index (word weights from `counts`,
    default: over the live entries)."""
    live = [e for e in entries if not is_expired(e, now)]
    merges = []
    for survivor, *others in dedup.merge_groups(live, config.dedup, counts=counts):
        taken = mergeable(survivor, others, now)
        if taken:
            merges.append((survivor.id, [o.id for o in taken]))
    return merges


def apply(plan: GcPlan, entries: dict[str, Entry], index: KeywordIndex, now: datetime) -> None:
    """What the engine does with a plan, feeding the index as it must."""
    for entry_id in plan.expired:
        del entries[entry_id]
        index.discard(entry_id)
    drift = index.drift
    for survivor_id, folded_ids in plan.merges:
        survivor = entries[survivor_id]
        for folded_id in folded_ids:
            folded = entries.pop(folded_id)
            merge_into(survivor, folded, now, decide_merge(survivor, folded))
            index.discard(folded_id)
        index.add(survivor)
    index.discount(index.drift - drift)  # as store.gc_run does
    for entry_id in plan.promote:
        del entries[entry_id]
        index.discard(entry_id)
    assert plan.settlement is not None
    index.settle(plan.settlement)


def measure(
    size: int, turns: list[str], new: int, exhaustive_max: int, config: Config, peaks: bool
) -> dict[str, Any]:
    source = speed.memories(turns, random.Random(size))
    entries = make_entries(source, 0, size, config.limits.max_keywords)
    now = START + STEP * (size + new + 1)
    row: dict[str, Any] = {"entries": size}

    plan, row["scratch_s"], row["scratch_cpu_s"] = timed(lambda: plan_gc(entries, config, now))
    row["merges"] = len(plan.merges)
    row["folded"] = sum(len(folded) for _, folded in plan.merges)
    if peaks:
        row["scratch_peak_mb"] = peak_mb(lambda: plan_gc(entries, config, now))
    row["index_mb"] = kept_mb(lambda: KeywordIndex(entries))
    row["lookup_mb"] = kept_mb(lambda: lookup_of(entries))
    if size <= exhaustive_max:
        merges, row["exhaustive_s"], row["exhaustive_cpu_s"] = timed(
            lambda: exhaustive_merges(entries, config, now)
        )
        row["exhaustive_check"] = merges == plan.merges
        row["exhaustive_peak_mb"] = peak_mb(lambda: exhaustive_merges(entries, config, now))

    # the first GC applied, then new memories
    index, row["index_s"], _ = timed(lambda: KeywordIndex(entries))
    first, _, first_cpu = timed(lambda: plan_gc(entries, config, now, index=index))
    held = {e.id: e for e in entries}
    apply(first, held, index, now)
    examined, row["examine_s"], row["examine_cpu_s"] = timed(
        lambda: run_through(examining(held, config, now, index))
    )
    index.settle(examined)
    row["first_gc_cpu_s"] = first_cpu + row["examine_cpu_s"]
    for entry in make_entries(source, size, new, config.limits.max_keywords):
        held[entry.id] = entry
        index.add(entry)
    current = list(held.values())
    changes = index.changes(config.dedup)
    row["looked_from"], row["pending"] = len(changes.ids), len(changes.pending)
    after, row["after_new_s"], row["after_new_cpu_s"] = timed(
        lambda: plan_gc(current, config, now, index=index)
    )
    row["after_new_merges"] = len(after.merges)
    if peaks:
        row["after_new_peak_mb"] = peak_mb(lambda: plan_gc(current, config, now, index=index))
    fresh = KeywordIndex(current, reweigh_at=math.inf)
    fresh.weights = index.weights  # the same word counts, every entry looked from
    row["full_check"] = after.merges == plan_gc(current, config, now, index=fresh).merges
    if size <= exhaustive_max:
        row["after_new_exhaustive_check"] = after.merges == exhaustive_merges(
            current, config, now, index.weights
        )
    for key, value in row.items():
        if isinstance(value, float):
            row[key] = round(value, 3)
    return row


def extrapolate(rows: list[dict[str, Any]]) -> None:
    """The exhaustive pass beyond the largest size timed, as n² from it."""
    timed_rows = [r for r in rows if "exhaustive_s" in r]
    if not timed_rows:
        for row in rows:
            row["exhaustive"] = "not run (--exhaustive-max below every size)"
        return
    base = max(timed_rows, key=lambda r: r["entries"])
    for row in rows:
        if "exhaustive_s" in row:
            row["exhaustive"] = "measured"
        else:
            factor = (row["entries"] / base["entries"]) ** 2
            row["exhaustive_s"] = round(base["exhaustive_s"] * factor, 1)
            row["exhaustive_cpu_s"] = round(base["exhaustive_cpu_s"] * factor, 1)
            row["exhaustive"] = f"extrapolated n² from {base['entries']}"
        row["speedup"] = round(row["exhaustive_s"] / row["scratch_s"], 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--sizes", default="10000,50000,100000")
    parser.add_argument("--new", type=int, default=1000, help="memories added after a GC")
    parser.add_argument("--exhaustive-max", type=int, default=10000)
    parser.add_argument(
        "--no-peak", action="store_true", help="skip the traced runs for peak memory"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gc_scale.json"))
    args = parser.parse_args(argv)
    turns, _, label = speed.corpus(Path(args.data))
    config = Config()
    rows = []
    for size in sorted(int(s) for s in args.sizes.split(",")):
        rows.append(measure(size, turns, args.new, args.exhaustive_max, config, not args.no_peak))
        print(f"  {size} entries done", file=sys.stderr)
    extrapolate(rows)

    print(
        f"GC merge planning, corpus: {label}; "
        f"floor {config.dedup.floor}, threshold {config.dedup.threshold}"
    )
    print(f"after_new: {args.new} memories added after a GC was applied")
    columns = (
        ("entries", "entries"),
        ("folded", "folded"),
        ("scratch_s", "scratch_s"),
        ("scratch_cpu_s", "cpu_s"),
        ("scratch_peak_mb", "peak_mb"),
        ("index_mb", "index_mb"),
        ("lookup_mb", "lookup_mb"),
        ("examine_cpu_s", "exam_cpu_s"),
        ("first_gc_cpu_s", "1st_cpu_s"),
        ("looked_from", "looked_from"),
        ("pending", "pending"),
        ("after_new_s", "after_new_s"),
        ("after_new_cpu_s", "cpu_s"),
        ("after_new_peak_mb", "peak_mb"),
        ("full_check", "same"),
        ("exhaustive_s", "exhaust_s"),
        ("exhaustive_peak_mb", "ex_peak_mb"),
        ("speedup", "speedup"),
    )
    print("".join(f"{title:>12}" for _, title in columns))
    for row in rows:
        print("".join(f"{row.get(key, '-')!s:>12}" for key, _ in columns))
    for row in rows:
        print(f"  {row['entries']}: exhaustive {row['exhaustive']}", end="")
        if "exhaustive_check" in row:
            print(
                f"; same merges as exhaustive: from scratch {row['exhaustive_check']}, "
                f"after new {row['after_new_exhaustive_check']}",
                end="",
            )
        print()
    write_results(
        args.out,
        {
            "corpus": label,
            "floor": config.dedup.floor,
            "threshold": config.dedup.threshold,
            "new": args.new,
            "sizes": rows,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
