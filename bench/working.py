"""Working memory: get and update latency from 1 to 64 caller processes, lost updates,
promotion lag, promotion across kill -9 and across a Redis restart, ``context`` with a
thread against without, and Redis memory per thread.

One embedded PostgreSQL and Redis, ``memoryd worker --queues memory`` (its default
consumers) and, for the HTTP path, one ``memoryd gateway`` process. Sections (``--only``
picks some; each reports into the same JSON):

- ``memory``: Redis ``used_memory`` before and after seeding ``--threads`` threads of the
  standard shape (``--messages`` messages, a few variables, a flag, a counter), per thread;
  and ``MEMORY USAGE`` of one thread's keys.
- ``latency``: ``--threads`` live threads; ``--processes`` caller processes (spawned) each
  mixing get and update (one message appended, one counter incremented) on random threads
  for ``--seconds`` (back to back, or ``--pace`` calls per second each, Poisson
  arrivals), per path: ``inproc`` (``WorkingStore``), ``client``
  (``MemoryClient``), ``http`` (httpx against the gateway, an agent key). The threads are
  seeded afresh before each path, so each sees the same sizes; each step starts with
  another path. No worker runs meanwhile.
- ``lost``: ``--lost-processes`` processes x ``--lost-updates`` updates of ONE thread, each
  appending a message and incrementing a counter; then the thread is ended and its session
  read back: every acknowledged update in the counter, the version and long-term memory.
- ``lag``: ``--lag-threads`` threads with ``ttl_seconds=1``; seconds from each one's
  deadline to its messages committed in long-term memory (the worker's sweep every
  ``--sweep-interval``, default 10 s).
- ``kill``: ``--kill-threads`` ended threads sent to promotion; the worker is SIGKILLed
  (its process group) once ``--kill-at`` of the messages are written, a new one started;
  messages lost or doubled per thread (the ledger and ``session_messages``).
- ``context``: ``context(agent, q)`` against ``context(agent, q, thread_id=t)`` on the same
  store, call by call in alternating order.
- ``redis``: writers updating threads of a Redis of their own, which is SHUT DOWN (its
  append-only file on) and started again mid-way; the writers retry on ``Unavailable``
  (reading the thread first, so that an update applied but not acknowledged is not sent
  twice); every acknowledged update must be there afterwards.

Targets (2-core VM) are printed beside the figures, never asserted.

    .venv/bin/python -m bench.working [--only latency,lost,...] [--processes 1,8,64]
                                      [--seconds 5] [--out PATH]

Run it alone on the machine (``flock /tmp/memoryd-bench.lock``). See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import (
    OUT_DIR,
    Stopwatch,
    Timer,
    embedded_postgres,
    format_table,
    let_service_user_in,
    machine_info,
    now_iso,
    write_json,
)

DEFAULT_OUT = OUT_DIR / "working.json"
SECTIONS = ("memory", "latency", "lost", "lag", "kill", "context", "redis")
PATHS = ("inproc", "client", "http")
OPS = ("get", "update")
TARGETS = {"client_p95_ms": 2.0, "http_p95_ms": 6.0, "at_callers": 8,
           "context_p95_ratio": 1.3}
WARMUP_CALLS = 5
POLL_S = 0.05
GIVE_UP_S = 120.0  # a writer's retries of one update through a Redis restart

AGENTS = {section: f"bench-working-{section}" for section in SECTIONS}


# --- the services ----------------------------------------------------------------------
class Worker:
    """``memoryd worker --queues memory`` (its default consumers) in a process group of
    its own, so that one signal reaches all of it."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "worker", "--no-migrate", "--queues", "memory"],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_ready(self, broker: str, log: Path) -> None:
        from celery import Celery

        app = Celery("bench-ping", broker=broker, set_as_current=False)
        app.conf.update(broker_connection_retry_on_startup=True, accept_content=["json"])
        waited = Timer()
        try:
            while not app.control.ping(timeout=0.5):
                if self.proc.poll() is not None or waited.seconds > 180:
                    raise RuntimeError(f"worker did not start; see {log}")
        finally:
            app.close()

    def kill(self) -> None:
        """SIGKILL the whole group: the consumers die mid-task, as on a host failure."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._log.close()

    def stop(self) -> None:
        from bench.recall import stop_process_group

        stop_process_group(self.proc)
        self._log.close()


class Stack:
    """PostgreSQL (given), an embedded Redis, the bench's own ``WorkingStore`` and
    ``MemoryClient`` on it, and the memory worker, started when a section needs it."""

    def __init__(self, url: str, workdir: Path, args: argparse.Namespace) -> None:
        from sqlalchemy import create_engine

        from memoryd.client import MemoryClient
        from memoryd.config import Settings
        from memoryd.db.engine import normalize_url
        from memoryd.embedded.redis import EmbeddedRedis
        from memoryd.working.store import WorkingStore

        self.url, self.workdir = url, workdir
        self.redis = EmbeddedRedis(workdir / "redis")
        self.broker = self.redis.start()
        overrides = {} if args.lease is None else {"working_promote_lease_s": args.lease}
        self.settings = Settings(**overrides)
        self.working = WorkingStore.from_settings(self.settings, broker_url=self.broker)
        self.client = MemoryClient(broker_url=self.broker, timeout=600.0,
                                   settings=self.settings)
        self.env = {**os.environ, "MEMORYD_DATABASE_URL": url,
                    "MEMORYD_BROKER_URL": self.broker,
                    "MEMORYD_DATA_DIR": str(workdir / "data")}
        self.sweep_s = self.settings.working_sweep_interval_s
        if args.sweep_interval is not None:
            self.sweep_s = args.sweep_interval
            self.env["MEMORYD_WORKING_SWEEP_INTERVAL_S"] = str(args.sweep_interval)
        if args.lease is not None:
            self.env["MEMORYD_WORKING_PROMOTE_LEASE_S"] = str(args.lease)
        self._worker: Worker | None = None
        self._workers_started = 0
        self.engine = create_engine(normalize_url(url), pool_size=1)

    def worker(self) -> Worker:
        """The running worker, started (and waited for) if there is none."""
        if self._worker is None:
            self._workers_started += 1
            log = self.workdir / f"worker-{self._workers_started}.log"
            worker = Worker(self.env, log)
            try:
                worker.wait_ready(self.broker, log)
            except BaseException:
                worker.kill()
                raise
            self._worker = worker
        return self._worker

    def kill_worker(self) -> None:
        if self._worker is not None:
            self._worker.kill()
            self._worker = None

    def close(self) -> None:
        if self._worker is not None:
            self._worker.stop()
        self.client.close()
        self.working.close()
        self.engine.dispose()
        self.redis.stop()

    def sql(self, statement: str, **params: Any) -> list[Any]:
        """Rows of one statement, on a connection kept for the polls that follow."""
        from sqlalchemy import text

        with self.engine.connect() as conn:
            return list(conn.execute(text(statement), params))


def writer_key(url: str, agent: str) -> str:
    """A key that may read and write ``agent``, made as ``memoryd keys create`` makes it."""
    from memoryd.auth import keys, scope
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    try:
        with store.session() as session:
            made = keys.create(session, name="bench-working", agents=(agent,), prefixes=(),
                               permissions=scope.permissions(read_only=False, admin=False),
                               expires_at=None)
    finally:
        store.close()
    return made.key


# --- the standard thread ------------------------------------------------------------------
def say(contents: Sequence[str]) -> list[dict[str, str]]:
    return [{"role": "user" if n % 2 == 0 else "assistant", "content": content}
            for n, content in enumerate(contents)]


def turns(count: int, seed: int) -> list[str]:
    """``count`` chat turns of two generated sentences each (about 150 characters)."""
    from bench import scale as seeding

    pool = seeding.sentences(400, seed=seed)
    rng = random.Random(seed)
    return [f"{rng.choice(pool)} {rng.choice(pool)}" for _ in range(count)]


def standard_update(messages: Sequence[str], n: int) -> dict[str, Any]:
    """The standard thread's first update: its messages, a few variables, a flag, a
    counter, a topic and entities."""
    return {"messages": say(messages),
            "variables": {"user": {"name": f"User {n}", "locale": "en-GB"},
                          "plan": ["find a table", "confirm the time", "send the invite"],
                          "cart_total": 42.5},
            "set_flags": ["greeted"], "increment": {"turns": len(messages)},
            "topic": "booking a dinner", "entities": ["Ana", "Lisbon"]}


def thread_name(n: int) -> str:
    return f"thread-{n:05d}"


def seed_threads(working: Any, agent: str, threads: int, messages: int) -> None:
    """``threads`` threads of the standard shape, replacing any the agent had."""
    working.erase(agent)
    pool = turns(max(messages * 4, 40), seed=3)
    for n in range(threads):
        start = (n * 7) % max(1, len(pool) - messages)
        working.update(agent, thread_name(n), standard_update(pool[start:start + messages], n))


# --- section: Redis memory per thread -------------------------------------------------------
def measure_memory(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from memoryd.working.store import PREFIX, thread_tag

    agent = AGENTS["memory"]
    stack.working.erase(agent)
    redis = stack.working.redis
    before = int(redis.info("memory")["used_memory"])
    seed_threads(stack.working, agent, args.threads, args.messages)
    after = int(redis.info("memory")["used_memory"])
    tag = thread_tag(agent, thread_name(0))
    parts: dict[str, int] = {}
    for key in sorted(redis.scan_iter(match=f"{PREFIX}{tag}:*")):
        parts[str(key).rsplit(":", 1)[1]] = int(redis.memory_usage(key, samples=0) or 0)
    content = sum(len(m.content.encode()) for m in stack.working.get(
        agent, thread_name(0)).messages)
    stack.working.erase(agent)
    return {"threads": args.threads, "messages_per_thread": args.messages,
            "used_memory_before": before, "used_memory_after": after,
            "bytes_per_thread": round((after - before) / max(1, args.threads)),
            "one_thread_keys": parts, "one_thread_keys_total": sum(parts.values()),
            "one_thread_message_content_bytes": content}


# --- section: latency from caller processes -----------------------------------------------
@dataclass(frozen=True)
class Target:
    """What a caller process needs to reach each path."""

    broker: str
    base: str | None
    key: str | None
    agent: str
    threads: int
    update_share: float
    seconds: float
    paths: tuple[str, ...]
    # Calls per second of each caller (0: as fast as it can, a closed loop): a fleet's
    # agents call between model turns, not back to back.
    pace: float = 0.0


@dataclass
class Samples:
    """One caller's (or all callers') latencies (ms) per op and its errors by type."""

    ms: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPS})
    errors: Counter[str] = field(default_factory=Counter)

    def merge(self, other: Samples) -> None:
        for op in OPS:
            self.ms[op].extend(other.ms[op])
        self.errors.update(other.errors)

    def summary(self, seconds: float) -> dict[str, Any]:
        from bench.recall import percentiles

        ops = {op: {**percentiles(self.ms[op]), "per_s": round(len(self.ms[op]) / seconds, 1),
                    "errors": sum(n for k, n in self.errors.items() if k.startswith(op))}
               for op in OPS}
        calls = sum(len(v) for v in self.ms.values())
        return {**ops, "ops_per_s": round(calls / seconds, 1),
                "errors": sum(self.errors.values()), "error_types": dict(self.errors)}


Op = Callable[[str, str], object]


def path_ops(target: Target, path: str, closers: ExitStack) -> dict[str, Op]:
    """The get and update of ``path``; (thread, text) -> anything, raising on failure."""
    def update_body(text: str) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": text}], "increment": {"turns": 1}}

    if path == "inproc":
        from memoryd.config import Settings
        from memoryd.working.store import WorkingStore

        store = WorkingStore.from_settings(Settings(), broker_url=target.broker)
        closers.callback(store.close)
        return {"get": lambda t, _: store.get(target.agent, t),
                "update": lambda t, text: store.update(target.agent, t, update_body(text))}
    if path == "client":
        from memoryd.client import MemoryClient

        client = closers.enter_context(MemoryClient(broker_url=target.broker, timeout=60.0))
        return {"get": lambda t, _: client.working(target.agent, t),
                "update": lambda t, text: client.update_working(target.agent, t,
                                                                update_body(text))}
    import httpx

    http = closers.enter_context(httpx.Client(
        base_url=target.base or "", timeout=60.0,
        headers={"Authorization": f"Bearer {target.key}"}))
    url = f"/v1/agents/{target.agent}/threads/"

    def answered(response: httpx.Response) -> None:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}")

    return {"get": lambda t, _: answered(http.get(url + t)),
            "update": lambda t, text: answered(http.patch(url + t, json=update_body(text)))}


def run_ops(ops: dict[str, Op], target: Target, rng: random.Random, tag: str,
            seconds: float) -> Samples:
    samples = Samples()
    end = time.perf_counter() + seconds
    n = 0
    due = time.perf_counter()
    while time.perf_counter() < end:
        if target.pace:  # open loop: each call at its time, whenever the last finished
            due += rng.expovariate(target.pace)
            time.sleep(max(0.0, due - time.perf_counter()))
        op = "update" if rng.random() < target.update_share else "get"
        thread = thread_name(rng.randrange(target.threads))
        n += 1
        began = time.perf_counter()
        try:
            ops[op](thread, f"{tag} says hello again, turn {n}.")
        except Exception as exc:  # every failure counts, whatever it is
            samples.errors[f"{op}: {type(exc).__name__}"] += 1
        else:
            samples.ms[op].append((time.perf_counter() - began) * 1000)
    return samples


def caller(target: Target, seed: str, ready: Any, go: Sequence[Any], results: Any) -> None:
    """One caller process: every path connected and warmed up, then for each path in
    turn, once the parent sets its ``go``, calls for ``target.seconds``."""
    rng = random.Random(seed)
    with ExitStack() as closers:
        ops = {path: path_ops(target, path, closers) for path in target.paths}
        for calls in ops.values():
            for _ in range(WARMUP_CALLS):
                calls["get"](thread_name(rng.randrange(target.threads)), "")
        ready.put(os.getpid())
        for path, event in zip(target.paths, go, strict=True):
            event.wait()
            samples = run_ops(ops[path], target, rng, f"caller {seed}", target.seconds)
            results.put((path, samples.ms, dict(samples.errors)))


@contextmanager
def running(procs: Sequence[Any]) -> Iterator[None]:
    """The processes started; afterwards joined (30 s in all), and killed if still there
    (at once when the block failed: they may wait for a signal that never comes)."""
    for proc in procs:
        proc.start()
    grace = 0.0
    try:
        yield
        grace = 30.0
    finally:
        deadline = time.monotonic() + grace
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(5)


def collect(queue: Any, procs: Sequence[Any], timeout: float) -> Any:
    """The next item a caller process puts on ``queue``; a caller that died instead
    fails the step at once rather than at the timeout."""
    import queue as queues

    clock = Timer()
    while clock.seconds < timeout:
        try:
            return queue.get(timeout=1.0)
        except queues.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"a caller process exited with {dead[0]}") from None
    raise RuntimeError(f"no answer from the caller processes in {timeout:g} s")


def run_step(stack: Stack, target: Target, processes: int, threads: int,
             messages: int) -> dict[str, Any]:
    """``processes`` callers through every path in turn, the threads seeded before each."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    results, ready = ctx.Queue(), ctx.Queue()
    go = [ctx.Event() for _ in target.paths]
    procs = [ctx.Process(target=caller, args=(target, f"{processes}-{n}", ready, go, results))
             for n in range(processes)]
    with running(procs):
        for _ in procs:
            collect(ready, procs, 600)
        step: dict[str, Any] = {}
        for path, event in zip(target.paths, go, strict=True):
            seed_threads(stack.working, target.agent, threads, messages)
            event.set()
            merged = Samples()
            for _ in procs:
                _, ms, errors = collect(results, procs, target.seconds + 300)
                merged.merge(Samples(ms, Counter(errors)))
            step[path] = merged.summary(target.seconds)
            print(f"latency {processes:>3} callers {path:>6}: {step[path]['ops_per_s']} ops/s, "
                  f"get p95 {step[path]['get'].get('p95')} ms, update p95 "
                  f"{step[path]['update'].get('p95')} ms", file=sys.stderr, flush=True)
    return step


