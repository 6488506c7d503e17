"""What the daemon costs to hold memories: start-up time and resident memory by size.

For each size, the corpus of `resolve_speed.py` (LoCoMo turns varied, or synthetic
sentences) is written to a fresh folder through `Store.add`, then `mnemod run` is started
on it as a user starts it (its own embedded redis-server). `start_s` is the time until the
daemon says it is running (index read, entries indexed for resolve, hot layer rebuilt);
then, after `--settle` seconds, the resident memory of the daemon (`rss_mb`, and its peak
`peak_mb`) and of its redis-server (which holds only the hot items, `hot.max_entries`).
`per_entry_kb` is the daemon's resident memory above the empty daemon's, per entry: what
sizing a memory limit (systemd `MemoryMax`, a container's `mem_limit`) needs.

`--keep DIR` keeps each built store in DIR (by size and corpus) and measures a copy of it
on later runs instead of building it again (a 100,000-entry store takes minutes to build):
run from two checkouts with the same DIR, the two are measured on the very same files.

    python bench/footprint.py [--data PATH] [--sizes 0,1000,10000,100000] [--settle 1]
        [--keep DIR] [--out bench/results/footprint.json]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import resolve_speed as speed  # noqa: E402
from results import write_results  # noqa: E402


def status_kb(pid: int, field: str) -> int:
    """A `/proc/<pid>/status` field in kB (VmRSS: resident now, VmHWM: its peak)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"{field} not in /proc/{pid}/status")


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def measure(size: int, turns: list[str], settle: float, keep: Path | None) -> dict[str, Any]:
    row: dict[str, Any] = {"entries": size}
    with tempfile.TemporaryDirectory(prefix="mnemod-footprint-") as name:
        folder = Path(name) / "store"
        speed.kept_build(folder, size, turns, speed.memories(turns, random.Random(size)), keep)
        with speed.daemon(folder) as (_, pid, ready):
            time.sleep(settle)
            row["start_s"] = round(ready, 2)
            row["rss_mb"] = round(status_kb(pid, "VmRSS") / 1024, 1)
            row["peak_mb"] = round(status_kb(pid, "VmHWM") / 1024, 1)
            redis_kb = sum(status_kb(child, "VmRSS") for child in children(pid))
            row["redis_mb"] = round(redis_kb / 1024, 1)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--sizes", default="0,1000,10000,100000")
    parser.add_argument("--settle", type=float, default=1.0, help="seconds after start")
    parser.add_argument("--keep", type=Path, help="folder of built stores, reused when there")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "footprint.json"))
    args = parser.parse_args(argv)
    sizes = sorted({0, *(int(s) for s in args.sizes.split(","))})
    turns, _, label = speed.corpus(Path(args.data))
    rows = [measure(size, turns, args.settle, args.keep) for size in sizes]
    empty = rows[0]["rss_mb"]
    for row in rows[1:]:
        row["per_entry_kb"] = round((row["rss_mb"] - empty) * 1024 / row["entries"], 2)

    print(f"daemon footprint, corpus: {label}")
    columns = ("entries", "start_s", "rss_mb", "peak_mb", "redis_mb", "per_entry_kb")
    print("".join(f"{c:>14}" for c in columns))
    for row in rows:
        print("".join(f"{row.get(c, '-')!s:>14}" for c in columns))
    write_results(args.out, {"corpus": label, "settle_s": args.settle, "sizes": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
