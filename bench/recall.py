"""Recall of gold evidence in resolve's context on LoCoMo-style data (see the data README).

Every dialog turn becomes a memory (`speaker: text`, created_at = the session time, type
"context", key = the turn id). Each question is resolved with now = its `after_ts` at
budgets of 200/500/1000/2000 cl100k tokens, the whole injected text counted, and scored as
the share of its gold turns found in the selected items (a turn folded into another by
dedup counts as found through the survivor). Three systems run in one process:

- `feedback`: the as-used mode, where each resolve records accesses of what it selected and
  the next question sees them;
- `no-feedback`: the same ranking without recorded accesses;
- `bm25`: the floor — plain BM25 (k1 1.2, b 0.75) over the shared tokenizer, filled in rank
  order, same framing and counting.

With `--ablate`, the default ranking is also run with one technique turned off at a time,
on the domain Resolver with accesses recorded (`default`, as `feedback` with `--backend
resolver`; through the store, dedup folds some turns, so its figures differ a little):
each line against `default` shows what that technique earns.

Printed for each system and budget: the mean recall, by question category, by
conversation (a sanity check that a gain is not one conversation's) and by split (`held`:
the questions whose id hashes into the last 3 of 10 buckets, which no setting was chosen
on; `tuned`: the rest); the JSON holds the same.

    python bench/recall.py [--data PATH] [--out bench/results/recall.json] [--backend store]
        [--ablate]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

from mnemod.clock import parse_time  # noqa: E402
from mnemod.domain.candidates import Candidate  # noqa: E402
from mnemod.domain.ranking import RankingSettings  # noqa: E402
from mnemod.domain.resolve import Resolver  # noqa: E402
from mnemod.tokens import token_counter  # noqa: E402
from results import write_results  # noqa: E402

BUDGETS = (200, 500, 1000, 2000)
PLAIN_BM25 = RankingSettings(
    min_relative_score=0.0,
    importance_weight=0.0,
    frecency_weight=0.0,
    neighbour_weight=0.0,
    density_exponent=0.0,
    fold_suffixes=False,
    query_stopwords=False,
    when_weight=0.0,
    date_weight=0.0,
    speaker_weight=0.0,
    event_weight=0.0,
    kin_weight=0.0,
)
DEFAULT = RankingSettings()
# the default ranking with one technique off: what each earns
ABLATIONS = {
    "-when": replace(DEFAULT, when_weight=0.0),
    "-dates": replace(DEFAULT, date_weight=0.0),
    "-persons": replace(DEFAULT, speaker_weight=0.0),
    "-events": replace(DEFAULT, event_weight=0.0),
    "-neighbours": replace(DEFAULT, neighbour_weight=0.0),
    "-answers": replace(DEFAULT, answer_weight=DEFAULT.neighbour_weight),
    "-folding": replace(DEFAULT, fold_suffixes=False),
    "-kin": replace(DEFAULT, kin_weight=0.0),
}


@dataclass(frozen=True)
class Turn:
    id: str
    content: str
    created_at: datetime


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold: frozenset[str]
    category: str
    now: datetime
    conv: str = ""


class Backend(Protocol):
    """What the bench needs of a memory system: add turns, resolve, map items to turns."""

    def add(self, turn: Turn) -> None: ...

    def resolve(self, prompt: str, budget: int, now: datetime) -> tuple[set[str], int]: ...

    def close(self) -> None: ...


class ResolverBackend:
    """The domain Resolver with a tiny stand-in for the Store's access recording."""

    def __init__(self, settings: RankingSettings, feedback: bool) -> None:
        self.resolver = Resolver(token_counter("cl100k_base"), settings)
        self.counter = self.resolver.counter
        self.feedback = feedback
        self.turns: dict[str, str] = {}

    def add(self, turn: Turn) -> None:
        tokens = self.counter.count(turn.content)
        self.resolver.upsert(
            Candidate(
                id=turn.id,
                layer="l3",
                type="context",
                key=turn.id,
                content=turn.content,
                created_at=turn.created_at,
                last_accessed_at=turn.created_at,
                tokens=tokens,
            )
        )
        self.turns[turn.id] = turn.id

    def resolve(self, prompt: str, budget: int, now: datetime) -> tuple[set[str], int]:
        result = self.resolver.resolve(prompt, budget, now)
        if self.feedback:
            for item in result.items:
                self.resolver.upsert(
                    replace(item, access_count=item.access_count + 1, last_accessed_at=now)
                )
        return {self.turns[i.id] for i in result.items}, result.tokens_used

    def close(self) -> None:
        pass