def measure_latency(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from bench import gateway as bench_gateway

    agent = AGENTS["latency"]
    paths = tuple(args.paths)
    with ExitStack() as services:
        base = key = None
        if "http" in paths:
            key = writer_key(stack.url, agent)
            base = services.enter_context(
                bench_gateway.gateway(stack.url, stack.broker, stack.workdir))
        target = Target(broker=stack.broker, base=base, key=key, agent=agent,
                        threads=args.threads, update_share=args.update_share,
                        seconds=args.seconds, paths=paths, pace=args.pace)
        steps: dict[str, Any] = {}
        for number, n in enumerate(args.processes):
            # Each path goes first in turn: drift of a shared VM hits none alone.
            turn = number % len(paths)
            order = replace(target, paths=paths[turn:] + paths[:turn])
            steps[str(n)] = run_step(stack, order, n, args.threads, args.messages)
    stack.working.erase(agent)  # no backlog of trimmed messages for the later sections
    return {"threads": args.threads, "messages_per_thread": args.messages,
            "seconds": args.seconds, "update_share": args.update_share, "pace": args.pace,
            "steps": steps}


# --- section: lost updates ----------------------------------------------------------------
def hammer(broker: str, agent: str, thread: str, updates: int, name: str, ready: Any,
           go: Any, results: Any) -> None:
    """One process: ``updates`` updates of ``thread`` through its own client, each
    appending a message and incrementing ``count``; the contents acknowledged."""
    from memoryd.client import MemoryClient

    acknowledged: list[str] = []
    errors: Counter[str] = Counter()
    with MemoryClient(broker_url=broker, timeout=60.0) as client:
        client.working(agent, "warm-up")
        ready.put(os.getpid())
        go.wait()
        for n in range(updates):
            content = f"Process {name} update {n}: the plan still stands."
            try:
                client.update_working(agent, thread, messages=[{"role": "user",
                                                                "content": content}],
                                      increment={"count": 1})
            except Exception as exc:  # counted; its message may or may not be there
                errors[type(exc).__name__] += 1
            else:
                acknowledged.append(content)
    results.put((acknowledged, dict(errors)))


def measure_lost(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    import multiprocessing as mp

    agent, thread = AGENTS["lost"], "one-thread"
    stack.working.erase(agent)
    stack.worker()  # promotes what the thread trims meanwhile
    ctx = mp.get_context("spawn")
    results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=hammer, args=(stack.broker, agent, thread, args.lost_updates,
                                              str(n), ready, go, results))
             for n in range(args.lost_processes)]
    acknowledged: list[str] = []
    errors: Counter[str] = Counter()
    with running(procs):
        for _ in procs:
            collect(ready, procs, 600)
        clock = Timer()
        go.set()
        for _ in procs:
            acked, errs = collect(results, procs, 600)
            acknowledged.extend(acked)
            errors.update(errs)
        seconds = clock.stop()
    state = stack.working.get(agent, thread)
    seqs = [m.seq for m in state.messages]
    ended = stack.client.end_thread(agent, thread, timeout=600)
    found = Counter(m.content for m in stack.client.session_messages(agent, thread))
    expected = args.lost_processes * args.lost_updates
    return {"processes": args.lost_processes, "updates_each": args.lost_updates,
            "expected": expected, "acknowledged": len(acknowledged),
            "errors": sum(errors.values()), "error_types": dict(errors),
            "seconds": round(seconds, 3),
            "updates_per_s": round(len(acknowledged) / seconds, 1) if seconds else 0.0,
            "counter": state.counters.get("count", 0), "version": state.version,
            "messages_numbered": max(seqs, default=0),
            "messages_kept_plus_trimmed": len(state.messages) + state.promoted,
            "lost_counter": len(acknowledged) - state.counters.get("count", 0),
            "lost_version": len(acknowledged) - state.version,
            "promoted_on_end": ended.promoted,
            "lost_messages": sum(1 for c in acknowledged if c not in found),
            "doubled_messages": sum(n - 1 for n in found.values() if n > 1)}


