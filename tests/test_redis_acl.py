"""The Redis users of docs/operations.md work as written: a daemon and an agent, each with
exactly its documented ACL, on a private redis-server; and a daemon refused INFO says so."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon_proc import Client, DaemonFactory
from helpers import wait_until
from mnemod.client import Client as AgentClient
from mnemod.redisio.connection import connect
from mnemod.redisio.embedded import EmbeddedRedis

DOCS = Path(__file__).parent.parent / "docs" / "operations.md"
PASSWORDS = {"mnemod": "daemon-secret", "agent": "agent-secret"}
BUSY = {  # every scheduled job runs during the test, so each of their commands is checked
    "MNEMOD_SCHEDULE_GC": "1s",
    "MNEMOD_SCHEDULE_EXPIRY": "1s",
    "MNEMOD_SCHEDULE_TRIM": "1s",
    "MNEMOD_SCHEDULE_HOT_REFRESH": "1s",
}


def documented_acl() -> dict[str, list[str]]:
    """The `ACL SETUSER` lines of docs/operations.md, by user name."""
    users = {}
    for line in DOCS.read_text().splitlines():
        if line.startswith("ACL SETUSER "):
            words = shlex.split(line)
            users[words[2]] = words[3:]
    assert set(users) == set(PASSWORDS), users
    for name, rules in users.items():
        assert f">{PASSWORDS[name]}" in rules
    return users


@pytest.fixture
def acl_server(tmp_path: Path) -> Iterator[tuple[EmbeddedRedis, Client]]:
    """A private redis-server whose default user is the admin setting up the others."""
    with EmbeddedRedis(tmp_path / "redis") as server:
        admin = connect(server.url, socket_timeout=10.0)
        try:
            yield server, admin
        finally:
            admin.close()


def user_url(server: EmbeddedRedis, user: str) -> str:
    return f"unix://{user}:{PASSWORDS[user]}@{server.socket_path}"


def refusals(text: str) -> list[str]:
    return re.findall(r"NOPERM[^\"]*|no permissions[^\"]*", text)


def test_the_daemon_and_an_agent_work_with_exactly_the_documented_acl(
    daemons: DaemonFactory, acl_server: tuple[EmbeddedRedis, Client]
) -> None:
    server, admin = acl_server
    for name, rules in documented_acl().items():
        admin.execute_command("ACL", "SETUSER", name, *rules)
    data_dir = daemons.data_dir()
    proc = daemons.daemon(data_dir, redis_url=user_url(server, "mnemod"), env=BUSY).start()
    proc.wait_log("daemon.running")

    with AgentClient(user_url(server, "agent"), "default") as agent:
        entry = agent.add("The user prefers the Asia/Taipei timezone", key="tz", wait=10)
        agent.add("Always answer in English", tier="hot", wait=10)
        assert agent.get("tz") is not None and agent.get(entry) is not None
        assert len(agent.hot("l3")) == 2 and agent.status()["state"] == "running"
        answer = agent.resolve("which timezone does the user use?", session="s1")
        assert "Asia/Taipei" in answer["text"]
        agent.access("tz", wait=10)
        agent.update("tz", importance=5, wait=10)
        agent.promote("tz", wait=10)
        with pytest.raises(Exception, match="content"):  # refused: its error is read back
            agent.send("add", {"content": ""}, wait=10)
        agent.remove(entry, wait=10)
        proc.wait_log("gc.finished", at_least=2)
        proc.wait_log("hot.rebuilt", at_least=2)  # the hot_refresh job
    assert refusals(proc.stderr_path.read_text()) == []
    assert proc.count_events("redis.command_refused") == 0
    assert proc.count_events("redis.unavailable") == 0
    # the agent user cannot write mnemod's own keys
    with (
        connect(user_url(server, "agent")) as agent_redis,
        pytest.raises(Exception, match="no permissions"),
    ):
        agent_redis.hset("mnemod:{default}:m:forged", "content", "x")


def test_a_daemon_refused_info_names_the_cause(
    daemons: DaemonFactory, acl_server: tuple[EmbeddedRedis, Client]
) -> None:
    server, admin = acl_server
    rules = [r for r in documented_acl()["mnemod"] if r != "+info"]
    admin.execute_command("ACL", "SETUSER", "mnemod", *rules)
    proc = daemons.daemon(daemons.data_dir(), redis_url=user_url(server, "mnemod")).start()
    proc.wait_log("redis.unavailable")
    said = next(e for e in proc.log_events() if e.get("event") == "redis.unavailable")
    assert said["error"].startswith("unix://mnemod:***@"), said  # never the password
    assert (
        "NoPermissionError: this user has no permissions to run the 'info' command"
        in (said["error"])
    )
    assert "unreachable" not in said["error"]
    wait_until(lambda: proc.running(), timeout=1)  # it waits for the ACL to be fixed
