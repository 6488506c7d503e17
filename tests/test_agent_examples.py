"""The agent examples of docs/agents.md, run as a user would against a real `mnemod run`:
redis-cli, Python with `mnemod.client`, Python with plain redis-py, and Node.js with the
`redis` npm package. Each example adds a memory, accesses it, resolves over RPC and reads
the hot layer; each test then checks the effects in Redis. The README's quick start runs
verbatim too, from the folder `scripts/run` serves.

The Node example needs node (18+) and npm: its dependencies are installed with `npm ci`
into a temporary copy of examples/node, so the work tree is left alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from daemon_proc import managed
from helpers import wait_until
from mnemod.client import Client

pytestmark = pytest.mark.process  # starts processes of its own

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "agents.md"
CONTENT = "The user prefers metric units and the Asia/Taipei timezone."
NODE_HINT = (
    "the Node example test needs Node.js 18+ and npm on PATH "
    "(Debian/Ubuntu: apt-get install -y nodejs npm)"
)


@pytest.fixture
def daemon_url(tmp_path: Path) -> Iterator[str]:
    """A fresh daemon per example, so each example's add really adds."""
    with managed(tmp_path) as factory:
        proc = factory.daemon(factory.data_dir()).start()
        url = proc.url_from_stdout()
        proc.wait_log("daemon.running")
        yield url


@pytest.fixture(scope="session")
def node_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/node with its locked dependencies installed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail(f"node or npm not found: {NODE_HINT}")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    major = int(re.match(r"v(\d+)", version.stdout.strip()).group(1))  # type: ignore[union-attr]
    if major < 18:
        pytest.fail(f"node {version.stdout.strip()} is too old: {NODE_HINT}")
    folder = tmp_path_factory.mktemp("node-example")
    for name in ("package.json", "package-lock.json", "agent.mjs"):
        shutil.copy2(EXAMPLES / "node" / name, folder / name)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"npm ci failed in a copy of examples/node:\n{done.stdout}\n{done.stderr}")
    return folder


def run_example(args: list[str], url: str, cwd: Path = ROOT) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")}
    env.update({"REDIS_URL": url, "MNEMOD_NAMESPACE": "default"})
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def check_effects(url: str, output: str) -> None:
    """The memory was added once, accessed (the access event and the resolve both count),
    resolved into the context text, and listed as a hot item."""
    assert "Asia/Taipei" in output
    with Client(url) as memory:
        item = memory.get("user.prefs")
        assert item is not None
        assert item["content"] == CONTENT
        assert f"hot: {item['id']} {CONTENT}" in output
        assert wait_until(lambda: (memory.get("user.prefs") or {}).get("access_count", 0) >= 2)
        assert [i["content"] for i in memory.hot("l3", limit=None)] == [CONTENT]
        assert memory.redis.xlen(memory.keys.dead) == 0


def test_redis_cli_example(daemon_url: str) -> None:
    if shutil.which("redis-cli") is None:
        pytest.fail("redis-cli is not on PATH (Debian/Ubuntu: apt-get install -y redis-tools)")
    output = run_example(["bash", str(EXAMPLES / "redis-cli.sh")], daemon_url)
    assert '"ok":true' in output
    check_effects(daemon_url, output)


def test_python_client_example(daemon_url: str) -> None:
    output = run_example([sys.executable, str(EXAMPLES / "agent.py")], daemon_url)
    check_effects(daemon_url, output)


def test_python_redis_example(daemon_url: str) -> None:
    output = run_example([sys.executable, str(EXAMPLES / "python_redis.py")], daemon_url)
    check_effects(daemon_url, output)


@pytest.mark.timeout(420)  # the first use installs the node dependencies (npm ci)
def test_node_example(daemon_url: str, node_example: Path) -> None:
    node = shutil.which("node")
    assert node is not None
    output = run_example([node, "agent.mjs"], daemon_url, cwd=node_example)
    check_effects(daemon_url, output)


