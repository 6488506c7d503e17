"""Dedup quality on MRPC sentence pairs: is keyword Jaccard ≥ 0.55 a sensible default?

Each pair is called a duplicate when the Jaccard of its two keyword sets reaches the
threshold. Two ways of making the sets, in one run:
- `keywords`: mnemod's own `extract_keywords` (casefold, stopwords out, light stemming) —
  what dedup on add and GC use;
- `words`: plain lowercase words, nothing removed (the comparison).
Precision, recall and F1 against MRPC's paraphrase label, at the configured threshold and
at 0.30–0.80. MRPC pairs are hard by construction (many non-paraphrases share most words),
so the absolute numbers are low; the curve shows where the threshold trades recall for
precision. For memory dedup a false merge loses information, so precision matters more.

    python bench/dedup.py [--data PATH] [--out bench/results/dedup.json]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

from mnemod.config import DedupConfig  # noqa: E402
from mnemod.domain.keywords import extract_keywords, jaccard  # noqa: E402
from results import write_results  # noqa: E402

THRESHOLDS = tuple(round(0.30 + 0.05 * i, 2) for i in range(11))
_WORD = re.compile(r"\w+")


def plain_words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def load(path: Path) -> list[tuple[str, str, bool]]:
    pairs = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row.get("kind") == "pair":
                pairs.append((row["a"], row["b"], bool(row["duplicate"])))
    return pairs


def scores(
    pairs: Sequence[tuple[str, str, bool]], words: Callable[[str], list[str]]
) -> list[float]:
    return [jaccard(words(a), words(b)) for a, b, _ in pairs]


def confusion(
    similarity: Sequence[float], labels: Sequence[bool], threshold: float
) -> dict[str, Any]:
    tp = fp = fn = 0
    for value, duplicate in zip(similarity, labels, strict=True):
        called = value >= threshold
        tp += called and duplicate
        fp += called and not duplicate
        fn += duplicate and not called
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "threshold": threshold,
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "merged": tp + fp,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "mrpc-train.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "dedup.json"))
    args = parser.parse_args(argv)
    pairs = load(Path(args.data))
    labels = [duplicate for _, _, duplicate in pairs]
    default = DedupConfig().threshold
    thresholds = sorted({*THRESHOLDS, default})
    results: dict[str, Any] = {}
    for name, words in (("keywords", extract_keywords), ("words", plain_words)):
        similarity = scores(pairs, words)
        sweep = [confusion(similarity, labels, t) for t in thresholds]
        best = max(sweep, key=lambda row: row["f1"])
        results[name] = {"sweep": sweep, "best_f1": best}
    positives = sum(labels)
    print(f"MRPC train: {len(pairs)} pairs, {positives} paraphrases ({positives / len(pairs):.1%})")
    base = confusion([1.0] * len(labels), labels, 0.0)
    print(f"configured threshold: {default}; calling every pair a duplicate gives", end=" ")
    print(f"P {base['precision']:.3f} R {base['recall']:.3f} F1 {base['f1']:.3f}")
    print(f"{'threshold':>9}" + "".join(f"{n + ' P/R/F1':>24}" for n in results))
    for index, threshold in enumerate(thresholds):
        cells = []
        for table in results.values():
            row = table["sweep"][index]
            cells.append(f"{row['precision']:.3f}/{row['recall']:.3f}/{row['f1']:.3f}")
        mark = "  <- default" if threshold == default else ""
        print(f"{threshold:>9.2f}" + "".join(f"{c:>24}" for c in cells) + mark)
    for name, table in results.items():
        best = table["best_f1"]
        print(f"best F1 {name}: {best['f1']:.3f} at {best['threshold']:.2f}")
    payload = {
        "pairs": len(pairs),
        "positives": positives,
        "default": default,
        "all_duplicates": base,
        **results,
    }
    write_results(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
