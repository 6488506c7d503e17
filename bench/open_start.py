"""What opening a large store costs, old code against new: `mnemod.open` and the daemon's
start-up, in CPU time, each checkout in turn on the same store, several rounds.

Each `--code` checkout (default: this one) gets its own copy of the store `--store` (a
folder `scale.py --stores` or `footprint.py --keep` kept), opened once and checkpointed by
that checkout (`--as-is` skips it): each is measured on the checkpoint as it writes one.
Then, round after round, each checkout in turn: `mnemod.open` in a fresh interpreter (its
CPU time and wall time, the import not counted), and `mnemod run` (its own embedded
redis-server, on a fresh copy: the hot layer rebuilt) until its `daemon.running` line:
CPU time and wall time, and its resident memory `--settle` s later. On a machine other
work shares, CPU times are the steadier figure; the table gives each checkout's best and
median and the ratio of medians to the first checkout's.

    python bench/open_start.py --store DIR [--code OLD --code NEW] [--rounds 5]
        [--settle 5] [--as-is] [--opens-only] [--work DIR] [--out bench/results/open_start.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import footprint  # noqa: E402
import resolve_speed as speed  # noqa: E402
from results import write_results  # noqa: E402

# run in the checkout's interpreter: the open of the store at argv[1], as JSON on stdout
_OPEN = """
import json, sys, time
import mnemod, mnemod.api
config = json.loads(sys.argv[2])
cpu, wall = time.process_time(), time.perf_counter()
store = mnemod.open(sys.argv[1], config=config)
row = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}
if sys.argv[3] == "checkpoint":
    store.engine.checkpoint(force=True)
store.close()
print(json.dumps(row))
"""


def env_for(code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")} | speed.ENV
    env["PYTHONPATH"] = str(code / "daemon")
    return env


def python_of(code: Path) -> str:
    own = code / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def open_once(code: Path, folder: Path, then: str = "") -> dict[str, float]:
    args = [python_of(code), "-c", _OPEN, str(folder), json.dumps(speed.CONFIG), then]
    done = subprocess.run(args, env=env_for(code), capture_output=True, text=True, check=True)
    return dict(json.loads(done.stdout.splitlines()[-1]))


def start_once(code: Path, store: Path, settle: float) -> dict[str, float]:
    """`mnemod run` on a fresh copy of `store` (no Redis of its own yet: the hot layer is
    rebuilt, as on a first start) until it runs, then `settle` s; stopped with SIGTERM."""
    folder = store.with_name(store.name + "-run")
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(store, folder, ignore=speed.STORE_COPY_IGNORE)
    args = [python_of(code), "-m", "mnemod.cli.main", "run", "--data-dir", str(folder)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env_for(code), text=True
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if '"daemon.running"' in line:
                break
        else:
            raise RuntimeError(f"the daemon of {code} did not start on {folder}")
        row = {"wall": time.perf_counter() - started, "cpu": cpu_seconds(proc.pid)}
        # the rest of its log read meanwhile: a full pipe would hold the daemon up
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        time.sleep(settle)
        row["rss_mb"] = footprint.status_kb(proc.pid, "VmRSS") / 1024
        return row
    finally:
        proc.terminate()
        proc.wait(timeout=300)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def summary(samples: list[dict[str, float]], key: str) -> dict[str, float]:
    values = [s[key] for s in samples]
    return {"best": round(min(values), 3), "median": round(statistics.median(values), 3)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a kept store's folder")
    parser.add_argument("--code", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0, help="s after start, for RSS")
    parser.add_argument("--as-is", action="store_true", help="no checkpoint of each first")
    parser.add_argument("--work", type=Path, help="where the copies go (default: a temp dir)")
    parser.add_argument("--opens-only", action="store_true", help="no daemon start-ups")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "open_start.json"))
    args = parser.parse_args(argv)
    codes = [c.resolve() for c in args.code or [ROOT]]
    rows: dict[str, dict[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="mnemod-open-start-", dir=args.work) as name:
        folders = {}
        for number, code in enumerate(codes):
            folder = Path(name) / f"store-{number}"
            shutil.copytree(args.store, folder, ignore=speed.STORE_COPY_IGNORE)
            if not args.as_is:
                open_once(code, folder, "checkpoint")
            folders[code] = folder
            rows[str(code)] = {"open": [], "start": []}
        for round_ in range(args.rounds):
            for code in codes:
                row = rows[str(code)]
                row["open"].append(open_once(code, folders[code]))
                if not args.opens_only:
                    row["start"].append(start_once(code, folders[code], args.settle))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    table: list[dict[str, Any]] = []
    for code in codes:
        row = rows[str(code)]
        table.append(
            {
                "code": str(code),
                "open_cpu_s": summary(row["open"], "cpu"),
                "open_wall_s": summary(row["open"], "wall"),
            }
        )
        if row["start"]:
            table[-1]["start_cpu_s"] = summary(row["start"], "cpu")
            table[-1]["start_wall_s"] = summary(row["start"], "wall")
            table[-1]["rss_mb"] = summary(row["start"], "rss_mb")
    first = table[0]
    columns = ("open_cpu_s", "open_wall_s", "start_cpu_s", "start_wall_s", "rss_mb")
    if args.opens_only:
        columns = columns[:2]
    print(f"{'checkout':<28}" + "".join(f"{c + ' best/med':>24}" for c in columns))
    for row in table:
        cells = "".join(f"{row[c]['best']:>12}{row[c]['median']:>12}" for c in columns)
        print(f"{Path(row['code']).name:<28}{cells}")
        ratios = {c: round(row[c]["median"] / first[c]["median"], 2) for c in columns}
        row["median_ratio"] = ratios
        print(f"{'  ratio of medians':<28}" + "".join(f"{ratios[c]:>24}" for c in columns))
    load = os.getloadavg()
    write_results(args.out, {"store": str(args.store), "rounds": args.rounds, "load": load,
                             "rows": table, "samples": rows})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
