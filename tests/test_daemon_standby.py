"""`mnemod run` as a person runs it in a terminal: on a folder another daemon leads it says
who leads; a second Ctrl-C exits at once and still stops the embedded redis-server."""

from __future__ import annotations

import json
import os
import signal
import socket

from daemon_proc import DaemonFactory, alive
from helpers import run_cli, wait_until


def test_a_standby_says_who_leads(daemons: DaemonFactory) -> None:
    data_dir = daemons.data_dir()
    leader = daemons.daemon(data_dir).start()
    leader.wait_log("daemon.running")
    standby = daemons.daemon(data_dir).start()
    standby.wait_log("lease.standby")
    expected = f"pid {leader.pid} on host {socket.gethostname()}"
    wait_until(lambda: "standing by" in standby.stdout(), timeout=10)
    assert f"mnemod: standing by: {expected} leads namespace default" in standby.stdout()

    status = json.loads(run_cli(data_dir, "status", "--json").stdout)["namespaces"]["default"]
    assert status["led_by"] == expected and status["pid"] == str(leader.pid)
    assert f'led_by: "{expected}"' in run_cli(data_dir, "status").stdout
    standby.signal(signal.SIGTERM)
    assert standby.wait_exit() == 0
    assert leader.running()


def test_a_second_ctrl_c_still_stops_the_embedded_redis_server(daemons: DaemonFactory) -> None:
    data_dir = daemons.data_dir()
    proc = daemons.daemon(data_dir).start()
    proc.wait_log("daemon.running")
    (server,) = daemons.embedded_pids()
    os.kill(server, signal.SIGSTOP)  # the drain cannot finish: the second signal must act
    try:
        proc.signal(signal.SIGINT)
        proc.wait_log("daemon.draining")  # (two signals at once would count as one)
        proc.signal(signal.SIGINT)  # as a person hitting Ctrl-C again: the drain hangs
        wait_until(lambda: "second signal" in proc.stderr_path.read_text(), timeout=10)
    finally:
        os.kill(server, signal.SIGCONT)
    assert proc.wait_exit() == 1
    wait_until(lambda: not alive(server), timeout=15)
    assert not (data_dir / "redis" / "redis.sock").exists()
