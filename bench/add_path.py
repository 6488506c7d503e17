"""The durable library add at scale, this checkout against another one, in CPU time.

For each size the store of `resolve_speed.py` (kept with `--stores`, else built) is copied
and opened by each checkout in turn, in its own process, `--rounds` times in alternation
(this one, the other, the other, this one, ...): every process sees a share of the same
moments of a machine that other work shares. Each process makes the first add (which builds
the dedup postings), then:

- `--adds` durable `Store.add`s with autosave (one change-log commit and fsync each): wall
  and CPU p50 (`time.process_time`, steadier than the clock beside other work);
- the dedup lookup alone (`Engine.similar`) on `--probes` new texts made as `add` makes
  them, none added: CPU per lookup over all of them, and how many would merge.

The two checkouts add the same texts to the same store, so the merges counted must agree.

    python bench/add_path.py [--sizes 1000,100000] [--against OTHER_CHECKOUT] [--rounds 2]
        [--adds 200] [--probes 300] [--stores DIR] [--data FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class _Probed(Exception):
    """Raised in place of the lookup's answer: the text is not added."""


def _probes(engine: Any, contents: list[str]) -> list[Any]:
    """The entries `add` would look up for `contents` (`store.changes.add` up to the lookup)."""
    from mnemod.domain.validation import NewEntry
    from mnemod.store import changes

    found: list[Any] = []
    looked_up = engine.similar

    def grab(entry: Any) -> None:
        found.append(entry)
        raise _Probed

    engine.similar = grab
    try:
        for content in contents:
            try:
                changes.add(engine, NewEntry(content=content))
            except _Probed:
                pass
    finally:
        engine.similar = looked_up
    return found


def measure(root: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """One process's figures for the checkout at `root` (its package imported first, so
    that the bench helpers run on it)."""
    sys.path.insert(0, str(root / "daemon"))
    import mnemod

    sys.path.insert(1, str(ROOT / "bench"))
    import resolve_speed as speed

    turns, _, _ = speed.corpus(Path(args.data))
    source = speed.memories(turns, random.Random(size))
    with tempfile.TemporaryDirectory(prefix="mnemod-addpath-") as name:
        folder = Path(name) / f"n{size}"
        kept = Path(args.stores) if args.stores else None
        speed.kept_build(folder, size, turns, source, kept)
        store = mnemod.open(folder, config=speed.CONFIG)
        try:
            when = speed.START + speed.STEP * size
            store.add(next(source), created_at=when)
            walls, cpus = [], []
            for index in range(args.adds):
                content = next(source)
                wall, cpu = time.perf_counter(), time.process_time()
                store.add(content, created_at=when + timedelta(seconds=index))
                cpus.append(time.process_time() - cpu)
                walls.append(time.perf_counter() - wall)
            engine = store.engine
            probes = _probes(engine, [next(source) for _ in range(args.probes)])
            cpu = time.process_time()
            merges = sum(engine.similar(entry) is not None for entry in probes)
            lookup_cpu = (time.process_time() - cpu) / max(1, len(probes))
        finally:
            store.close()
    return {
        "add_ms": round(statistics.median(walls) * 1000, 3),
        "add_cpu_ms": round(statistics.median(cpus) * 1000, 3),
        "lookup_cpu_ms": round(lookup_cpu * 1000, 3),
        "merges": merges,
        "root": str(root),
    }


def child(root: Path, size: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", str(root), "--sizes", str(size)]
    for flag in ("adds", "probes", "stores", "data"):
        value = getattr(args, flag)
        if value is not None:
            command += [f"--{flag}", str(value)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, cwd=root)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--against", default=None, help="another checkout to compare with")
    parser.add_argument("--rounds", type=int, default=2, help="processes per checkout")
    parser.add_argument("--adds", type=int, default=200, help="timed durable adds")
    parser.add_argument("--probes", type=int, default=300, help="lookups timed alone")
    parser.add_argument("--stores", default=None, help="kept stores (see resolve_speed.py)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "add_path.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.child is not None:
        print(json.dumps(measure(Path(args.child), sizes[0], args)))
        return 0
    roots = {"this": ROOT}
    if args.against is not None:
        roots["other"] = Path(args.against).resolve()
    load = os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    for size in sizes:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in roots}
        for turn in range(args.rounds):
            order = list(roots) if turn % 2 == 0 else list(reversed(roots))
            for name in order:
                runs[name].append(child(roots[name], size, args))
        rows.append({"size": size, "runs": runs})
    from results import write_results

    fields = ("add_ms", "add_cpu_ms", "lookup_cpu_ms")
    print(f"durable add p50 and lookup CPU, {args.adds} adds, {args.probes} lookups; {load=:.1f}")
    print(f"{'size':>8} {'checkout':>8} " + " ".join(f"{f:>22}" for f in fields) + "  merges")
    for row in rows:
        for name, runs in row["runs"].items():
            cells = []
            for field in fields:
                values = [run[field] for run in runs]
                cells.append(f"{min(values):>9} .. {max(values):<10}")
            merges = ",".join(str(run["merges"]) for run in runs)
            print(
                f"{row['size']:>8} {name:>8} " + " ".join(f"{c:>22}" for c in cells) + f"  {merges}"
            )
        if "other" in row["runs"]:
            for field in fields:
                ratios = [
                    this[field] / other[field]
                    for this, other in zip(row["runs"]["this"], row["runs"]["other"], strict=True)
                    if other[field]
                ]
                if ratios:
                    print(f"{'':>8} this/other {field}: {min(ratios):.2f} .. {max(ratios):.2f}")
    write_results(args.out, {"settings": vars(args), "load": load, "sizes": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
