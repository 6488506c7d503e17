"""The Claude Code `UserPromptSubmit` hook: the context for one prompt, within a deadline.

Claude Code blocks the prompt on exit code 2 and reads `additionalContext` only on exit 0,
so every problem becomes one line on stderr and exit 0 (`HookProblem`), never a traceback.

Where the memories are: `--data-dir` or `MNEMOD_DATA_DIR` when given; otherwise the first
`.mnemod/` folder found in the input's `cwd` or its parents, then in `$CLAUDE_PROJECT_DIR`
or its parents, then in the working folder or its parents. None found: no context (the
hook never creates a data folder).

How it answers, in order (docs/agents.md, "Claude Code"):
1. a daemon running for the namespace answers over the rpc stream (its Redis `once` ledger);
2. otherwise a child process opens the files and answers, recording accesses, with `once`
   kept per session in `<namespace>/hook/sessions/`; it saves after answering, detached,
   so the prompt does not wait for the save;
3. when neither can answer before the deadline (a daemon busy with maintenance, a store too
   large to read in time), the cheap answer: the L1 files alone (standing items and those
   the prompt triggers), within the budget, `once` honoured as above.
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from mnemod.cli.context import Context
from mnemod.cli.remote import running_daemon
from mnemod.client import Client, NoAnswerError
from mnemod.errors import LockedError, MnemodError, RedisUnavailableError
from mnemod.files.atomic import atomic_write_text
from mnemod.files.session_ledger import SessionLedger

if TYPE_CHECKING:
    from mnemod.domain.resolve import ResolveResult

BEHIND_SECONDS = 1.0
"""A request left unanswered this long means the daemon is held up (it answers in ms)."""
UNANSWERED_WINDOW_MS = 60_000
RESERVE_SECONDS = 1.5
"""Kept back from the deadline for the cheap answer: 0.3 s of CPU here (most of it loading
the tokenizer), up to three times that in wall time on a busy two-core machine."""
COST_NOTE_TTL_SECONDS = 3600
"""How long a measured time to answer from the files is trusted."""
GAVE_UP_TTL_SECONDS = 600
"""How long the files are not tried again after a wait that ran out: a busy moment should
not keep a small store to L1 answers for long, nor a large one cost every prompt a wait."""


class HookProblem(MnemodError):
    """Why the hook gives no context; the CLI prints it as one line and exits 0."""


@dataclass(frozen=True)
class HookInput:
    prompt: str
    session: str | None
    cwd: str | None

    @classmethod
    def parse(cls, raw_text: str) -> HookInput:
        try:
            raw = json.loads(raw_text or "{}")
        except json.JSONDecodeError as exc:
            raise HookProblem(f"the hook input is not JSON ({exc})") from None
        if not isinstance(raw, dict) or not isinstance(raw.get("prompt"), str):
            raise HookProblem("the hook input has no prompt")
        session = raw.get("session_id")
        cwd = raw.get("cwd")
        return cls(
            prompt=raw["prompt"],
            session=session if isinstance(session, str) and session else None,
            cwd=cwd if isinstance(cwd, str) and cwd else None,
        )


# ---- where the memories are ------------------------------------------------------------------
def find_data_dir(
    explicit: str | None, hook_cwd: str | None, environ: Mapping[str, str], workdir: Path
) -> Path | None:
    """The data folder to read, or None when there is none (see the module docstring)."""
    given = explicit or environ.get("MNEMOD_DATA_DIR")
    if given:
        folder = Path(given) if Path(given).is_absolute() else workdir / given
        if not _is_dir(folder):
            raise HookProblem(f"{folder}: no data folder there (--data-dir or MNEMOD_DATA_DIR)")
        return folder
    for base in (hook_cwd, environ.get("CLAUDE_PROJECT_DIR"), str(workdir)):
        if not base:
            continue
        start = Path(base) if Path(base).is_absolute() else workdir / base
        for folder in (start, *start.parents):
            if _is_dir(folder / ".mnemod"):
                return folder / ".mnemod"
    return None


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a folder on the way that we may not enter
        return False


def check_usable(folder: Path) -> None:
    if not os.access(folder, os.R_OK | os.X_OK):
        raise HookProblem(f"{folder}: data folder not readable by uid {os.getuid()}")


# ---- the answer --------------------------------------------------------------------------------
@dataclass
class Answer:
    payload: dict[str, Any] | None
    note: str | None = None  # why the answer is partial, or None


def answer(ctx: Context, hook: HookInput, budget: int | None, deadline: float) -> Answer:
    """The context for `hook.prompt`, before `deadline` (time.monotonic seconds)."""
    reserve = min(RESERVE_SECONDS, 0.3 * max(0.0, deadline - time.monotonic()))
    waited = max(0.05, deadline - reserve - time.monotonic())
    client = running_daemon(ctx, socket_timeout=min(2.0, waited))
    if client is not None:
        with client:
            return _from_daemon(ctx, client, hook, budget, waited)
    return _from_files(ctx, hook, budget, waited, deadline)


def _from_daemon(
    ctx: Context, client: Client, hook: HookInput, budget: int | None, waited: float
) -> Answer:
    behind = unanswered_for(client)
    if behind > BEHIND_SECONDS:
        note = f"the daemon has left a request unanswered for {behind:.0f} s (busy)"
    else:
        try:
            return Answer(client.resolve(hook.prompt, budget, session=hook.session, timeout=waited))
        except (NoAnswerError, RedisUnavailableError) as exc:
            note = f"the daemon did not answer within {waited:.1f} s ({type(exc).__name__})"
    seen = _redis_seen(client, hook.session)
    result = l1_answer(ctx, hook.prompt, budget, seen)
    if hook.session and result is not None:
        _redis_remember(client, hook.session, result.once_ids)
    return Answer(_payload(result), note)


def unanswered_for(client: Client) -> float:
    """Seconds the oldest request of the last minute the daemon has not answered has waited
    in the rpc stream (0 when none has waited a second): a daemon held up by a long job
    answers none, so a prompt after one it left unanswered need not wait for it again.

    Unanswered is unread, or read and not acknowledged (a read blocked in Redis when the job
    began takes the next request). Older requests are left out: one a dead consumer never
    acknowledged must not keep every prompt from asking."""
    try:
        now_ms, waiting = client.stream.unanswered(UNANSWERED_WINDOW_MS, int(BEHIND_SECONDS * 1000))
    except redis.RedisError:  # no stream or group yet, or a Redis that will not say
        return 0.0
    return max(((now_ms - _ms(i)) / 1000 for i in waiting), default=0.0)


def _ms(stream_id: object) -> int:
    return int(str(stream_id).split("-")[0])


def _from_files(
    ctx: Context, hook: HookInput, budget: int | None, waited: float, deadline: float
) -> Answer:
    ledger = SessionLedger(ctx.paths.root / "hook" / "sessions")
    seen = ledger.seen(hook.session, time.time()) if hook.session else set()
    slow: str | None = None
    found: dict[str, Any] | None = None
    if ctx.paths.root.is_dir():  # else a data folder with L1 files and no memories yet
        slow = too_slow(ctx, waited)
        found = None if slow else files_answer(ctx, hook.prompt, budget, seen, waited, deadline)
        if found is None:
            slow = slow or f"reading the memories took more than {waited:.1f} s"
    if found is None:
        result = l1_answer(ctx, hook.prompt, budget, seen)
        _remember(ledger, hook.session, list(result.once_ids) if result else [])
        return Answer(_payload(result), slow)
    if not found.get("ok", True):
        raise HookProblem(str(found.get("error")))
    _remember(ledger, hook.session, found.pop("once_ids", []))
    return Answer(found)


def l1_answer(
    ctx: Context, prompt: str, budget: int | None, seen: set[str]
) -> ResolveResult | None:
    """The cheap answer: only the L1 files, read and ranked as the full answer would be;
    None when there are none (the tokenizer is not even loaded then)."""
    from mnemod.files.l1_files import L1Registry

    registry = L1Registry(ctx.l1_dir, ctx.config.limits)
    registry.reload_all()
    if not registry.items():
        return None
    from mnemod.store.recall import Recall
    from mnemod.tokens import token_counter

    recall = Recall(token_counter(ctx.config.tokens.encoding))
    recall.sync_l1(registry.items())
    limit = budget if budget is not None else ctx.config.resolve.default_budget
    return recall.resolve(prompt, limit, ctx.clock.now(), None, seen, False)


def _payload(result: ResolveResult | None) -> dict[str, Any] | None:
    from mnemod.redisio.rpc import result_payload

    return None if result is None else result_payload(result, False)


def _remember(ledger: SessionLedger, session: str | None, ids: list[str]) -> None:
    if session and ids:
        try:
            ledger.remember(session, ids, time.time())
        except OSError:  # a read-only data folder: the answer stands, `once` may repeat
            return


def _redis_seen(client: Client, session: str | None) -> set[str]:
    from mnemod.redisio.session_set import seen_once

    if not session:
        return set()
    try:
        return seen_once(client.redis, client.keys, session)
    except redis.RedisError:  # the fallback answer does not depend on Redis
        return set()


def _redis_remember(client: Client, session: str, ids: tuple[str, ...]) -> None:
    from mnemod.redisio.session_set import remember_once

    try:
        remember_once(client.redis, client.keys, session, ids)
    except redis.RedisError:  # the fallback answer does not depend on Redis
        return


# ---- the files, in a child process under a deadline ----------------------------------------
def files_answer(
    ctx: Context,
    prompt: str,
    budget: int | None,
    seen: set[str],
    waited: float,
    deadline: float,
) -> dict[str, Any] | None:
    """The full answer from the files, computed by a forked child; None when it did not
    come within `waited` seconds (the child is then killed: it had written nothing yet).

    The child answers first, then saves the accesses it recorded. The hook waits for that
    save until `deadline` and leaves it to finish alone after that (the child's standard
    streams are on /dev/null, so Claude Code does not wait for it)."""
    size = _index_size(ctx)
    started = time.monotonic()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        _child(ctx, prompt, budget, seen, write_end)
    os.close(write_end)
    body = _read_until(read_end, started + waited)
    os.close(read_end)
    elapsed = time.monotonic() - started
    if body is None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        _write_cost(ctx, size, elapsed, complete=False)
        return None
    _write_cost(ctx, size, elapsed, complete=True)
    _wait_exit(pid, deadline)
    payload: dict[str, Any] = json.loads(body)
    return payload


def _wait_exit(pid: int, deadline: float) -> None:
    """Reap the child if it ends before `deadline`; else let it finish on its own."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here: do not wait
        return
    try:
        select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    finally:
        os.close(pidfd)


