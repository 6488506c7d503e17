"""Idle CPU of a running daemon: start `mnemod run` on its embedded Redis in a temp folder
with the default config, let it settle, then read utime+stime from /proc/<pid>/stat over a
quiet window. Prints CPU seconds used and the share of one core (Linux only).

    python bench/idle_cpu.py [--seconds 10] [--settle 3] [--out bench/results/idle_cpu.json]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results import write_results

ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the idle window")
    parser.add_argument("--settle", type=float, default=3.0, help="wait after start-up")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "idle_cpu.json"))
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")}
    env["MNEMOD_LOG_FORMAT"] = "json"
    with tempfile.TemporaryDirectory(prefix="mnemod-idle-") as folder:
        cmd = [sys.executable, "-m", "mnemod.cli.main", "run", "--data-dir", folder]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert proc.stdout is not None
            print(proc.stdout.readline().strip())
            time.sleep(args.settle)  # start-up (imports, rebuild) is not idle time
            before, started = cpu_seconds(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            used, wall = cpu_seconds(proc.pid) - before, time.monotonic() - started
            print(
                f"idle CPU over {wall:.1f} s: {used:.3f} s of CPU = {100 * used / wall:.2f} % "
                f"of one core (pid {proc.pid})"
            )
            percent = round(100 * used / wall, 3)
            row = {"seconds": round(wall, 2), "cpu_s": round(used, 4), "percent": percent}
            write_results(args.out, row)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    return code


if __name__ == "__main__":
    sys.exit(main())
