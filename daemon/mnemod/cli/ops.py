"""Operator commands: `status`, `doctor`, `config show`."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemod.cli.context import Context
from mnemod.cli.remote import connect_quietly, redis_url
from mnemod.config import config_as_tree, redact_url
from mnemod.errors import MnemodError
from mnemod.files.change_log import ChangeLog
from mnemod.files.checkpoint_head import read_head
from mnemod.files.l1_files import L1Registry
from mnemod.files.l2_markdown import L2Folder
from mnemod.files.l3_store import load_index
from mnemod.store.paths import NamespacePaths, list_namespaces

if TYPE_CHECKING:  # the Redis side loads once there is a Redis to ask (cli.daemon_state)
    import redis

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
        from mnemod.redisio.connection import memory_used

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
    from mnemod.cli.daemon_state import daemon_status

    info.update(daemon_status(ctx, namespace, client))
    return info


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
    from mnemod.cli.daemon_state import check_redis, daemon_checks

    client, redis_check = check_redis(ctx)
    checks.append(redis_check)
    if client is None:
        checks.append(Check("daemon", "fail", "cannot be checked: Redis unreachable"))
        return checks
    for namespace in namespaces:
        checks.extend(_named(namespaces, namespace, daemon_checks(ctx, namespace, client)))
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
