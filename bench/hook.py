"""The Claude Code hook's wall time per prompt, as Claude Code runs it, at 1k, 10k and 100k
memories: without a daemon, with one, and with one that cannot answer (stopped with
SIGSTOP, as a long maintenance run would keep it from the rpc stream).

Each call is `mnemod hook claude-code` as a subprocess (the venv's executable, the hook's
JSON on stdin, a session id), so Python's start-up is included, as Claude Code pays it.
The store is built as bench/resolve_speed.py builds it (LoCoMo turns varied, or synthetic
sentences), with an L1 file of three standing items. For each case: the median and the
slowest of `--calls` calls, and how many answered from the L1 files alone (`l1_only`).
Without a daemon the first call measures how long the files take to open; a later call
that knows it cannot make the deadline answers from the L1 files at once.

    python bench/hook.py [--sizes 1000,10000,100000] [--calls 5] [--deadline 5]
                         [--data locomo-dev.jsonl] [--out bench/results/hook.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import resolve_speed as rs
from results import write_results

ROOT = Path(__file__).resolve().parent.parent
MNEMOD = Path(sys.executable).parent / "mnemod"
L1 = """
[[memory]]
content = "The user's name is Mei Lin."

[[memory]]
content = "Answer in British English."

[[memory]]
content = "Never paste secrets into chat."
"""


def call(project: Path, prompt: str, deadline: float) -> tuple[float, bool, str]:
    """Seconds, whether the answer was the L1 files alone, stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")} | rs.ENV
    env["CLAUDE_PROJECT_DIR"] = str(project)
    payload = {"session_id": "bench", "prompt": prompt, "cwd": str(project)}
    started = time.perf_counter()
    done = subprocess.run(
        [str(MNEMOD), "hook", "claude-code", "--deadline", f"{deadline:g}"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        timeout=120,
        check=False,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0 or not done.stdout:
        raise RuntimeError(f"hook failed ({done.returncode}): {done.stderr}")
    return seconds, "L1 files alone" in done.stderr, done.stderr.strip()


def series(project: Path, prompts: list[str], calls: int, deadline: float) -> dict[str, Any]:
    times, l1_only, notes = [], 0, set()
    for index in range(calls):
        seconds, partial, note = call(project, prompts[index % len(prompts)], deadline)
        times.append(seconds)
        l1_only += partial
        if note:
            notes.add(note.split(": answered")[0])
    return {
        "p50_s": round(statistics.median(times), 3),
        "max_s": round(max(times), 3),
        "first_s": round(times[0], 3),
        "l1_only": l1_only,
        "calls": calls,
        "notes": sorted(notes),
    }


def run_size(
    size: int, calls: int, deadline: float, turns: list[str], prompts: list[str]
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="mnemod-hook-bench-") as tmp:
        project = Path(tmp)
        data = project / ".mnemod"
        build_s = rs.build(data, size, rs.memories(turns, random.Random(size)))
        (data / "l1").mkdir()
        (data / "l1" / "standing.toml").write_text(L1)
        row: dict[str, Any] = {"size": size, "build_s": round(build_s, 1)}
        row["no_daemon"] = series(project, prompts, calls, deadline)
        with rs.daemon(data) as (_url, pid, start_s):
            row["daemon_start_s"] = round(start_s, 1)
            row["daemon"] = series(project, prompts, calls, deadline)
            os.kill(pid, signal.SIGSTOP)
            try:
                row["daemon_stuck"] = series(project, prompts, calls, deadline)
            finally:
                os.kill(pid, signal.SIGCONT)
        return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--deadline", type=float, default=5.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "hook.json"))
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    args = parser.parse_args(argv)
    turns, prompts, label = rs.corpus(Path(args.data))
    rows = []
    print(f"corpus: {label}; deadline {args.deadline:g} s; {args.calls} calls per case")
    print(f"{'size':>7} {'case':<13} {'p50 s':>7} {'max s':>7} {'first s':>8} {'L1 only':>8}")
    for size in (int(s) for s in args.sizes.split(",")):
        row = run_size(size, args.calls, args.deadline, turns, prompts)
        rows.append(row)
        for case in ("no_daemon", "daemon", "daemon_stuck"):
            r = row[case]
            print(
                f"{size:>7} {case:<13} {r['p50_s']:>7.2f} {r['max_s']:>7.2f} "
                f"{r['first_s']:>8.2f} {r['l1_only']:>4}/{r['calls']}"
            )
    write_results(args.out, {"deadline_s": args.deadline, "corpus": label, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