class StoreBackend:
    """The public API, as an agent uses it: `mnemod.open`, `add`, `resolve` (records accesses)."""

    def __init__(self, folder: str, namespace: str, feedback: bool = True) -> None:
        import mnemod

        self.store: Any = mnemod.open(
            folder, namespace=namespace, config={"ttl": {"context": "3650d"}}
        )
        self.turns: dict[str, set[str]] = defaultdict(set)
        self.feedback = feedback

    def add(self, turn: Turn) -> None:
        entry = self.store.add(
            turn.content, type="context", created_at=turn.created_at, key=turn.id
        )
        self.turns[entry.id].add(turn.id)

    def resolve(self, prompt: str, budget: int, now: datetime) -> tuple[set[str], int]:
        if self.feedback:
            result = self.store.resolve(prompt, budget=budget, session=None, now=now)
        else:  # the same engine without recording accesses (not part of the public API)
            result = self.store.engine.resolve(prompt, budget, now=now, record_access=False)
        found: set[str] = set()
        for item in result.items:
            for item_id in (item.id, *item.merged_from):
                found |= self.turns.get(item_id, set())
            if item.key:
                found.add(item.key)
        if result.tokens_used > budget:
            raise AssertionError(f"budget {budget} exceeded: {result.tokens_used}")
        return found, result.tokens_used

    def close(self) -> None:
        self.store.close()


def load(path: Path) -> tuple[dict[str, list[Turn]], dict[str, list[Question]]]:
    turns: dict[str, list[Turn]] = defaultdict(list)
    questions: dict[str, list[Question]] = defaultdict(list)
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["kind"] == "memory":
                content = f"{row['speaker']}: {row['text']}"
                turns[row["conv"]].append(Turn(row["id"], content, parse_time(row["ts"])))
            elif row["kind"] == "query" and row["gold_ids"]:
                questions[row["conv"]].append(
                    Question(
                        row["id"],
                        row["text"],
                        frozenset(row["gold_ids"]),
                        row["category"],
                        parse_time(row["after_ts"]),
                        row["conv"],
                    )
                )
    return turns, questions


def run(
    make: Any,
    turns: dict[str, list[Turn]],
    questions: dict[str, list[Question]],
    budgets: Sequence[int] = BUDGETS,
) -> dict[int, list[tuple[Question, float]]]:
    """Recall per question at each budget; a fresh backend per conversation and budget."""
    out: dict[int, list[tuple[Question, float]]] = {b: [] for b in budgets}
    for budget in budgets:
        for conv, conv_turns in turns.items():
            backend: Backend = make(conv, budget)
            try:
                for turn in conv_turns:
                    backend.add(turn)
                for question in questions.get(conv, []):
                    found, used = backend.resolve(question.text, budget, question.now)
                    if used > budget:
                        raise AssertionError(f"{question.id}: {used} tokens > budget {budget}")
                    recall = len(found & question.gold) / len(question.gold)
                    out[budget].append((question, recall))
            finally:
                backend.close()
    return out