def _child(ctx: Context, prompt: str, budget: int | None, seen: set[str], out: int) -> None:
    """Never returns: answers on `out`, saves, exits."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sent = False
    try:
        try:
            with ctx.engine(write=True) as engine:
                result = engine.resolve(prompt, budget, seen_once=seen)
                sent = _send(out, {**(_payload(result) or {}), "once_ids": list(result.once_ids)})
        except (LockedError, OSError):
            if sent:  # the save after the answer failed: nothing more to say
                os._exit(0)
            # another writer holds the files, or they are read-only to us: answer without
            # recording the accesses
            with ctx.engine(write=False) as engine:
                result = engine.resolve(prompt, budget, seen_once=seen, record_access=False)
                _send(out, {**(_payload(result) or {}), "once_ids": list(result.once_ids)})
    except MnemodError as exc:
        _send(out, {"ok": False, "error": str(exc)})
    except OSError as exc:
        _send(out, {"ok": False, "error": f"{exc.filename or ctx.data_dir}: {exc.strerror}"})
    except BaseException as exc:  # noqa: BLE001 - a child must end with os._exit, whatever
        _send(out, {"ok": False, "error": f"internal error: {type(exc).__name__}: {exc}"})
    os._exit(0)


def _send(out: int, payload: dict[str, Any]) -> bool:
    body = json.dumps(payload, ensure_ascii=False).encode()
    try:
        while body:
            body = body[os.write(out, body) :]
        os.close(out)
    except OSError:  # sent already, or the parent gave up
        pass
    return True


def _read_until(fd: int, deadline: float) -> bytes | None:
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks) if chunks else None
        chunks.append(chunk)


# ---- how long the files take to open: measured, remembered, used to skip a hopeless wait ----
def _cost_path(ctx: Context) -> Path:
    return ctx.paths.root / "hook" / "open-cost.json"


def _index_size(ctx: Context) -> int:
    try:
        return ctx.paths.index.stat().st_size
    except OSError:
        return 0


def _write_cost(ctx: Context, size: int, seconds: float, complete: bool) -> None:
    note = {"index_bytes": size, "seconds": round(seconds, 3), "complete": complete}
    try:
        atomic_write_text(_cost_path(ctx), json.dumps(note) + "\n")
    except OSError:
        pass  # a read-only data folder: measured again next time


def too_slow(ctx: Context, waited: float) -> str | None:
    """Why the files cannot be read within `waited` seconds, judged from the last
    measurement (an hour old at most, ten minutes after a wait that ran out), or None to
    try them."""
    path = _cost_path(ctx)
    try:
        age = time.time() - path.stat().st_mtime
        note = json.loads(path.read_text())
        measured_bytes, seconds = int(note["index_bytes"]), float(note["seconds"])
        complete = bool(note["complete"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if age > (COST_NOTE_TTL_SECONDS if complete else GAVE_UP_TTL_SECONDS):
        return None
    size = _index_size(ctx)
    megabytes = size / 1e6
    if not complete and size >= 0.9 * measured_bytes:
        return f"{megabytes:.0f} MB of memories took more than {seconds:.1f} s to read last time"
    expected = seconds * size / measured_bytes if measured_bytes else seconds
    if expected > waited:
        return f"{megabytes:.0f} MB of memories take about {expected:.1f} s to read here"
    return None
