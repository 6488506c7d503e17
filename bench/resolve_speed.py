"""Resolve latency at 1k, 10k and 100k memories: in process and over the Redis RPC stream.

The corpus is short conversational memories: LoCoMo turns (`speaker: text`) repeated with
about 40 % of their longer words swapped for words drawn from the whole corpus (so term
frequencies stay realistic and no two copies are the same), 30 s apart; without the data
file, synthetic sentences from a seeded Zipf vocabulary. Prompts are LoCoMo questions (or
synthetic ones); budget 1000 tokens.

The corpus is built through `Store.add` inside `engine.batch()` (one save at the end), with
keywords extracted from the content as an agent's adds get them, so the dedup check on
add runs as it does in use. `add_ms` times a few more adds afterwards.

In process, on the same store (`pure` and `as_used` in alternating blocks of distinct
prompts: pairing each prompt's two calls, as this did before, timed the second on the caches
the first had just warmed, 0.1-0.3 ms faster than a loop over prompts):
- `pure`: `engine.resolve(..., record_access=False)` — ranking, packing, framing;
- `as_used`: `engine.resolve(...)` recording accesses, saves deferred (what the daemon does
  per request before its periodic snapshot);
- `api`: `Store.resolve` as a library user calls it — records accesses and saves the whole
  index on every call (few calls at large sizes).
`first_ms` is the first pass (token counts of the matched lines not cached yet).

Over RPC, the store is closed and `mnemod run --data-dir D` started on the same folder (its
own embedded redis-server). `rpc`: `mnemod.client.Client.resolve`, as a Python agent asks
(request checked, answer parsed and checked); `raw`: what an agent in any language does,
`XADD mnemod:{default}:rpc * op resolve ...` then `BLPOP` of the reply list; `local`: in
process again (as `as_used`, on a copy of the folder). The three take turns in blocks
(`in_blocks`), as the in-process modes do. (Taking turns call by call made every RPC wake a
daemon that had sat idle through the other modes' calls; on a virtual machine an idle vCPU
is halted, and waking it costs 0.1-1 ms.) `rpc_minus_local_ms` (rpc p50 − local p50)
compares with in-process calls at the same moments; `rpc_minus_used_ms` (rpc p50 −
`as_used` p50) with the in-process pass that ran alone, before the daemon started. Both
baselines record the accesses of what they select, which the daemon does after answering:
against `pure` the RPC adds more than either says.

`floor_ms` is the raw exchange with the smallest possible server in place of the daemon: a
redis-py loop around `engine.resolve` on the copy. What separates it from in process is the
machine (two more wake-ups of two processes, and a resolve that runs on cold caches after
each wait); what separates `raw` from it is the daemon's own share. `echo_ms` is the same
exchange with that server replying a stored copy of each answer (no resolve at all): what
a request and its reply cost on this machine before any work is done. `server_first_ms` and
`server_again_ms` are timed inside that server: the resolve it answers with, which runs
right after the wait for the request, and the same resolve repeated at once; their
difference is what waking on cold caches costs a server's resolve, transport aside.
`floor_transport_ms` (floor p50 − server_first p50) is what the request and its reply cost
that server beyond its own resolve: no server could add less here around a resolve of this
size. `raw_minus_floor_ms` is the daemon's own share.

With `--pause-ms N` every timed call (in process and over RPC) follows N ms of idle, as
calls do when an agent resolves once per prompt: in process then also runs on cooled
caches, so `rpc_minus_used_ms` no longer counts that cost to the RPC.

With `--stores DIR` a store built there before for the same size and corpus is copied
(one built now is kept there): building 100,000 memories takes minutes, and two checkouts
measured on one DIR measure the very same files.

    python bench/resolve_speed.py [--data PATH] [--sizes 1000,10000,100000] [--no-rpc]
        [--queries 100] [--pause-ms N] [--profile] [--stores DIR]
        [--out bench/results/resolve_speed.json]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import itertools
import json
import multiprocessing
import os
import pstats
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "daemon"))

import orjson  # noqa: E402

import mnemod  # noqa: E402
from mnemod.client import Client  # noqa: E402
from mnemod.redisio.connection import connect  # noqa: E402
from mnemod.redisio.rpc import result_payload  # noqa: E402
from results import write_results  # noqa: E402

BUDGET = 1000
CONFIG = {"ttl": {"context": "3650d"}}
START = datetime(2023, 1, 1, tzinfo=UTC)
STEP = timedelta(seconds=30)
ENV = {"MNEMOD_TTL_CONTEXT": "3650d", "MNEMOD_LOG_FORMAT": "json", "MNEMOD_LOG_LEVEL": "info"}


# ---- corpus ---------------------------------------------------------------------------------
def load_locomo(path: Path) -> tuple[list[str], list[str]]:
    turns: list[str] = []
    questions: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["kind"] == "memory":
                turns.append(f"{row['speaker']}: {row['text']}")
            elif row["kind"] == "query":
                questions.append(row["text"])
    return turns, questions


def synthetic(rng: random.Random) -> tuple[list[str], list[str]]:
    """Sentences from a 5,000-word Zipf vocabulary with function words between them."""
    syllables = ["ka", "lo", "mi", "ren", "tas", "vo", "sel", "dun", "pra", "ith", "or", "be"]
    vocab = sorted({"".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(8000)})
    vocab = vocab[:5000]
    rng.shuffle(vocab)
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    glue = ["the", "a", "and", "to", "of", "with", "my", "we", "at", "for"]

    def sentence(words: int) -> str:
        picked = rng.choices(vocab, weights, k=words)
        return " ".join(w if i % 2 else f"{rng.choice(glue)} {w}" for i, w in enumerate(picked))

    turns = [sentence(rng.randint(6, 24)).capitalize() + "." for _ in range(800)]
    questions = [f"What about {sentence(rng.randint(2, 5))}?" for _ in range(300)]
    return turns, questions


def memories(turns: Sequence[str], rng: random.Random) -> Iterator[str]:
    """The turns once as they are, then endlessly varied copies."""
    pool = [w for t in turns for w in re.findall(r"[A-Za-z']{4,}", t)]
    yield from turns
    while True:
        for turn in turns:
            words = [
                rng.choice(pool) if len(w) > 3 and rng.random() < 0.4 else w for w in turn.split()
            ]
            if len(words) < 8:
                words += rng.sample(pool, 3)
            yield " ".join(words)


# ---- measuring ------------------------------------------------------------------------------
def percentile(ordered: Sequence[float], share: float) -> float:
    """The `share` quantile of sorted seconds, in ms."""
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000, 3)


def percentiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if not ordered:
        return {"p50": float("nan"), "p99": float("nan"), "n": 0}
    return {"p50": percentile(ordered, 0.5), "p99": percentile(ordered, 0.99), "n": len(ordered)}


def warm_up(call: Callable[[str], Any], prompts: Sequence[str], seconds: float) -> list[float]:
    """One first pass (caches empty), stopped after `seconds`; the prompts it reached are
    the ones timed afterwards."""
    out: list[float] = []
    deadline = time.monotonic() + seconds
    for prompt in prompts:
        out.append(timed(lambda p=prompt: call(p)))
        if time.monotonic() > deadline:
            break
    return out


BLOCK = 10  # calls of one mode in a row (in_blocks)
ROUNDS = 3  # passes over the prompts (in_blocks): 18 blocks, each order of three modes thrice


def in_blocks(
    modes: Sequence[tuple[list[float], Callable[[str], Any]]],
    prompts: Sequence[str],
    max_seconds: float,
) -> None:
    """Time each mode's calls, BLOCK in a row, over the prompts ROUNDS times (stopped
    after `max_seconds`). Within a block the calls of one mode follow each other as in a
    loop, on distinct prompts (a prompt resolved just before runs on caches it warmed);
    the blocks take turns in every order in turn, so that all see the same moments of a
    noisy machine and each follows each other as often (a daemon that sat idle through
    the in-process calls wakes on colder caches than one that answered just before)."""
    deadline = time.monotonic() + max_seconds
    orders = list(itertools.permutations(modes))
    for index, start in enumerate(range(0, len(prompts) * ROUNDS, BLOCK)):
        block = [prompts[i % len(prompts)] for i in range(start, start + BLOCK)]
        for samples, call in orders[index % len(orders)]:
            samples.extend(timed(lambda p=prompt, c=call: c(p)) for prompt in block)
        if time.monotonic() > deadline:
            break


PAUSE = [0.0]  # seconds of idle before every timed call (--pause-ms)


def timed(call: Callable[[], Any]) -> float:
    if PAUSE[0]:
        time.sleep(PAUSE[0])
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def corpus(data: Path) -> tuple[list[str], list[str], str]:
    """Turns, questions and a label: the LoCoMo file when it is there, else synthetic."""
    if data.exists():
        turns, questions = load_locomo(data)
        return turns, questions, f"LoCoMo turns varied ({data.name})"
    turns, questions = synthetic(random.Random(7))
    return turns, questions, "synthetic Zipf sentences"


def build(folder: Path, size: int, source: Iterator[str]) -> float:
    """Seconds to add `size` memories to `folder` through `Store.add`, loaded like an import
    (only identical keyword sets merge), so the build time does not hide what is measured."""
    store = mnemod.open(folder, config={**CONFIG, "dedup": {"threshold": 1.0}})
    try:
        started = time.perf_counter()
        with store.engine.batch():
            for index in range(size):
                store.add(next(source), created_at=START + STEP * index)
        return time.perf_counter() - started
    finally:
        store.close()


STORE_COPY_IGNORE = shutil.ignore_patterns("redis", "*.lock", "*.log")  # a daemon's own


def kept_build(
    folder: Path, size: int, turns: Sequence[str], source: Iterator[str], kept: Path | None
) -> tuple[float, bool]:
    """`build` into `folder` (a new one), or, with `kept`, a copy of the store built there
    before for the same size and corpus (`source` is then taken past its memories), and
    one built now kept there: a 100,000-memory store takes minutes to build, and two
    checkouts measured on one `kept` folder measure the very same files. The build's
    seconds (as when it was built) and whether it was copied."""
    mark = hashlib.sha256("\n".join(turns).encode()).hexdigest()[:12]
    keep = kept / f"n{size}-{mark}" if kept is not None else None
    done = keep.with_suffix(".json") if keep is not None else None
    if keep is not None and done is not None and done.exists():
        shutil.copytree(keep, folder, ignore=STORE_COPY_IGNORE)
        for _ in range(size):
            next(source)
        return float(json.loads(done.read_text())["build_s"]), True
    folder.mkdir(parents=True, exist_ok=True)
    seconds = round(build(folder, size, source), 1) if size else 0.0
    if keep is not None and done is not None:
        shutil.rmtree(keep, ignore_errors=True)
        shutil.copytree(folder, keep, ignore=STORE_COPY_IGNORE)
        done.write_text(json.dumps({"build_s": seconds}))  # written last: the copy is whole
    return seconds, False


def sample_adds(store: Any, size: int, source: Iterator[str], count: int) -> list[float]:
    """Adds with the dedup check, after the build."""
    out = []
    with store.engine.batch():
        for index in range(count):
            when = START + STEP * (size + index)
            out.append(timed(lambda when=when: store.add(next(source), created_at=when)))
    return out


def in_process(
    store: Any, prompts: Sequence[str], now: datetime, api_calls: int, max_seconds: float
) -> dict[str, Any]:
    engine = store.engine
    first = warm_up(
        lambda p: engine.resolve(p, BUDGET, now=now, record_access=False), prompts, max_seconds
    )
    prompts = prompts[: len(first)]
    pure: list[float] = []
    as_used: list[float] = []
    with engine.batch():  # accesses recorded, the save deferred to the end
        in_blocks(
            [
                (pure, lambda p: engine.resolve(p, BUDGET, now=now, record_access=False)),
                (as_used, lambda p: engine.resolve(p, BUDGET, now=now)),
            ],
            prompts,
            max_seconds,
        )
    api = [timed(lambda p=p: store.resolve(p, budget=BUDGET, now=now)) for p in prompts[:api_calls]]
    return {
        "first_ms": percentiles(first),
        "pure_ms": percentiles(pure),
        "as_used_ms": percentiles(as_used),
        "api_ms": percentiles(api),
    }


def profile(store: Any, prompts: Sequence[str], now: datetime, top: int = 15) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for prompt in prompts:
        store.engine.resolve(prompt, BUDGET, now=now, record_access=False)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


# ---- the daemon -----------------------------------------------------------------------------
@contextlib.contextmanager
def daemon(folder: Path, timeout: float = 300.0) -> Iterator[tuple[str, int, float]]:
    """`mnemod run` on `folder`; yields its Redis URL, its pid and the seconds until it was
    serving."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")} | ENV
    args = [sys.executable, "-m", "mnemod.cli.main", "run", "--data-dir", str(folder)]
    env["PYTHONPATH"] = str(ROOT / "daemon")
    log = (folder / "daemon.log").open("wb")
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=env, text=True)
    try:
        assert proc.stdout is not None
        url = next(w for w in proc.stdout.readline().split() if w.startswith("unix://"))
        with contextlib.closing(connect(url, socket_timeout=60.0)) as client:
            deadline = time.monotonic() + timeout
            while client.hget("mnemod:{default}:status", "state") != "running":
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"daemon did not start; see {folder / 'daemon.log'}")
                time.sleep(0.1)
        yield url, proc.pid, time.perf_counter() - started
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        log.close()