# --- section: promotion lag ----------------------------------------------------------------
LEDGER = """
SELECT thread_id, count(*), max(promoted_at) FROM working_promotions
WHERE agent_id = :a GROUP BY thread_id
"""


def ledger(stack: Stack, agent: str) -> dict[str, tuple[int, datetime]]:
    """Per thread: messages promoted and when the last of them was written."""
    return {str(t): (int(n), at) for t, n, at in stack.sql(LEDGER, a=agent)}


def wait_promoted(stack: Stack, agent: str, wanted: dict[str, int], timeout: float
                  ) -> dict[str, tuple[int, datetime]]:
    """The ledger once every thread of ``wanted`` holds its count (or at the deadline)."""
    clock = Timer()
    while True:
        found = ledger(stack, agent)
        done = all(found.get(t, (0, None))[0] >= n for t, n in wanted.items())
        if done or clock.seconds > timeout:
            return found
        time.sleep(POLL_S)


def session_counts(stack: Stack, agent: str, threads: Sequence[str]
                   ) -> dict[str, Counter[str]]:
    return {t: Counter(m.content for m in stack.client.session_messages(agent, t))
            for t in threads}


def losses(sent: dict[str, list[str]], found: dict[str, Counter[str]]) -> dict[str, int]:
    return {"lost": sum(1 for t, cs in sent.items() for c in cs if not found[t][c]),
            "doubled": sum(n - 1 for counts in found.values() for n in counts.values()
                           if n > 1)}


