"""The install paths of docs/operations.md, run for real: `python -m build` makes a wheel that
installs into a fresh venv and runs; `scripts/install-system` lays out the systemd install
(user, venv, /etc/mnemod, data folder, unit) under `--root`, keeps what an operator
changed, upgrades, and uninstalls keeping the data unless `--purge`.

Both need the package's dependencies from the package index (as any install does) and take
tens of seconds: marked slow.
"""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from mnemod import __version__

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.process]


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` of the checkout: an sdist, and a wheel built from it."""
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--outdir", out, ROOT)
    (built,) = out.glob(f"mnemod-{__version__}-py3-none-any.whl")
    assert list(out.glob(f"mnemod-{__version__}.tar.gz"))
    return built


def test_the_wheel_installs_into_a_fresh_venv_and_runs(wheel: Path, tmp_path: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "mnemod/py.typed" in names and "mnemod/cli/main.py" in names
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    venv.create(tmp_path / "venv", with_pip=True)
    bin_dir = tmp_path / "venv" / "bin"
    run(bin_dir / "pip", "install", "--quiet", "--disable-pip-version-check", wheel)
    assert run(bin_dir / "mnemod", "--version", cwd=tmp_path).stdout == f"mnemod {__version__}\n"
    assert "--quiet" in run(bin_dir / "mnemod", "doctor", "--help", cwd=tmp_path).stdout
    hook = run(bin_dir / "mnemod", "hook", "install", "claude-code", "--dry-run", cwd=tmp_path)
    assert str(bin_dir / "mnemod") in hook.stdout


def ids(root: Path, name: str, table: str) -> int:
    for line in (root / "etc" / table).read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2])
    raise AssertionError(f"no {name} in {root}/etc/{table}")


def mode(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid


def test_install_system_lays_out_the_service_and_undoes_it(wheel: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    for table in ("passwd", "group", "shadow", "gshadow"):
        if Path("/etc", table).exists():
            shutil.copy2(Path("/etc", table), root / "etc" / table)
    script = ROOT / "scripts" / "install-system"
    first = run(script, "--root", root, "--wheel", wheel).stdout
    assert "created the system user mnemod" in first and "not enabled or started" in first

    uid, gid = ids(root, "mnemod", "passwd"), ids(root, "mnemod", "group")
    passwd = next(
        line
        for line in (root / "etc" / "passwd").read_text().splitlines()
        if line.startswith("mnemod:")
    )
    assert passwd.endswith(":/var/lib/mnemod:/usr/sbin/nologin")
    mnemod = root / "opt" / "mnemod" / "venv" / "bin" / "mnemod"
    assert run(mnemod, "--version").stdout == f"mnemod {__version__}\n"
    assert (root / "usr" / "local" / "bin" / "mnemod").readlink() == Path(
        "/opt/mnemod/venv/bin/mnemod"
    )
    etc = root / "etc" / "mnemod"
    assert mode(etc / "mnemod.toml") == (0o640, 0, gid)
    assert (etc / "mnemod.toml").read_text() == (ROOT / "config" / "mnemod.toml").read_text()
    assert mode(etc / "l1")[0] == 0o755 and list((etc / "l1").iterdir()) == []
    examples = sorted(p.name for p in (etc / "l1-examples").iterdir())
    assert examples == sorted(p.name for p in (ROOT / "config" / "l1").iterdir())
    assert mode(root / "var" / "lib" / "mnemod") == (0o750, uid, gid)
    unit = root / "etc" / "systemd" / "system" / "mnemod.service"
    assert unit.read_text() == (ROOT / "systemd" / "mnemod.service").read_text()
    assert mode(unit)[0] == 0o644

    # an operator's changes are kept; a second run creates nothing new
    (etc / "mnemod.toml").write_text("[gc]\n")
    (etc / "l1" / "me.md").write_text("I am the operator.\n")
    again = run(script, "--root", root, "--wheel", wheel).stdout
    assert "created" not in again and "wrote" not in again
    assert (etc / "mnemod.toml").read_text() == "[gc]\n"
    upgraded = run(script, "--upgrade", "--root", root, "--wheel", wheel).stdout
    assert f"mnemod {__version__} in" in upgraded

    kept = run(script, "--uninstall", "--root", root).stdout
    assert "kept" in kept
    assert not (root / "opt" / "mnemod").exists() and not unit.exists()
    assert not (root / "usr" / "local" / "bin" / "mnemod").is_symlink()
    assert (etc / "l1" / "me.md").exists() and (root / "var" / "lib" / "mnemod").is_dir()
    assert ids(root, "mnemod", "passwd") == uid

    run(script, "--uninstall", "--purge", "--root", root)
    assert not etc.exists() and not (root / "var" / "lib" / "mnemod").exists()
    assert "mnemod:" not in (root / "etc" / "passwd").read_text()


def test_install_system_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    script = ROOT / "scripts" / "install-system"
    bad = subprocess.run([str(script), "--purge"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "--uninstall" in bad.stderr
    nothing = subprocess.run(
        [str(script), "--upgrade", "--root", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert nothing.returncode == 1 and "install first" in nothing.stderr