def cpu_seconds(pid: int) -> float:
    """CPU time of all threads of a process so far, in ns resolution (Linux schedstat;
    NaN elsewhere)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
    except (OSError, ValueError):
        return float("nan")


def raw_asker(url: str, stream: str) -> Callable[[str], Any]:
    """A request as any language sends it: XADD, then BLPOP of the reply list."""
    client = connect(url, socket_timeout=60.0)
    counter = itertools.count()

    def ask(prompt: str) -> Any:
        reply_to = f"bench-reply:{os.getpid()}:{next(counter)}"
        fields = {"op": "resolve", "prompt": prompt, "budget": str(BUDGET), "reply_to": reply_to}
        client.xadd(stream, fields)
        popped = client.blpop([reply_to], timeout=60)
        if popped is None:
            raise RuntimeError("no reply within 60 s")
        return popped[1]

    return ask


FLOOR, ECHO, TWICE = "bench:floor", "bench:echo", "bench:twice"
TIMES = "bench:twice:times"


def floor_server(url: str, folder: Path) -> None:
    """The floor: the smallest server of the same answers, a redis-py loop around
    `engine.resolve` on a copy of the store (no daemon: no writer, no scheduler, no
    bookkeeping). It reads FLOOR and ECHO in a consumer group and replies like the daemon,
    with RPUSH + EXPIRE + XACK in one round trip; on ECHO with the answer it gave the same
    prompt before, when it has one. On TWICE it times the resolve it answers with and the
    same resolve repeated at once, and pushes both seconds to TIMES: the first ran right
    after the wait for the request, the second on the caches the first warmed."""
    store = mnemod.open(folder, config=CONFIG)
    client = connect(url, socket_timeout=60.0)
    for stream in (FLOOR, ECHO, TWICE):
        with contextlib.suppress(Exception):
            client.xgroup_create(stream, "floor", id="0", mkstream=True)
    answers: dict[str, bytes] = {}
    try:
        while True:
            streams = {FLOOR: ">", ECHO: ">", TWICE: ">"}
            read = client.xreadgroup("floor", "floor", streams, block=5000)  # type: ignore[arg-type]
            for stream, messages in read or []:
                for request_id, fields in messages:
                    if fields.get("op") == "stop":
                        return
                    prompt = fields["prompt"]
                    answer = answers.get(prompt) if stream == ECHO else None
                    pipe = client.pipeline(transaction=False)
                    if answer is None:
                        started = time.perf_counter()
                        result = store.engine.resolve(prompt, BUDGET, record_access=False)
                        cold = time.perf_counter() - started
                        answer = answers[prompt] = orjson.dumps(result_payload(result, False))
                        if stream == TWICE:
                            started = time.perf_counter()
                            store.engine.resolve(prompt, BUDGET, record_access=False)
                            again = time.perf_counter() - started
                            pipe.rpush(TIMES, f"{cold} {again}")
                    pipe.rpush(fields["reply_to"], answer)
                    pipe.expire(fields["reply_to"], 60)
                    pipe.xack(stream, "floor", request_id)
                    pipe.execute()
    finally:
        store.close()


def rpc_latency(
    url: str, pid: int, folder: Path, prompts: Sequence[str], max_seconds: float
) -> dict[str, Any]:
    """First pass, then `rpc` (the client), `raw` and `local` (in process, on a copy of
    `folder`) taking turns in blocks (`in_blocks`), then the floor and the echo: the same prompts
    answered by `floor_server` on the copy. `cpu_ms` is the server's CPU time per request,
    the daemon's (`pid`, its work between requests included) and the floor's."""
    copy = folder.parent / f"{folder.name}-floor"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("redis", "*.lock", "*.log"))
    memory = Client(url)
    raw = raw_asker(url, "mnemod:{default}:rpc")
    first = warm_up(lambda p: memory.resolve(p, budget=BUDGET, timeout=60), prompts, max_seconds)
    prompts = prompts[: len(first)]
    rpc: list[float] = []
    plain: list[float] = []
    here: list[float] = []
    store = mnemod.open(copy, config=CONFIG)
    engine = store.engine
    for prompt in prompts:
        engine.resolve(prompt, BUDGET, record_access=False)
    daemon_cpu = cpu_seconds(pid)
    with engine.batch():  # accesses recorded, the save deferred (as `as_used`)
        in_blocks(
            [
                (rpc, lambda p: memory.resolve(p, budget=BUDGET, timeout=60)),
                (plain, raw),
                (here, lambda p: engine.resolve(p, BUDGET)),
            ],
            prompts,
            max_seconds,
        )
    daemon_cpu = cpu_seconds(pid) - daemon_cpu  # its work between requests included
    store.close()
    daemon_cpu /= len(rpc) + len(plain)
    memory.close()
    server = multiprocessing.get_context("fork").Process(
        target=floor_server, args=(url, copy), daemon=True
    )
    server.start()
    try:
        ask, echo = raw_asker(url, FLOOR), raw_asker(url, ECHO)
        warm_up(ask, prompts, max_seconds)  # also waits until the store is open
        cpu_before = cpu_seconds(server.pid or 0)
        floor = [timed(lambda p=prompt: ask(p)) for prompt in prompts[: len(rpc)]]
        floor_cpu = (cpu_seconds(server.pid or 0) - cpu_before) / len(floor)
        echoed = [timed(lambda p=prompt: echo(p)) for prompt in prompts[: len(rpc)]]
        twice = raw_asker(url, TWICE)
        for prompt in prompts[: len(rpc)]:
            twice(prompt)
        pairs = [line.split() for line in connect(url).lrange(TIMES, 0, -1)]
    finally:
        connect(url).xadd(FLOOR, {"op": "stop"})
        server.join(timeout=60)
        shutil.rmtree(copy, ignore_errors=True)
    return {
        "rpc_first_ms": percentiles(first),
        "rpc_ms": percentiles(rpc),
        "raw_ms": percentiles(plain),
        "local_ms": percentiles(here),
        "floor_ms": percentiles(floor),
        "echo_ms": percentiles(echoed),
        "server_first_ms": percentiles([float(first) for first, _ in pairs]),
        "server_again_ms": percentiles([float(again) for _, again in pairs]),
        "cpu_ms": {"daemon": round(daemon_cpu * 1000, 3), "floor": round(floor_cpu * 1000, 3)},
    }


# ---- main -----------------------------------------------------------------------------------
def run_size(
    size: int, turns: list[str], prompts: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    rng = random.Random(size)
    source = memories(turns, rng)
    row: dict[str, Any] = {"entries": size}
    with tempfile.TemporaryDirectory(prefix="mnemod-speed-") as name:
        folder = Path(name) / "store"
        # adds with the normal dedup check are timed afterwards on the full store
        kept = Path(args.stores) if args.stores else None
        row["build_s"], row["copied"] = kept_build(folder, size, turns, source, kept)
        store = mnemod.open(folder, config=CONFIG)
        try:
            adds = sample_adds(store, size, source, args.adds)
            row["add_ms"] = percentiles(adds)
            now = START + STEP * (size + args.adds) + timedelta(days=1)
            api_calls = 20 if size <= 10_000 else 3
            row.update(in_process(store, prompts, now, api_calls, args.max_seconds))
            if args.profile and size == max(args.sizes):
                row["profile"] = profile(store, prompts[:20], now)
            row["stored"] = len(store.engine.entries)
        finally:
            row["close_s"] = round(timed(store.close), 2)
        if args.rpc:
            with daemon(folder) as (url, pid, ready):
                row["daemon_start_s"] = round(ready, 2)
                row.update(rpc_latency(url, pid, folder, prompts, args.max_seconds))
            row["rpc_minus_local_ms"] = round(row["rpc_ms"]["p50"] - row["local_ms"]["p50"], 3)
            row["rpc_minus_used_ms"] = round(row["rpc_ms"]["p50"] - row["as_used_ms"]["p50"], 3)
            floor = row["floor_ms"]["p50"]
            row["floor_transport_ms"] = round(floor - row["server_first_ms"]["p50"], 3)
            row["raw_minus_floor_ms"] = round(row["raw_ms"]["p50"] - floor, 3)
    return row


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "locomo-dev.jsonl"))
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=60, help="distinct prompts")
    parser.add_argument("--adds", type=int, default=20, help="timed adds with dedup check")
    parser.add_argument("--max-seconds", type=float, default=12.0, help="per size and pass")
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=0.0,
        help="idle before every timed call, as an agent between prompts (in process and RPC)",
    )
    parser.add_argument("--no-rpc", dest="rpc", action="store_false")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    parser.add_argument(
        "--stores", default=None, help="kept stores, copied rather than built (see kept_build)"
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "resolve_speed.json"))
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    PAUSE[0] = args.pause_ms / 1000
    turns, questions, label = corpus(Path(args.data))
    prompts = random.Random(1).sample(questions, min(args.queries, len(questions)))
    rows = [run_size(size, turns, prompts, args) for size in args.sizes]

    pause = f", {args.pause_ms:g} ms idle before each call" if args.pause_ms else ""
    print(f"resolve latency, budget {BUDGET}, {len(prompts)} prompts{pause}, corpus: {label}")
    head = (
        "entries",
        "build s",
        "add p50",
        "first p50",
        "pure p50",
        "pure p99",
        "used p50",
        "used p99",
        "api p50",
        "rpc p50",
        "rpc p99",
        "raw p50",
        "local p50",
        "floor p50",
        "echo p50",
        "srv first",
        "srv again",
        "rpc-local",
        "rpc-used",
        "floor tx",
        "raw-floor",
        "cpu/req",
        "floor cpu",
    )
    print("".join(f"{h:>10}" for h in head) + "   (ms unless noted)")
    for r in rows:
        cells = [
            r["entries"],
            r["build_s"],
            r["add_ms"]["p50"],
            r["first_ms"]["p50"],
            r["pure_ms"]["p50"],
            r["pure_ms"]["p99"],
            r["as_used_ms"]["p50"],
            r["as_used_ms"]["p99"],
            r["api_ms"]["p50"],
            r.get("rpc_ms", {}).get("p50", "-"),
            r.get("rpc_ms", {}).get("p99", "-"),
            r.get("raw_ms", {}).get("p50", "-"),
            r.get("local_ms", {}).get("p50", "-"),
            r.get("floor_ms", {}).get("p50", "-"),
            r.get("echo_ms", {}).get("p50", "-"),
            r.get("server_first_ms", {}).get("p50", "-"),
            r.get("server_again_ms", {}).get("p50", "-"),
            r.get("rpc_minus_local_ms", "-"),
            r.get("rpc_minus_used_ms", "-"),
            r.get("floor_transport_ms", "-"),
            r.get("raw_minus_floor_ms", "-"),
            r.get("cpu_ms", {}).get("daemon", "-"),
            r.get("cpu_ms", {}).get("floor", "-"),
        ]
        print("".join(f"{c:>10.4g}" if isinstance(c, float) else f"{c:>10}" for c in cells))
    for r in rows:
        if "profile" in r:
            print(f"\ncProfile of {r['entries']} entries, pure resolve:\n{r['profile']}")
    payload = {
        "budget": BUDGET,
        "corpus": label,
        "prompts": len(prompts),
        "pause_ms": args.pause_ms,
        "sizes": rows,
    }
    write_results(args.out, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
