"""Dedup quality on MRPC sentence pairs: precision, recall and F1 of "these two are one memory".

Each pair is judged by `domain.dedup.compare`, as dedup on add and GC judge two entries: the
plain keyword Jaccard floor, the score (rare words weigh more, words that say one thing in
another form read as one: inflections, synonyms, acronyms, compounds; times the balance of
lengths; less the wording, clause and figures penalties) against the threshold, then the
guards. The sentences of the file are the store: a word's weight comes from how many other
sentences hold it. Printed, and written as JSON:
- the defaults, on the whole file and on a fixed held-out part (pairs whose id hashes into
  the last 3 of 10 buckets: the defaults were chosen on the other 7), so that a setting
  that only fits this file shows;
- each default technique taken out, and each optional one put in (what each earns), also
  with the threshold re-chosen so that recall stays at the defaults', on all pairs and on
  each split (the fair comparison: a technique that only moves along the precision/recall
  curve earns nothing there; one that earns on one split only fits that split);
- the old rule (keyword Jaccard ≥ 0.55 alone) and a sweep of the threshold;
- with `--splits N`, the defaults on N random 30 % parts of the pairs (seeded): mean,
  spread and worst of precision and recall, and how many parts reach P ≥ 0.92 with
  R ≥ 0.55 (what other pairs of the same kind may give);
- the cost per add: `Lookup.similar` with the first sentence of each pair stored, the
  second added (every add meets its near-duplicate; the wording is read for those that
  would merge), and with the first sentences of half the pairs stored and the second of
  the other half added (an add with no near-duplicate, the common case).
For memory dedup a false merge loses a memory, a missed one costs a few tokens: precision
matters more than recall.

    python bench/dedup.py [--data PATH] [--splits N] [--out bench/results/dedup.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import sys
import time
import zlib
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

from mnemod.config import DedupConfig  # noqa: E402
from mnemod.domain.dedup import (  # noqa: E402
    OPTIONAL_TECHNIQUES,
    TECHNIQUES,
    PairWeights,
    Side,
    Similarity,
    compare,
)
from mnemod.domain.keywords import extract_keywords  # noqa: E402
from mnemod.domain.model import Entry  # noqa: E402
from mnemod.store.lookup import Lookup  # noqa: E402
from mnemod.tokens import token_counter  # noqa: E402
from results import write_results  # noqa: E402

THRESHOLDS = tuple(round(0.30 + 0.05 * i, 2) for i in range(11))
HELD_OUT = 3  # of 10 buckets
SPLITS = (("all", None), ("tuned_on", False), ("held_out", True))  # name, held out
Pair = tuple[str, str, bool, bool]  # a, b, duplicate, held out


def load(path: Path) -> list[Pair]:
    pairs = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row.get("kind") == "pair":
                held = zlib.crc32(str(row["id"]).encode()) % 10 >= 10 - HELD_OUT
                pairs.append((row["a"], row["b"], bool(row["duplicate"]), held))
    return pairs


class Corpus:
    """Every distinct sentence as one entry of a store: keyword sets, lengths, frequencies."""

    def __init__(self, pairs: Sequence[Pair]) -> None:
        count = token_counter().count
        self.sides: dict[str, Side] = {}
        for a, b, _, _ in pairs:
            for text in (a, b):
                if text not in self.sides:
                    self.sides[text] = Side.read(
                        frozenset(extract_keywords(text)), text, count(text)
                    )
        self.frequency = Counter(w for side in self.sides.values() for w in side.words)

    def verdict(
        self, a: str, b: str, config: DedupConfig, techniques: Collection[str]
    ) -> Similarity:
        left, right = self.sides[a], self.sides[b]

        def holding(word: str) -> int:
            return self.frequency[word] - (word in left.words) - (word in right.words)

        others = len(self.sides) - (1 if a == b else 2)
        return compare(left, right, config, PairWeights(holding, others), techniques)

    def judge(self, a: str, b: str, config: DedupConfig, techniques: Collection[str]) -> bool:
        return self.verdict(a, b, config, techniques).merges


def confusion(called: Sequence[bool], pairs: Sequence[Pair]) -> dict[str, Any]:
    tp = sum(1 for c, p in zip(called, pairs, strict=True) if c and p[2])
    fp = sum(1 for c, p in zip(called, pairs, strict=True) if c and not p[2])
    fn = sum(1 for c, p in zip(called, pairs, strict=True) if p[2] and not c)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": round(precision, 4), "recall": round(recall, 4), "f1": round(f1, 4),
            "merged": tp + fp}  # fmt: skip


def evaluate(
    corpus: Corpus, pairs: Sequence[Pair], config: DedupConfig, techniques: Collection[str]
) -> dict[str, Any]:
    called = [corpus.judge(a, b, config, techniques) for a, b, _, _ in pairs]
    held = [i for i, p in enumerate(pairs) if p[3]]
    tuned = [i for i, p in enumerate(pairs) if not p[3]]
    return {
        "all": confusion(called, pairs),
        "tuned_on": confusion([called[i] for i in tuned], [pairs[i] for i in tuned]),
        "held_out": confusion([called[i] for i in held], [pairs[i] for i in held]),
    }


def precision_at_recall(
    corpus: Corpus,
    pairs: Sequence[Pair],
    config: DedupConfig,
    techniques: Collection[str],
    recall: dict[str, float],
) -> dict[str, dict[str, Any]]:
    """The variant with its threshold re-chosen, on all pairs and on each split: the best
    precision at any threshold where its recall there is still ≥ the defaults' (`recall`,
    by split): what a technique earns at the defaults' operating point. Every score is a
    possible threshold, so a variant is not judged by a grid."""
    floor_only = dataclasses.replace(config, threshold=1e-9)
    scored = []
    for a, b, duplicate, held in pairs:
        left, right = corpus.sides[a], corpus.sides[b]
        verdict = corpus.verdict(a, b, floor_only, techniques)
        contained = "containment" in techniques and (
            left.words <= right.words or right.words <= left.words
        )
        if verdict.merges:  # a subset merges whatever its score
            scored.append((math.inf if contained else verdict.score, duplicate, held))
    scored.sort(key=lambda row: -row[0])
    return {
        split: _best_cut(
            [(score, dup) for score, dup, held in scored if split == "all" or held == want],
            sum(1 for p in pairs if p[2] and (split == "all" or p[3] == want)),
            recall[split],
        )
        for split, want in SPLITS
    }


def _best_cut(
    scored: Sequence[tuple[float, bool]], positives: int, recall: float
) -> dict[str, Any]:
    """The best precision over the cuts of `scored` (best score first) whose recall is ≥
    `recall`."""
    best: dict[str, Any] = {"threshold": None, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    tp = fp = 0
    for i, (score, duplicate) in enumerate(scored):
        tp, fp = tp + duplicate, fp + (not duplicate)
        if i + 1 < len(scored) and scored[i + 1][0] == score:
            continue  # a threshold calls every pair of the same score
        precision, got = tp / (tp + fp), tp / positives
        if got >= recall and precision > best["precision"] and score < math.inf:
            f1 = 2 * precision * got / (precision + got)
            best = {"threshold": round(score, 4), "precision": round(precision, 4),
                    "recall": round(got, 4), "f1": round(f1, 4), "merged": tp + fp}  # fmt: skip
    return best


def random_parts(
    corpus: Corpus, pairs: Sequence[Pair], config: DedupConfig, count: int, seed: int = 7
) -> dict[str, Any]:
    """The defaults on `count` random 30 % parts of the pairs: what the figures on the
    whole file may be on other pairs of the same kind."""
    called = [corpus.judge(a, b, config, TECHNIQUES) for a, b, _, _ in pairs]
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rows = []
    for _ in range(count):
        rng.shuffle(order)
        part = order[int(len(order) * 0.7) :]
        rows.append(confusion([called[i] for i in part], [pairs[i] for i in part]))
    summary: dict[str, Any] = {"parts": count, "seed": seed}
    for key in ("precision", "recall"):
        values = [row[key] for row in rows]
        summary[key] = {"mean": round(statistics.mean(values), 4),
                        "sd": round(statistics.pstdev(values), 4), "min": min(values)}  # fmt: skip
    summary["met"] = sum(1 for r in rows if r["precision"] >= 0.92 and r["recall"] >= 0.55)
    return summary


def variants(config: DedupConfig) -> list[tuple[str, DedupConfig, frozenset[str]]]:
    rows = [("defaults", config, TECHNIQUES)]
    rows += [(f"without {name}", config, TECHNIQUES - {name}) for name in sorted(TECHNIQUES)]
    rows += [(f"with {name}", config, TECHNIQUES | {name}) for name in sorted(OPTIONAL_TECHNIQUES)]
    old = dataclasses.replace(config, threshold=0.55, floor=0.55)
    rows.append(("old rule: Jaccard >= 0.55", old, frozenset()))
    return rows


def add_cost(
    pairs: Sequence[Pair], corpus: Corpus, config: DedupConfig, apart: bool = False
) -> dict[str, Any]:
    """CPU time of `Lookup.similar` per add, as dedup on add runs it: the first sentence of
    every pair stored, the second of each added (best of 3 rounds). `apart`: the first
    sentences of the even pairs stored, the second of the odd ones added."""
    at = datetime(2026, 1, 1, tzinfo=UTC)

    def entry(entry_id: str, text: str) -> Entry:
        side = corpus.sides[text]
        return Entry(entry_id, "context", text, at, at, at, None,
                     keywords=sorted(side.words), tokens=side.length)  # fmt: skip

    stored = pairs[::2] if apart else pairs
    added = pairs[1::2] if apart else pairs
    entries: dict[str, Entry] = {}
    lookup = Lookup()
    for a in dict.fromkeys(a for a, _, _, _ in stored):
        kept = entries[f"E{len(entries):06d}"] = entry(f"E{len(entries):06d}", a)
        lookup.add(kept)
    probes = [entry(f"P{i:06d}", b) for i, (_, b, _, _) in enumerate(added)]
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        found = sum(1 for probe in probes if lookup.similar(probe, entries, config) is not None)
        best = min(best, time.process_time() - started)
    return {"store": len(entries), "probes": len(probes), "matched": found,
            "us_per_add": round(best / len(probes) * 1e6, 1)}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "mrpc-train.jsonl"))
    parser.add_argument("--splits", type=int, default=0, help="random 30 %% parts to judge on")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "dedup.json"))
    args = parser.parse_args(argv)
    pairs = load(Path(args.data))
    corpus = Corpus(pairs)
    config = DedupConfig()
    positives = sum(1 for p in pairs if p[2])
    held = sum(1 for p in pairs if p[3])
    print(f"MRPC: {len(pairs)} pairs, {positives} paraphrases ({positives / len(pairs):.1%}); "
          f"{held} held out; defaults: floor {config.floor}, threshold {config.threshold}, "
          f"techniques {', '.join(sorted(TECHNIQUES))}")  # fmt: skip
    table: dict[str, Any] = {}
    at_recall: dict[str, float] = {}
    print(f"{'':28}{'all P/R/F1':>20}{'tuned-on P/R/F1':>20}{'held-out P/R/F1':>20}"
          f"{'P at equal R: all/tuned/held':>32}")  # fmt: skip
    for name, variant, techniques in variants(config):
        row = table[name] = evaluate(corpus, pairs, variant, techniques)
        if name == "defaults":
            at_recall = {split: row[split]["recall"] for split, _ in SPLITS}
        same = row["at_default_recall"] = precision_at_recall(
            corpus, pairs, variant, techniques, at_recall
        )
        cells = [f"{c['precision']:.3f}/{c['recall']:.3f}/{c['f1']:.3f}"
                 for key, c in row.items() if key != "at_default_recall"]  # fmt: skip
        retuned = "/".join(
            f"{c['precision']:.3f}" if c["threshold"] is not None else "-" for c in same.values()
        )
        print(f"{name:28}" + "".join(f"{c:>20}" for c in cells) + f"{retuned:>32}")
    sweep = []
    print("threshold sweep at the defaults (all pairs):")
    for threshold in sorted({*THRESHOLDS, config.threshold}):
        row = evaluate(corpus, pairs, dataclasses.replace(config, threshold=threshold), TECHNIQUES)
        sweep.append({"threshold": threshold, **row["all"]})
        c = row["all"]
        mark = "  <- default" if threshold == config.threshold else ""
        print(f"{threshold:>9.3f}  {c['precision']:.3f}/{c['recall']:.3f}/{c['f1']:.3f}{mark}")
    parts = random_parts(corpus, pairs, config, args.splits) if args.splits else None
    if parts:
        p, r = parts["precision"], parts["recall"]
        print(f"defaults on {args.splits} random 30 % parts: P {p['mean']:.3f} ± {p['sd']:.3f} "
              f"(worst {p['min']:.3f}), R {r['mean']:.3f} ± {r['sd']:.3f} (worst {r['min']:.3f}); "
              f"P >= 0.92 with R >= 0.55 on {parts['met']}")  # fmt: skip
    cost = add_cost(pairs, corpus, config)
    old = add_cost(pairs, corpus, dataclasses.replace(config, threshold=0.55, floor=0.55))
    apart = add_cost(pairs, corpus, config, apart=True)
    print(f"Lookup.similar per add, {cost['store']} entries stored: {cost['us_per_add']} µs "
          f"at the defaults ({cost['matched']} matched); "
          f"{old['us_per_add']} µs at floor 0.55; with no near-duplicate stored "
          f"({apart['store']} entries): {apart['us_per_add']} µs")  # fmt: skip
    payload = {
        "pairs": len(pairs),
        "positives": positives,
        "held_out": held,
        "defaults": dataclasses.asdict(config),
        "techniques": sorted(TECHNIQUES),
        "variants": table,
        "sweep": sweep,
        "random_parts": parts,
        "add_cost": {"defaults": cost, "floor_0.55": old, "no_near_duplicate": apart},
    }
    write_results(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