def measure_lag(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from bench.recall import percentiles

    agent = AGENTS["lag"]
    stack.working.erase(agent)
    stack.worker()
    pool = turns(args.lag_threads * args.lag_messages, seed=9)
    sent: dict[str, list[str]] = {}
    deadlines: dict[str, datetime] = {}
    for n in range(args.lag_threads):
        thread = f"lag-{n:04d}"
        sent[thread] = [f"{thread} turn {i}: {text}" for i, text in enumerate(
            pool[n * args.lag_messages:(n + 1) * args.lag_messages])]
        state = stack.client.update_working(agent, thread, messages=say(sent[thread]),
                                            ttl_seconds=1)
        assert state.expires_at is not None
        deadlines[thread] = state.expires_at
    found = wait_promoted(stack, agent, {t: len(cs) for t, cs in sent.items()},
                          timeout=10 * stack.sweep_s + 300)
    lags = [(found[t][1] - deadlines[t]).total_seconds() * 1000 for t in sent if t in found]
    counts = losses(sent, session_counts(stack, agent, list(sent)))
    return {"threads": args.lag_threads, "messages_each": args.lag_messages,
            "sweep_interval_s": stack.sweep_s, "promoted_threads": len(lags),
            "lag_ms": percentiles(lags), **counts}


# --- section: kill -9 of the promoting worker ------------------------------------------------
def send_promotions(stack: Stack, tags: Sequence[str]) -> None:
    """``memoryd.working.promote`` for each tag, as ``end_thread`` sends it, waiting for
    nothing."""
    from celery import Celery

    from memoryd.celery_config import MEMORY_QUEUE, celery_config
    from memoryd.working.store import PROMOTE_TASK

    app = Celery("bench-working", set_as_current=False)
    app.conf.update(celery_config(stack.settings, broker_url=stack.broker, caller=True))
    try:
        for tag in tags:
            app.send_task(PROMOTE_TASK, kwargs={"tag": tag}, queue=MEMORY_QUEUE)
    finally:
        app.close()


def measure_kill(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from memoryd.working.store import PREFIX

    agent = AGENTS["kill"]
    stack.working.erase(agent)
    stack.worker()
    pool = turns(args.kill_threads * args.kill_messages, seed=13)
    sent = {f"kill-{n:04d}": [f"kill-{n:04d} turn {i}: {text}" for i, text in enumerate(
        pool[n * args.kill_messages:(n + 1) * args.kill_messages])]
        for n in range(args.kill_threads)}
    for thread, contents in sent.items():
        stack.working.update(agent, thread, {"messages": say(contents)})
    tags = [tag for tag in (stack.working.retire(agent, t) for t in sent) if tag]
    total = sum(len(cs) for cs in sent.values())
    send_promotions(stack, tags)
    at_kill = kill_when_written(stack, agent, int(total * args.kill_at))
    clock = Timer()
    stack.worker()  # a new one: its sweep hands over the killed one's claims
    lease = stack.settings.working_promote_lease_s
    found = wait_promoted(stack, agent, {t: len(cs) for t, cs in sent.items()},
                          timeout=lease + 10 * stack.sweep_s + 300)
    waiting = stack.working.redis
    while any(waiting.zscore(f"{PREFIX}work", tag) is not None for tag in tags) \
            and clock.seconds < lease + 600:
        time.sleep(POLL_S)
    recovered = clock.stop()
    ledger_rows = sum(n for n, _ in found.values())
    counts = losses(sent, session_counts(stack, agent, list(sent)))
    return {"threads": args.kill_threads, "messages_each": args.kill_messages,
            "messages": total, "written_at_kill": at_kill,
            "killed_mid_way": 0 < at_kill < total, "lease_s": lease,
            "recovered_s": round(recovered, 2), "ledger_rows": ledger_rows,
            "ledger_lost": total - ledger_rows, **counts}


def kill_when_written(stack: Stack, agent: str, threshold: int) -> int:
    """SIGKILL the worker once the ledger holds ``threshold`` messages; how many it held."""
    written = 0
    clock = Timer()
    while clock.seconds < 600:
        written = sum(n for n, _ in ledger(stack, agent).values())
        if written >= threshold:
            break
        time.sleep(0.02)
    stack.kill_worker()
    return written


# --- section: context with a thread against without -------------------------------------------
def measure_context(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from bench import scale as seeding
    from bench.recall import percentiles

    agent, thread = AGENTS["context"], "context-thread"
    stack.working.erase(agent)
    stack.worker()
    client = stack.client
    memories = seeding.sentences(args.context_memories, seed=17)
    for start in range(0, len(memories), 250):
        client.store_many(agent, [{"content": t} for t in memories[start:start + 250]])
    client.update_working(agent, thread, standard_update(turns(args.messages, seed=19), 0))
    calls: dict[str, Callable[[str], object]] = {
        "without_thread": lambda q: client.context(agent, q),
        "with_thread": lambda q: client.context(agent, q, thread_id=thread)}
    queries = seeding.queries(args.context_queries + WARMUP_CALLS, seed=23)
    for q in queries[:WARMUP_CALLS]:
        for call in calls.values():
            call(q)
    ms: dict[str, list[float]] = {name: [] for name in calls}
    for n, q in enumerate(queries[WARMUP_CALLS:]):
        for name in (list(calls) if n % 2 == 0 else list(reversed(calls))):
            clock = Timer()
            calls[name](q)
            ms[name].append(clock.stop() * 1000)
    result: dict[str, Any] = {"memories": args.context_memories,
                              "queries": args.context_queries,
                              **{name: percentiles(v) for name, v in ms.items()}}
    base = result["without_thread"].get("p95")
    result["p95_ratio"] = round(result["with_thread"]["p95"] / base, 3) if base else None
    return result


# --- section: a Redis restart under updates ------------------------------------------------------
@dataclass
class Writer:
    """One writer's threads of at most 40 messages each (no trimming: every message
    stays in Redis) and what it knows it wrote."""

    number: int
    acknowledged: dict[str, list[str]] = field(default_factory=dict)
    retries: int = 0
    given_up: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def thread(self, n: int) -> str:
        return f"restart-w{self.number}-{n // 40}"


def write_through_restart(client: Any, agent: str, writer: Writer, updates: int,
                          progress: Callable[[], None]) -> None:
    """``updates`` updates, each retried until acknowledged (or given up after
    ``GIVE_UP_S``)."""
    for n in range(updates):
        thread = writer.thread(n)
        content = f"Writer {writer.number} update {n}."
        if write_one(client, agent, thread, content, writer):
            writer.acknowledged.setdefault(thread, []).append(content)
        progress()


def write_one(client: Any, agent: str, thread: str, content: str, writer: Writer) -> bool:
    """One update, retried on ``Unavailable``. Before a retry the thread is read: an
    update applied whose answer was lost is found there and not sent twice."""
    from memoryd.errors import Unavailable

    sent = False
    clock = Timer()
    while clock.seconds < GIVE_UP_S:
        try:
            if sent and content in {m.content for m in client.working(agent, thread).messages}:
                return True
            sent = True
            client.update_working(agent, thread, messages=[{"role": "user",
                                                            "content": content}],
                                  increment={"count": 1})
            return True
        except Unavailable:
            writer.retries += 1
        except Exception as exc:  # counted, and retried like an outage
            writer.errors[type(exc).__name__] += 1
        time.sleep(0.02)
    writer.given_up += 1
    return False


def restart_redis(server: Any) -> float:
    """SHUTDOWN (the append-only file is flushed), wait for the exit, start it again on
    the same port and files; the seconds it was away."""
    import redis

    clock = Timer()
    conn = redis.Redis.from_url(server.url)
    with suppress(redis.ConnectionError):
        conn.shutdown()
    conn.close()
    while server.exit_status() is None:
        time.sleep(0.01)
    server.start()
    return clock.stop()


def measure_restart(stack: Stack, args: argparse.Namespace) -> dict[str, Any]:
    from memoryd.client import MemoryClient
    from memoryd.embedded.redis import EmbeddedRedis

    agent = AGENTS["redis"]
    server = EmbeddedRedis(stack.workdir / "redis-restart")
    url = server.start()
    writers = [Writer(n) for n in range(args.redis_writers)]
    done = Counter[str]()
    lock = threading.Lock()

    def progress() -> None:
        with lock:
            done["updates"] += 1

    clients = [MemoryClient(broker_url=url, timeout=60.0) for _ in writers]
    try:
        pool = [threading.Thread(target=write_through_restart,
                                 args=(c, agent, w, args.redis_updates, progress))
                for c, w in zip(clients, writers, strict=True)]
        for t in pool:
            t.start()
        total = args.redis_writers * args.redis_updates
        while done["updates"] < total // 3 and any(t.is_alive() for t in pool):
            time.sleep(0.01)
        at_restart = done["updates"]
        outage = restart_redis(server)
        for t in pool:
            t.join()
        return {"writers": args.redis_writers, "updates_each": args.redis_updates,
                "acknowledged_before_shutdown": at_restart, "outage_s": round(outage, 3),
                **restart_losses(clients[0], agent, writers)}
    finally:
        for c in clients:
            c.close()
        server.stop()


def restart_losses(client: Any, agent: str, writers: Sequence[Writer]) -> dict[str, Any]:
    lost = doubled = counter_off = acknowledged = 0
    for writer in writers:
        for thread, contents in writer.acknowledged.items():
            state = client.working(agent, thread)
            found = Counter(m.content for m in state.messages)
            acknowledged += len(contents)
            lost += sum(1 for c in contents if not found[c])
            doubled += sum(n - 1 for n in found.values() if n > 1)
            counter_off += abs(state.counters.get("count", 0) - len(contents))
    return {"acknowledged": acknowledged, "lost": lost, "doubled": doubled,
            "counter_mismatch": counter_off,
            "retries": sum(w.retries for w in writers),
            "given_up": sum(w.given_up for w in writers),
            "errors": sum(sum(w.errors.values()) for w in writers)}


# --- reporting --------------------------------------------------------------------------------
def verdict(value: float | None, limit: float) -> str:
    if value is None:
        return "n/a"
    return "met" if value <= limit else "missed"


def latency_table(section: dict[str, Any]) -> str:
    rows = []
    for callers, step in section["steps"].items():
        for path in (p for p in PATHS if p in step):
            s = step[path]
            limit = {"client": TARGETS["client_p95_ms"], "http": TARGETS["http_p95_ms"]
                     }.get(path)
            for op in OPS:
                target = ""
                if limit is not None and int(callers) == TARGETS["at_callers"]:
                    target = f"p95 <= {limit:g}: {verdict(s[op].get('p95'), limit)}"
                rows.append([path, callers, op, s[op].get("p50"), s[op].get("p95"),
                             s[op].get("p99"), s[op]["per_s"], s[op]["errors"], target])
            rows.append([path, callers, "both", "", "", "", s["ops_per_s"], s["errors"], ""])
    return format_table(["path", "callers", "op", "p50 ms", "p95 ms", "p99 ms", "ops/s",
                         "errors", "target"], rows, digits=2)


def checks_table(results: dict[str, Any]) -> str:
    """The exactly-once sections: what was expected against what was found."""
    rows: list[list[Any]] = []
    if "lost" in results:
        r = results["lost"]
        rows.append(["lost updates", r["acknowledged"],
                     f"counter {r['lost_counter']}, version {r['lost_version']}, "
                     f"messages {r['lost_messages']}", r["doubled_messages"], "0 / 0"])
    if "kill" in results:
        r = results["kill"]
        rows.append(["kill -9 promoter", r["messages"],
                     f"{r['lost']} (ledger {r['ledger_lost']})", r["doubled"], "0 / 0"])
    if "redis" in results:
        r = results["redis"]
        rows.append(["Redis restart", r["acknowledged"],
                     f"{r['lost']} (counter off {r['counter_mismatch']})", r["doubled"],
                     "0 / 0"])
    return format_table(["check", "expected", "lost", "doubled", "target"], rows)


def summary(report: dict[str, Any]) -> str:
    results = report["results"]
    parts = []
    if "latency" in results:
        parts.append("latency:\n" + latency_table(results["latency"]))
    if any(k in results for k in ("lost", "kill", "redis")):
        parts.append("exactly once:\n" + checks_table(results))
    if "lag" in results:
        lag = results["lag"]["lag_ms"]
        parts.append(f"promotion lag (sweep every {results['lag']['sweep_interval_s']:g} s): "
                     f"p50 {lag.get('p50')} ms, p95 {lag.get('p95')} ms, max "
                     f"{lag.get('max')} ms over {results['lag']['promoted_threads']} threads; "
                     f"lost {results['lag']['lost']}, doubled {results['lag']['doubled']}")
    if "context" in results:
        c = results["context"]
        parts.append(f"context p95: without a thread {c['without_thread'].get('p95')} ms, "
                     f"with {c['with_thread'].get('p95')} ms, ratio {c['p95_ratio']} "
                     f"(target <= {TARGETS['context_p95_ratio']}: "
                     f"{verdict(c['p95_ratio'], TARGETS['context_p95_ratio'])})")
    if "memory" in results:
        m = results["memory"]
        parts.append(f"Redis memory: {m['bytes_per_thread']:,} bytes per thread of "
                     f"{m['messages_per_thread']} messages ({m['threads']} threads); one "
                     f"thread's keys {m['one_thread_keys_total']:,} bytes for "
                     f"{m['one_thread_message_content_bytes']:,} bytes of message text")
    machine = report["machine"]
    parts.append(f"machine: {machine['cpus']} cores, {machine['cpu']}; {report['date']}")
    return "\n\n".join(parts)


# --- main -----------------------------------------------------------------------------------
def int_list(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v.strip()]


def choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(value: str) -> list[str]:
        names = [v.strip() for v in value.split(",") if v.strip()]
        unknown = sorted(set(names) - set(allowed))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}; choose from "
                                             f"{', '.join(allowed)}")
        return names
    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.working", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", type=choices(SECTIONS), default=list(SECTIONS),
                   help="sections, comma-separated (default all)")
    p.add_argument("--threads", type=int, default=1000, help="live threads (latency, memory)")
    p.add_argument("--messages", type=int, default=20, help="messages per seeded thread")
    p.add_argument("--processes", type=int_list, default=[1, 8, 64],
                   help="caller processes per latency step, comma-separated")
    p.add_argument("--paths", type=choices(PATHS), default=list(PATHS))
    p.add_argument("--seconds", type=float, default=5.0, help="per path and step")
    p.add_argument("--update-share", type=float, default=0.5)
    p.add_argument("--pace", type=float, default=0.0,
                   help="calls per second of each latency caller, Poisson arrivals "
                        "(default 0: back to back)")
    p.add_argument("--lost-processes", type=int, default=16)
    p.add_argument("--lost-updates", type=int, default=50, help="per process")
    p.add_argument("--lag-threads", type=int, default=100)
    p.add_argument("--lag-messages", type=int, default=5)
    p.add_argument("--sweep-interval", type=float, default=None,
                   help="the worker's MEMORYD_WORKING_SWEEP_INTERVAL_S (default its own, 10)")
    p.add_argument("--kill-threads", type=int, default=100)
    p.add_argument("--kill-messages", type=int, default=20)
    p.add_argument("--kill-at", type=float, default=0.3,
                   help="share of the messages written when the worker is killed")
    p.add_argument("--lease", type=int, default=None,
                   help="MEMORYD_WORKING_PROMOTE_LEASE_S (default memoryd's, 60)")
    p.add_argument("--context-memories", type=int, default=500)
    p.add_argument("--context-queries", type=int, default=200)
    p.add_argument("--redis-writers", type=int, default=4)
    p.add_argument("--redis-updates", type=int, default=200, help="per writer")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p.parse_args(argv)


