"""The image's entry point, docker/entrypoint.sh, run with sh as the image runs it.

A data folder the container's user cannot write (a host folder bind-mounted on /data with
another owner) gives one line and exit code 2 before `mnemod run` starts, not a traceback
from deep in the start-up; everything else is exec'd unchanged. Root writes anywhere, so as
root the script runs without the capabilities that let it (as uid 10001 runs in the image).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
DROP = "-dac_override,-dac_read_search"

pytestmark = pytest.mark.process  # runs sh and the CLI


def run_entrypoint(data_dir: Path, *command: str) -> subprocess.CompletedProcess[str]:
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("as root this test needs setpriv (util-linux) to drop CAP_DAC_OVERRIDE")
        prefix = [setpriv, f"--inh-caps={DROP}", f"--bounding-set={DROP}"]
    env = {
        # the venv's bin first: `mnemod` there, as on the image's PATH
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MNEMOD_DATA_DIR": str(data_dir),
    }
    return subprocess.run(
        [*prefix, "sh", str(ENTRYPOINT), *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_unwritable_data_folder_stops_mnemod_run_with_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o555)
    try:
        result = run_entrypoint(data, "mnemod", "run")
    finally:
        data.chmod(0o755)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"mnemod: cannot write data folder {data} (owned by uid ")
    assert f"chown -R {os.getuid()}:{os.getuid()}" in lines[0]


def test_other_commands_run_whatever_the_data_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o555)
    try:
        result = run_entrypoint(data, "sh", "-c", "echo agent; exit 7")
    finally:
        data.chmod(0o755)
    assert (result.returncode, result.stdout, result.stderr) == (7, "agent\n", "")


def test_mnemod_run_on_a_writable_folder_is_execd(tmp_path: Path) -> None:
    result = run_entrypoint(tmp_path, "mnemod", "run", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: mnemod run")