def summarize(per_question: dict[int, list[tuple[Question, float]]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for budget, rows in per_question.items():
        table[str(budget)] = {
            "recall": _mean(r for _, r in rows),
            "n": len(rows),
            "by_category": _grouped(rows, lambda q: q.category),
            "by_conversation": _grouped(rows, lambda q: q.conv),
            "by_split": _grouped(rows, split),
        }
    return table


def split(question: Question) -> str:
    """ "held" for the questions no setting was chosen on (3 of 10 hash buckets), else "tuned"."""
    return "held" if zlib.crc32(question.id.encode()) % 10 >= 7 else "tuned"


def _grouped(rows: list[tuple[Question, float]], group: Any) -> dict[str, float]:
    by: dict[str, list[float]] = defaultdict(list)
    for question, recall in rows:
        by[group(question)].append(recall)
    return {k: _mean(v) for k, v in sorted(by.items())}


def _mean(values: Iterator[float] | list[float]) -> float:
    found = list(values)
    return round(sum(found) / max(len(found), 1), 4)


def report(results: dict[str, Any], questions: dict[str, list[Question]]) -> str:
    """One line per system and budget: total, each category, each conversation."""
    first = results[next(iter(results))][str(BUDGETS[0])]
    categories = list(first["by_category"])
    convs = list(first["by_conversation"])
    splits = list(first["by_split"])
    counts: dict[str, int] = defaultdict(int)
    for qs in questions.values():
        for q in qs:
            counts[q.category] += 1
            counts[q.conv] += 1
            counts[split(q)] += 1
    labels = (*categories, *convs, *splits)
    widths = [max(len(k), 6) for k in labels]
    names = "".join(f"  {k:>{w}}" for k, w in zip(labels, widths, strict=True))
    sizes = "".join(f"  {'n=' + str(counts[k]):>{w}}" for k, w in zip(labels, widths, strict=True))
    lines = [
        f"mean recall of gold turns ({sum(len(q) for q in questions.values())} questions)",
        f"{'system':<12}{'budget':>7}{'total':>7}{names}",
        f"{'':<26}{sizes}",
    ]
    for name, table in results.items():
        for budget in BUDGETS:
            row = table[str(budget)]
            values = [
                *row["by_category"].values(),
                *row["by_conversation"].values(),
                *row["by_split"].values(),
            ]
            cells = "".join(f"  {v:>{w}.3f}" for v, w in zip(values, widths, strict=True))
            lines.append(f"{name:<12}{budget:>7}{row['recall']:>7.3f}{cells}")
    return "\n".join(lines)


def systems(backend: str, folder: str, ablate: bool = False) -> Iterator[tuple[str, Any]]:
    if backend == "store":
        counter = iter(range(1_000_000))

        yield "feedback", lambda conv, budget: StoreBackend(folder, f"b{next(counter)}", True)
        yield "no-feedback", lambda conv, budget: StoreBackend(folder, f"b{next(counter)}", False)
    else:
        yield "feedback", lambda conv, budget: ResolverBackend(RankingSettings(), True)
        yield "no-feedback", lambda conv, budget: ResolverBackend(RankingSettings(), False)
    yield "bm25", lambda conv, budget: ResolverBackend(PLAIN_BM25, False)
    if ablate:  # beside the Resolver on defaults, which the store's figures differ from
        yield "default", lambda conv, budget: ResolverBackend(DEFAULT, True)
        for name, settings in ABLATIONS.items():
            yield name, lambda conv, budget, s=settings: ResolverBackend(s, True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "recall.json"))
    parser.add_argument(
        "--backend",
        choices=("store", "resolver"),
        default="store",
        help="store: the public mnemod.open API; resolver: the domain Resolver directly",
    )
    parser.add_argument(
        "--ablate", action="store_true", help="also the default ranking minus each technique"
    )
    args = parser.parse_args(argv)
    turns, questions = load(Path(args.data))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mnemod-bench-") as folder:
        for name, make in systems(args.backend, folder, args.ablate):
            started = time.perf_counter()
            results[name] = summarize(run(make, turns, questions))
            results[name]["seconds"] = round(time.perf_counter() - started, 1)
    print(report(results, questions))
    write_results(args.out, {"budgets": BUDGETS, "data": Path(args.data).name, "systems": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