RUNS: dict[str, Callable[[Stack, argparse.Namespace], dict[str, Any]]] = {
    "memory": measure_memory, "latency": measure_latency, "lost": measure_lost,
    "lag": measure_lag, "kill": measure_kill, "context": measure_context,
    "redis": measure_restart}


@contextmanager
def stack_on(workdir: Path, args: argparse.Namespace) -> Iterator[Stack]:
    from memoryd.memory.store import MemoryStore

    with embedded_postgres("memoryd-bench-working-") as url:
        store = MemoryStore(url)
        try:
            store.migrate()
        finally:
            store.close()
        stack = Stack(url, workdir, args)
        try:
            yield stack
        finally:
            stack.close()


def main(argv: Sequence[str] | None = None) -> int:
    from bench.fleet import bench_commit

    args = parse_args(argv)
    watch = Stopwatch()
    report: dict[str, Any] = {"benchmark": "working", "date": now_iso(),
                              "machine": machine_info(), "commit": bench_commit(),
                              "args": {k: v if not isinstance(v, Path) else str(v)
                                       for k, v in vars(args).items()},
                              "targets": TARGETS, "results": {}}
    with tempfile.TemporaryDirectory(prefix="memoryd-bench-working-") as tmp:
        workdir = let_service_user_in(Path(tmp))
        with ExitStack() as services:
            with watch("start"):
                stack = services.enter_context(stack_on(workdir, args))
            for section in SECTIONS:  # in this order whatever --only says
                if section in args.only:
                    with watch(section):
                        report["results"][section] = RUNS[section](stack, args)
    report["timings_s"] = watch.rounded()
    print(summary(report))
    write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