def test_doc_shows_the_tested_code() -> None:
    """Every code block of docs/agents.md marked `<!-- example: path -->` is a verbatim
    excerpt of that example file, so the docs cannot drift from the code the tests run."""
    text = DOC.read_text()
    blocks = re.findall(r"<!-- example: (\S+) -->\s*```[a-z]*\n(.*?)```", text, re.S)
    assert {path for path, _ in blocks} == {
        "examples/redis-cli.sh",
        "examples/agent.py",
        "examples/python_redis.py",
        "examples/node/agent.mjs",
    }
    for path, block in blocks:
        assert block.strip() in (ROOT / path).read_text(), f"docs/agents.md differs from {path}"


def readme_blocks() -> list[tuple[str, str]]:
    """(language, code) of each block of the README's "Thirty seconds as an agent"."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Thirty seconds as an agent", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def test_readme_quick_start_gives_the_memory_back(tmp_path: Path) -> None:
    """Each way the README shows (redis-cli, the client, the files without a daemon) puts
    the memory it adds into the context of the prompt it asks. The Python blocks run as the
    README says, with the venv's python (`.venv/bin/python example.py`), from a folder laid
    out like the checkout after `scripts/run`: its `.venv` and the `.mnemod` it serves."""
    blocks = readme_blocks()
    assert [language for language, _ in blocks] == ["sh", "python", "python"]
    (_, shell), (_, client_code), (_, files_code) = blocks
    section = (ROOT / "README.md").read_text().split("## Thirty seconds as an agent", 1)[1]
    how = re.search(r"save a block as `(\S+)` and run\s+`([^`]+)`", section)
    assert how is not None, "the README no longer says how to run its Python examples"
    script_name, command = how.group(1), how.group(2)
    assert command.startswith(".venv/bin/python ")
    venv = Path(sys.executable).parent.parent

    def run_python(code: str, folder: Path) -> str:
        if not (folder / ".venv").exists():
            (folder / ".venv").symlink_to(venv)
        (folder / script_name).write_text(code)
        return run_example(["bash", "-c", command], "", cwd=folder)

    with managed(tmp_path) as factory:
        served = factory.data_dir(".mnemod")  # the README's default data folder
        proc = factory.daemon(served).start()
        assert proc.url_from_stdout().endswith(".mnemod/redis/redis.sock")
        proc.wait_log("daemon.running")
        answer = run_example(["bash", "-c", shell], "", cwd=served.parent)
        assert '"ok":true' in answer and "Asia/Taipei timezone" in answer
        printed = run_python(client_code, served.parent)
        assert printed.startswith("Memory:") and "Asia/Taipei timezone" in printed
    alone = tmp_path / "no-daemon"
    alone.mkdir()
    printed = run_python(files_code, alone)
    assert printed.startswith("Memory:") and "Asia/Taipei timezone" in printed


def test_redis_keys_doc_examples_work(tmp_path: Path) -> None:
    """docs/redis-keys.md's agent operations and its resolve over the rpc stream, run as
    written (its `r` alias made a function): the memory added is in the answer, its keyword
    set is there, and only the made-up id of the examples reaches the dead letters."""
    if shutil.which("redis-cli") is None:
        pytest.fail("redis-cli is not on PATH (Debian/Ubuntu: apt-get install -y redis-tools)")
    text = (ROOT / "docs" / "redis-keys.md").read_text()
    blocks = dict(re.findall(r"## ([^\n]+)\n.*?```sh\n(.*?)```", text, re.S))
    with managed(tmp_path) as factory:
        served = factory.data_dir(".mnemod")
        proc = factory.daemon(served).start()
        url = proc.url_from_stdout()
        proc.wait_log("daemon.running")
        prelude = 'r() { redis-cli -s .mnemod/redis/redis.sock "$@"; }\n'
        script = prelude + blocks["Agent operations"] + "sleep 1\n"
        script += blocks["Resolve over the rpc stream"]
        script += "r GET 'mnemod:{default}:key:user.tz'\n"
        output = run_example(["bash", "-c", script], url, cwd=served.parent)
        answer = next(line for line in output.splitlines() if line.startswith('{"id":"1'))
        assert "User prefers the Asia/Taipei timezone" in json.loads(answer)["text"]
        with Client(url) as memory:
            item = memory.get("user.tz")
            assert item is not None and item["id"] in output.splitlines()
            dead = cast(list[tuple[str, dict[str, str]]], memory.redis.xrange(memory.keys.dead))
            assert dead and all("01J9Z3TQ6N8W0K4S2V5XH7C1RB" in f["data"] for _, f in dead)
