"""TLS as docs/operations.md describes it: a private CA and client certificates, made here
with openssl, for a redis-server on loopback; a daemon and an agent connect through
`rediss://` with the CA in the URL or in SSL_CERT_FILE, and a certificate that does not
verify is logged as such."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from daemon_proc import DaemonFactory
from helpers import run_cli, wait_until
from mnemod.client import Client as AgentClient
from mnemod.redisio.connection import connect


@dataclass(frozen=True)
class Tls:
    port: int
    ca: Path
    cert: Path
    key: Path

    def url(self, ca: bool = True) -> str:
        query = f"ssl_certfile={self.cert}&ssl_keyfile={self.key}"
        if ca:
            query += f"&ssl_ca_certs={self.ca}"
        return f"rediss://127.0.0.1:{self.port}/0?{query}"


def openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True, timeout=60)


def make_certificates(folder: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    openssl(folder, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=mnemod test CA")  # fmt: skip
    (folder / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl(folder, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN=mnemod test {name}")  # fmt: skip
        extra = ["-extfile", "server.ext"] if name == "server" else []
        openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-out", f"{name}.crt", *extra)  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[Tls]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificates can be made for the test")
    folder = tmp_path / "tls"
    folder.mkdir()
    make_certificates(folder)
    port = free_port()
    args = ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", "server.crt", "--tls-key-file", "server.key",
            "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "yes",
            "--save", "", "--appendonly", "no", "--dir", str(folder)]  # fmt: skip
    server = subprocess.Popen(args, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tls = Tls(port, folder / "ca.crt", folder / "client.crt", folder / "client.key")
    try:
        client = connect(tls.url(), socket_timeout=2.0)

        def answers() -> bool:
            if server.poll() is not None:
                output = server.stdout.read().decode(errors="replace") if server.stdout else ""
                if "TLS" in output and ("not" in output or "support" in output):
                    pytest.skip(f"this redis-server has no TLS support: {output[-300:]}")
                raise AssertionError(f"redis-server with TLS exited: {output[-500:]}")
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_until(answers, timeout=15, interval=0.1)
        client.close()
        yield tls
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout:
            server.stdout.close()


def agent_round_trip(url: str) -> None:
    with AgentClient(url, "default") as agent:
        agent.add("The staging database is on port 5433", key="staging-db", wait=10)
        assert "5433" in agent.resolve("which port is the staging database on?")["text"]


def test_a_daemon_and_an_agent_over_tls_with_a_ca_and_client_certificates(
    daemons: DaemonFactory, tls_server: Tls
) -> None:
    proc = daemons.daemon(daemons.data_dir(), redis_url=tls_server.url()).start()
    proc.wait_log("daemon.running")
    agent_round_trip(tls_server.url())
    assert proc.count_events("redis.unavailable") == 0


def test_the_ca_can_come_from_ssl_cert_file(daemons: DaemonFactory, tls_server: Tls) -> None:
    url = tls_server.url(ca=False)
    env = {"SSL_CERT_FILE": str(tls_server.ca)}
    proc = daemons.daemon(daemons.data_dir(), redis_url=url, env=env).start()
    proc.wait_log("daemon.running")
    agent_round_trip(tls_server.url())


def test_a_certificate_that_does_not_verify_is_logged_as_such(
    daemons: DaemonFactory, tls_server: Tls, tmp_path: Path
) -> None:
    other = tmp_path / "other-ca"
    other.mkdir()
    openssl(other, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=another CA")  # fmt: skip
    url = tls_server.url(ca=False) + f"&ssl_ca_certs={other / 'ca.crt'}"
    proc = daemons.daemon(daemons.data_dir(), redis_url=url).start()
    proc.wait_log("redis.unavailable")
    said = next(e for e in proc.log_events() if e.get("event") == "redis.unavailable")
    assert "certificate verify failed" in said["error"], said
    assert proc.running()  # it waits, as for any outage
    doctor = run_cli(tmp_path, "doctor", "--json", "--redis-url", url, expect=1)
    (check,) = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "redis"]
    assert "certificate verify failed" in check["detail"], check
