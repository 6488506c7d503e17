"""`mnemod list` from the listing file against the read of the checkpoint, and what writing
the listing adds to a checkpoint, on a copy of a kept store.

The store is copied and opened with the library; then:

- checkpoints (`--checkpoints`, a few adds before each), in CPU time (`time.process_time`)
  and wall: the whole write, and of it the listing's rows and its file. The first one after
  the open, with no listing on disk, reads every entry's row from the old checkpoint; the
  rest take the unchanged entries' rows from the listing written before; one more after
  the store is opened again takes them from the listing on disk;
- `mnemod list` as a user runs it (a process each, its output to a file), `--rounds` times
  in alternation with the listing file (new) and without it (old: the read of the
  checkpoint as before), CPU of the child (user + system) and wall; the two outputs must be
  byte-identical. Once on the closed store, once beside the open store holding records
  after its checkpoint (adds, an update, a removal, accesses).

    python bench/listing.py --store KEPT_STORE_FOLDER [--rounds 4] [--checkpoints 4]
        [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _timed(owner: Any, name: str, spent: list[float]) -> None:
    """Wrap `owner.name` to add each call's CPU seconds to `spent`."""
    inner = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            spent.append(time.process_time() - start)

    setattr(owner, name, wrapper)


def checkpoints(store: Any, count: int) -> list[dict[str, float]]:
    """`count` forced checkpoints, a few adds before each: CPU and wall of each, and the
    listing's share of its CPU."""
    from mnemod.files.l3_store import IndexWriter

    spent: list[float] = []
    _timed(IndexWriter, "_listing_rows", spent)
    _timed(IndexWriter, "_write_listing", spent)
    found = []
    for n in range(count):
        for k in range(5):
            store.add(f"alpha{n}x{k} beta{n}y{k} gamma{n}z{k} delta{n}w{k}", type="context")
        spent.clear()
        cpu, wall = time.process_time(), time.perf_counter()
        store.engine.checkpoint(force=True)
        found.append(
            {
                "cpu_s": time.process_time() - cpu,
                "wall_s": time.perf_counter() - wall,
                "listing_cpu_s": sum(spent),
            }
        )
    return found


def run_list(folder: Path, out: Path) -> tuple[float, float]:
    """(child CPU s, wall s) of one `mnemod list`, its output to `out`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    with out.open("wb") as handle:
        subprocess.run(
            [sys.executable, "-m", "mnemod.cli.main", "list", "--data-dir", str(folder)],
            stdout=handle,
            check=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")},
        )
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return cpu, wall


def compare(folder: Path, rounds: int, work: Path) -> dict[str, Any]:
    """`list` with and without the listing file, alternately; the outputs compared."""
    listing = folder / "default/l3/listing.json"
    aside = work / "listing.aside"
    times: dict[str, list[tuple[float, float]]] = {"old": [], "new": []}
    outputs: dict[str, bytes] = {}
    for n in range(rounds):
        for name in ("old", "new") if n % 2 == 0 else ("new", "old"):
            if name == "old":
                shutil.move(listing, aside)
            out = work / f"{name}.out"
            try:
                times[name].append(run_list(folder, out))
            finally:
                if name == "old":
                    shutil.move(aside, listing)
            outputs[name] = out.read_bytes()
    row: dict[str, Any] = {"identical": outputs["old"] == outputs["new"]}
    row["lines"] = outputs["new"].count(b"\n")
    for name, found in times.items():
        cpus, walls = [c for c, _ in found], [w for _, w in found]
        row[name] = {
            "cpu_p50_s": statistics.median(cpus),
            "cpu_range_s": [min(cpus), max(cpus)],
            "wall_p50_s": statistics.median(walls),
            "wall_range_s": [min(walls), max(walls)],
        }
    row["cpu_ratio"] = row["new"]["cpu_p50_s"] / row["old"]["cpu_p50_s"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a kept store's data folder")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--checkpoints", type=int, default=4)
    parser.add_argument("--out", type=Path)
    a = parser.parse_args()
    sys.path.insert(0, str(ROOT / "daemon"))
    import mnemod

    with tempfile.TemporaryDirectory() as temp:
        work = Path(temp)
        folder = work / "data"
        shutil.copytree(a.store, folder)
        opened = time.perf_counter()
        store = mnemod.open(folder)
        result: dict[str, Any] = {"open_s": time.perf_counter() - opened}
        result["checkpoints"] = checkpoints(store, a.checkpoints)
        store.close()
        result["closed"] = compare(folder, a.rounds, work)
        store = mnemod.open(folder)
        result["checkpoint_after_reopen"] = checkpoints(store, 1)[0]
        made = [store.add(f"zeta{n} omicron{n * 7} kappa{n * 13} sigma{n * 17}") for n in range(20)]
        store.update(made[0].id, content="bench listing: updated after the checkpoint")
        store.remove(made[1].id)
        store.access(made[2].id)
        result["records_after"] = compare(folder, a.rounds, work)
        store.close()
    table(result)
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")


def table(result: dict[str, Any]) -> None:
    print(f"open {result['open_s']:.2f} s")
    for n, c in enumerate(result["checkpoints"]):
        print(
            f"checkpoint {n}: {c['cpu_s']:.3f} s CPU ({c['wall_s']:.3f} s wall), "
            f"of it the listing {c['listing_cpu_s']:.3f} s CPU"
        )
    c = result["checkpoint_after_reopen"]
    print(
        f"checkpoint after reopening: {c['cpu_s']:.3f} s CPU ({c['wall_s']:.3f} s wall), "
        f"of it the listing {c['listing_cpu_s']:.3f} s CPU"
    )
    for name in ("closed", "records_after"):
        row = result[name]
        old, new = row["old"], row["new"]
        print(
            f"list, {name}: old {old['cpu_p50_s']:.3f} s CPU {old['cpu_range_s']} "
            f"wall {old['wall_p50_s']:.3f}; new {new['cpu_p50_s']:.3f} s CPU "
            f"{new['cpu_range_s']} wall {new['wall_p50_s']:.3f}; ratio {row['cpu_ratio']:.2f}; "
            f"identical {row['identical']} ({row['lines']} lines)"
        )


if __name__ == "__main__":
    main()
