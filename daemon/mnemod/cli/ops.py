"""Operator commands: `status`, `doctor`, `config show`."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis

from mnemod.cli.context import Context
from mnemod.cli.remote import FRESH, connect_quietly, heartbeat_age, is_running, redis_url
from mnemod.config import config_as_tree, redact_url
from mnemod.errors import MnemodError
from mnemod.files.change_log import ChangeLog
from mnemod.files.l1_files import L1Registry
from mnemod.files.l2_markdown import L2Folder
from mnemod.files.l3_store import load_index
from mnemod.processes import describe_owner, owner_is_gone
from mnemod.redisio.change_feed import ChangeFeed
from mnemod.redisio.connection import check_version, connect, memory_used
from mnemod.redisio.dead_letters import dead_letter_count
from mnemod.redisio.embedded import socket_path_for
from mnemod.redisio.hot_layer import HotLayer
from mnemod.redisio.keys import Keys
from mnemod.redisio.lease import lease_holder
from mnemod.redisio.status_hash import read_status
from mnemod.redisio.streams import EventStream
from mnemod.store.paths import NamespacePaths, list_namespaces
from mnemod.store.reader import read_head

DEAD_LETTER_WARN = 1
PENDING_WARN = 10_000


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    status = sub.add_parser("status", parents=[common], help="namespaces, counts, jobs, leader")
    status.description = (
        "Daemon state, counts, jobs and the leader of a namespace, from its files and Redis."
    )
    status.add_argument(
        "--all",
        action="store_true",
        help="every namespace in the data folder (default: --namespace, else those "
        "daemon.namespaces names)",
    )
    status.set_defaults(handler=cmd_status)

    doctor = sub.add_parser("doctor", parents=[common], help="health checks; exit 0 ok, 1 failed")
    doctor.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no output, exit code only (default: a line per check)",
    )
    doctor.set_defaults(handler=cmd_doctor)

    config = sub.add_parser("config", parents=[common], help="the effective configuration")
    config.add_argument(
        "action", choices=["show"], help="show: print it (with --json: typed, durations in s)"
    )
    config.set_defaults(handler=cmd_config)


# ---- config show ---------------------------------------------------------------------------
def cmd_config(ctx: Context) -> int:
    """TOML text; with --json typed values: numbers, booleans, durations in seconds."""
    tree = config_as_tree(ctx.config, redact=True, seconds=ctx.as_json)
    lines = [f"# effective config (source: {ctx.config.source}; MNEMOD_* and flags applied)"]
    for section, values in tree.items():
        lines.append(f"\n[{section}]")
        lines.extend(f"{key} = {_toml_value(value)}" for key, value in values.items())
    ctx.emit(tree, "\n".join(lines))
    return 0


def _toml_value(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


# ---- status --------------------------------------------------------------------------------
def cmd_status(ctx: Context) -> int:
    namespaces = list_namespaces(ctx.data_dir) if ctx.args.all else served_namespaces(ctx)
    client = connect_quietly(ctx)
    report: dict[str, Any] = {"data_dir": str(ctx.data_dir), "redis": redact_url(redis_url(ctx))}
    if client is not None:
        report["redis_memory"] = memory_used(client)
    else:
        report["redis_memory"] = None
    report["namespaces"] = {ns: _namespace_status(ctx, ns, client) for ns in namespaces}
    ctx.emit(report, _status_text(report))
    return 0


def _namespace_status(ctx: Context, namespace: str, client: redis.Redis | None) -> dict[str, Any]:
    paths = NamespacePaths(ctx.data_dir, namespace)
    info: dict[str, Any] = {}
    head = read_head(paths.index)  # the checkpoint's counts, without reading its entries
    if head is not None and {"entries", "by_type"} <= head.stats.keys():
        info["files"] = {"l3": head.stats["entries"], "l3_by_type": head.stats["by_type"]}
    else:
        try:
            snapshot = load_index(paths.index)
            by_type: dict[str, int] = {}
            for entry in snapshot.entries:
                by_type[entry.type] = by_type.get(entry.type, 0) + 1
            info["files"] = {"l3": len(snapshot.entries), "l3_by_type": by_type}
        except MnemodError as exc:
            info["files"] = {"error": str(exc)}
    info["set_aside"] = [str(p) for p in paths.set_aside] or None
    if client is None:
        info["daemon"] = "not running (Redis unreachable)"
        return info
    keys = Keys(ctx.config.redis.prefix, namespace)
    status = read_status(client, keys)
    running = is_running(status)
    info["daemon"] = (
        "running" if running else f"not running (last heartbeat {status.get('heartbeat', 'never')})"
    )
    info["leader"] = lease_holder(client, keys)
    info["led_by"] = describe_owner(info["leader"]) if info["leader"] else None
    hot = HotLayer(client, keys)
    info["hot"] = hot.count("l3")
    info["l1"] = hot.count("l1")
    info["l2"] = hot.count("l2")
    info.update(_replication(client, keys))
    info["pending"] = EventStream(client, keys).pending()
    info["dead_letters"] = dead_letter_count(client, keys)
    for field in ("pid", "version", "started_at", "heartbeat", "last_event_id"):
        info[field] = status.get(field)
    for field in ("counts", "jobs", "l1_problems", "waiting"):
        info[field] = json.loads(status[field]) if status.get(field) else None
    return info


def _replication(client: redis.Redis, keys: Keys) -> dict[str, Any]:
    """The namespace's committed position and each live follower's: how far it applied,
    how far behind it is, and how long ago it said so."""
    feed = ChangeFeed(client, keys, owner="")
    committed = feed.committed()
    live, _ = feed.followers()
    seq = committed.seq if committed is not None else None
    return {
        "committed_seq": seq,
        "followers": {
            name: {
                "applied": applied,
                "behind": max(0, seq - applied) if seq is not None else None,
                "seen_s_ago": ago,
            }
            for name, (applied, ago) in sorted(live.items())
        },
    }


def _status_text(report: dict[str, Any]) -> str:
    lines = [
        f"data: {report['data_dir']}",
        f"redis: {report['redis']} (memory {report['redis_memory']})",
    ]
    for ns, info in report["namespaces"].items():
        lines.append(f"\nnamespace {ns}: daemon {info.get('daemon')}")
        for key, value in info.items():
            if key in ("daemon",) or value is None:
                continue
            if key == "jobs" and isinstance(value, dict):
                for job, result in value.items():
                    detail = {k: v for k, v in result.items() if k != "schedule"}
                    lines.append(
                        f"  job {job:<12} every {result.get('schedule')}: {detail or 'not run yet'}"
                    )
                continue
            lines.append(f"  {key}: {json.dumps(value, ensure_ascii=False)}")
    return "\n".join(lines)


# ---- doctor --------------------------------------------------------------------------------
@dataclass
class Check:
    name: str
    state: str  # ok | warn | fail
    detail: str


def cmd_doctor(ctx: Context) -> int:
    checks = run_checks(ctx)
    failed = [c for c in checks if c.state == "fail"]
    if not ctx.args.quiet:
        rows = [{"check": c.name, "state": c.state, "detail": c.detail} for c in checks]
        text = "\n".join(f"{c.state.upper():<4}  {c.name:<12} {c.detail}" for c in checks)
        ctx.emit({"ok": not failed, "checks": rows}, text)
    return 1 if failed else 0


def run_checks(ctx: Context) -> list[Check]:
    """The checks of the process-wide things, then of each namespace `served_namespaces`
    names (with several, each such check's detail starts with its namespace)."""
    checks = [Check("config", "ok", f"valid ({ctx.config.source})")]
    checks.append(_check_data_dir(ctx))
    namespaces = served_namespaces(ctx)
    for namespace in namespaces:
        checks.extend(_named(namespaces, namespace, _check_files(ctx, namespace)))
    client, redis_check = _check_redis(ctx)
    checks.append(redis_check)
    if client is None:
        checks.append(Check("daemon", "fail", "cannot be checked: Redis unreachable"))
        return checks
    for namespace in namespaces:
        checks.extend(_named(namespaces, namespace, _daemon_checks(ctx, namespace, client)))
    client.close()
    return checks


def served_namespaces(ctx: Context) -> list[str]:
    """`--namespace` when given; else what `mnemod run` serves with this config
    (`daemon.namespaces`, `*` as the namespaces in the data folder), so that the status and
    the health check of a daemon of many namespaces cover them all."""
    if getattr(ctx.args, "namespaces", None):
        return [ctx.namespace]
    served = [ns for ns in ctx.config.daemon.namespaces if ns != "*"]
    if "*" in ctx.config.daemon.namespaces:
        served += list_namespaces(ctx.data_dir)
    return list(dict.fromkeys(served)) or [ctx.namespace]


def _named(namespaces: list[str], namespace: str, checks: list[Check]) -> list[Check]:
    if len(namespaces) == 1:
        return checks
    return [Check(c.name, c.state, f"{namespace}: {c.detail}") for c in checks]


def _daemon_checks(ctx: Context, namespace: str, client: redis.Redis) -> list[Check]:
    keys = Keys(ctx.config.redis.prefix, namespace)
    status = read_status(client, keys)
    checks = [_check_heartbeat(namespace, status)]
    waiting = json.loads(status["waiting"]) if status.get("waiting") else {}
    detail = "; ".join(f"{name}: {why}" for name, why in sorted(waiting.items()))
    checks.append(Check("derived", "warn" if waiting else "ok", detail or "up to date"))
    holder = lease_holder(client, keys)
    if holder is None:
        checks.append(Check("leader", "fail", f"no daemon holds namespace {namespace!r}"))
    else:
        checks.append(Check("leader", "ok", str(holder)))
    dead = dead_letter_count(client, keys)
    checks.append(
        Check(
            "dead-letter",
            "warn" if dead >= DEAD_LETTER_WARN else "ok",
            f"{dead} event(s) in {keys.dead}",
        )
    )
    pending = EventStream(client, keys).pending()
    checks.append(
        Check("backlog", "warn" if pending >= PENDING_WARN else "ok", f"{pending} pending event(s)")
    )
    return checks


def _check_data_dir(ctx: Context) -> Check:
    folder = ctx.data_dir
    probe = folder if folder.exists() else folder.parent
    if not probe.exists():
        return Check("data-dir", "fail", f"{folder}: does not exist, nor its parent")
    if not os.access(probe, os.W_OK | os.X_OK):
        return Check("data-dir", "fail", f"{probe}: not writable by uid {os.getuid()}")
    return Check("data-dir", "ok", f"{folder} writable")


def _check_files(ctx: Context, namespace: str) -> list[Check]:
    paths = NamespacePaths(ctx.data_dir, namespace)
    checks: list[Check] = []
    checkpoint_seq = 0
    try:
        snapshot = load_index(paths.index)
        checkpoint_seq = snapshot.log_seq
        note = " (recovered from .bak)" if snapshot.recovered_from else ""
        checks.append(Check("index", "ok", f"{paths.index}: {len(snapshot.entries)} entries{note}"))
    except MnemodError as exc:
        checks.append(Check("index", "fail", str(exc)))
    try:
        changelog = ChangeLog(paths.log_dir, readonly=True)
        behind = sum(1 for _ in changelog.read_after(checkpoint_seq))
        detail = f"{paths.log_dir}: {behind} record(s) after the checkpoint"
        checks.append(Check("log", "ok", detail))
    except MnemodError as exc:
        checks.append(Check("log", "fail", str(exc)))
    folder = L2Folder(paths.l2_dir)
    broken = []
    for path in folder.files():
        try:
            folder.read_file(path)
        except MnemodError as exc:
            broken.append(str(exc))
    checks.append(
        Check(
            "l2", "fail" if broken else "ok", "; ".join(broken) or f"{len(folder.files())} file(s)"
        )
    )
    aside = paths.set_aside
    if aside:
        detail = f"{len(aside)} copy(ies) set aside, newest {aside[-1]}: look, then remove"
        checks.append(Check("set aside", "warn", detail))
    registry = L1Registry(ctx.l1_dir, ctx.config.limits)
    problems = registry.reload_all()
    checks.append(
        Check(
            "l1",
            "warn" if problems else "ok",
            "; ".join(map(str, problems)) or f"{len(registry.items())} item(s) in {ctx.l1_dir}",
        )
    )
    return checks


def _check_redis(ctx: Context) -> tuple[redis.Redis | None, Check]:
    url = redis_url(ctx)
    if not ctx.config.redis.url and not socket_path_for(ctx.data_dir / "redis").exists():
        detail = f"{redact_url(url)}: unreachable (the embedded server is not running)"
        return None, Check("redis", "fail", detail)
    client = connect(url, socket_timeout=2.0)
    try:
        version = check_version(client, url)  # its message names the cause (NOPERM, TLS...)
    except MnemodError as exc:
        client.close()
        return None, Check("redis", "fail", str(exc))
    return client, Check("redis", "ok", f"{redact_url(url)}: Redis {'.'.join(map(str, version))}")


def _check_heartbeat(namespace: str, status: dict[str, str]) -> Check:
    age = heartbeat_age(status)
    if age is None:
        return Check("daemon", "fail", f"no daemon has run for namespace {namespace!r}")
    pid = status.get("pid", "")
    if owner_is_gone(status.get("owner", "")):
        return Check("daemon", "fail", f"daemon process {pid} is gone (crashed or killed)")
    if age > FRESH or status.get("state") != "running":
        return Check(
            "daemon",
            "fail",
            f"heartbeat {int(age.total_seconds())} s old, state {status.get('state')}",
        )
    return Check("daemon", "ok", f"pid {status.get('pid')}, heartbeat {_seconds(age)} ago")


def _seconds(age: timedelta) -> str:
    return f"{age.total_seconds():.1f} s"
