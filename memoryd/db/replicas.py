"""Reads served by PostgreSQL streaming replicas, never staler than the reader's own writes.

With ``MEMORYD_DATABASE_REPLICA_URLS`` set, ``MemoryStore`` opens its pure reads through
``ReplicaSet.read_session``; every write and all maintenance stay on the primary.

Health. Each process checks every replica at most every ``replica_check_interval_s``,
lazily, on the first read after that long (no thread: nothing to restart after a fork).
A check reads the primary's WAL position and each replica's replay position. A replica
that cannot be reached, is not in recovery (promoted: it no longer follows the primary),
or lags more than ``replica_max_lag_s`` serves no reads until a later check finds it well.
Lag is an upper bound on how stale the replica is: zero when it has replayed what the
primary had written at this check; otherwise the age of the newest earlier check whose
primary position it has replayed, or, if that is shorter, the age of the last
transaction it replayed (``now() - pg_last_xact_replay_timestamp()``, which alone would
call an idle, caught-up replica stale).

Read-your-writes. After a write for an agent commits on the primary, the store records
the agent's mark: the primary's WAL insert position read after the commit (one read
before the commit could lie below the commit record). Marks live in Redis (the result
backend, else the broker, when it is Redis), under a hash of the agent id, raised
atomically, kept ``MARK_TTL_FLOOR_S`` or ten times the staleness a replica may have,
whichever is longer: every process, worker or gateway, sees them. A read for an agent
with a mark uses a replica only if that replica's replay position, read on the very
connection of the read before any of its statements, has reached the mark (each later
statement takes a snapshot after that answer, in READ COMMITTED, PostgreSQL's default;
the check is a statement of its own, because a statement's snapshot is taken before its
functions are evaluated; the mark is read from Redis while the replica answers it).
Otherwise the read goes to the primary. Without Redis, or with Redis unreachable, every
read goes to the primary: a mark that cannot be read is never assumed absent. A mark
that cannot be recorded fails the write's call after its commit (``Unavailable``): the
write stands and a retry finds it (every write is idempotent), but it is never
acknowledged without its mark.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from memoryd.config import Settings
from memoryd.db.engine import explicit_transactions, make_engine, session_scope
from memoryd.db.pipeline import pipeline
from memoryd.errors import NoBrokerConfigured, Unavailable
from memoryd.process import LOCK, Slot

log = structlog.get_logger(__name__)

CHECK_TIMEOUT_MS = 2000  # a health check's statements
CONNECT_TIMEOUT_S = 2  # a replica that does not answer is skipped this fast
MARKS_TIMEOUT_S = 0.5  # Redis round trips of the marks
MARKS_RETRY_S = 1.0  # after a failed Redis round trip, reads skip marks (use the primary)
MARK_TTL_FLOOR_S = 300
MARK_PREFIX = "memoryd:wal-mark:"
HISTORY = 256  # primary positions kept per process, one per check
# Raise a mark only: KEYS are the agents' keys, ARGV[1] the position as 16 hex digits
# (compared as two 32-bit halves: exact, unlike Lua's doubles), ARGV[2] the TTL.
_RAISE_MARKS = """
local new_hi = tonumber(string.sub(ARGV[1], 1, 8), 16)
local new_lo = tonumber(string.sub(ARGV[1], 9, 16), 16)
for _, key in ipairs(KEYS) do
  local old = redis.call('GET', key)
  local higher = true
  if old then
    local hi = tonumber(string.sub(old, 1, 8), 16)
    local lo = tonumber(string.sub(old, 9, 16), 16)
    higher = new_hi > hi or (new_hi == hi and new_lo > lo)
  end
  if higher then
    redis.call('SET', key, ARGV[1], 'EX', ARGV[2])
  else
    redis.call('EXPIRE', key, ARGV[2])
  end
end
return #KEYS
"""


def parse_lsn(value: str) -> int:
    """A ``pg_lsn`` as text (``16/B374D848``) as a number."""
    high, low = value.split("/")
    return (int(high, 16) << 32) + int(low, 16)


def format_lsn(value: int) -> str:
    """A number as a ``pg_lsn``'s text."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def safe_name(url: str) -> str:
    """A replica's name for logs and stats: host, port and database, never credentials."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or '/'}"


@dataclass(frozen=True)
class Health:
    """What the last check found of one replica."""

    state: str  # "ok", "down", "promoted", "lagging", or "unchecked"
    replay_lsn: int | None = None
    lag_s: float | None = None
    checked_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.state == "ok"


@dataclass
class Replica:
    """One replica: the engine reads use, a small one for checks, and its health."""

    name: str
    engine: Engine
    check_engine: Engine
    health: Health = field(default_factory=lambda: Health("unchecked"))

    def failed(self, now: float) -> None:
        """A read found it unreachable: skipped until the next check finds it well."""
        self.health = Health("down", checked_at=now)


class LagMeter:
    """The primary's WAL position at each recent check, to bound a replica's staleness."""

    def __init__(self) -> None:
        self._seen: deque[tuple[float, int]] = deque(maxlen=HISTORY)

    def add(self, at: float, primary_lsn: int) -> None:
        self._seen.append((at, primary_lsn))

    def lag(self, now: float, replay_lsn: int, replay_age_s: float | None) -> float:
        """At most how many seconds behind the primary a replica at ``replay_lsn`` is."""
        bounds = [] if replay_age_s is None else [max(replay_age_s, 0.0)]
        for at, primary_lsn in reversed(self._seen):
            if replay_lsn >= primary_lsn:
                bounds.append(now - at)
                break
        return min(bounds, default=float("inf"))


class Marks:
    """Each agent's mark (WAL position of its newest acknowledged write) in Redis."""

    def __init__(self, url: str, ttl_s: int) -> None:
        import redis

        self.ttl_s = ttl_s
        self._client = redis.Redis.from_url(url, socket_timeout=MARKS_TIMEOUT_S,
                                            socket_connect_timeout=MARKS_TIMEOUT_S)
        self._raise = self._client.register_script(_RAISE_MARKS)
        self._failed_at: float | None = None

    @staticmethod
    def key(agent_id: str) -> str:
        # A hash: agent ids may be a person's name or address, which Redis never holds.
        return MARK_PREFIX + hashlib.sha256(agent_id.encode()).hexdigest()

    def record(self, agent_ids: Iterable[str], lsn: int) -> None:
        """Raise the agents' marks to ``lsn``; ``Unavailable`` if Redis cannot."""
        import redis

        keys = sorted({self.key(agent) for agent in agent_ids})
        if not keys:
            return
        try:
            self._raise(keys=keys, args=[f"{lsn:016X}", self.ttl_s])
        except redis.RedisError as exc:
            self._failed_at = time.monotonic()
            raise Unavailable("the write was committed but its read-your-writes mark "
                              f"could not be recorded ({type(exc).__name__}); retry it") from None
        self._failed_at = None

    def get(self, agent_id: str) -> tuple[bool, int | None]:
        """(known, the agent's mark or None). Not known when Redis failed: the read must
        then use the primary."""
        import redis

        if self._failed_at is not None and time.monotonic() - self._failed_at < MARKS_RETRY_S:
            return False, None
        try:
            value = self._client.get(self.key(agent_id))
        except redis.RedisError as exc:
            self._failed_at = time.monotonic()
            log.warning("replicas.marks_unreachable", error=type(exc).__name__)
            return False, None
        self._failed_at = None
        return True, None if value is None else int(value, 16)

    def close(self) -> None:
        self._client.close()


class MarkRead:
    """One read's look at its agent's mark: asked of Redis once, on first use."""

    def __init__(self, marks: Marks, agent_id: str) -> None:
        self._marks = marks
        self._agent_id = agent_id
        self._value: tuple[bool, int | None] | None = None

    def get(self) -> tuple[bool, int | None]:
        """(known, the mark or None), as ``Marks.get``."""
        if self._value is None:
            self._value = self._marks.get(self._agent_id)
        return self._value


def marks_url(settings: Settings) -> str | None:
    """Where marks live: the result backend, else the broker, when it is Redis."""
    candidates = [settings.result_backend]
    with suppress(NoBrokerConfigured):  # no broker: no marks, reads stay on the primary
        candidates.append(settings.resolved_broker_url())
    for url in candidates:
        if url and url.startswith(("redis://", "rediss://", "unix://")):
            return url
    return None


class ReplicaSet:
    """The replicas of one primary, their health as this process last saw it, and the
    marks; ``read_session`` picks where one read goes."""

    def __init__(self, urls: list[str], *, max_lag_s: float, check_interval_s: float,
                 marks: Marks | None, pool_size: int | None = None) -> None:
        self.max_lag_s = max_lag_s
        self.check_interval_s = check_interval_s
        self.marks = marks
        self.replicas = [_replica(url, pool_size) for url in urls]
        self.lag = LagMeter()
        # Where reads went: a replica's name, "primary", or "primary:<why>".
        self.served: dict[str, int] = {}
        self._checked_at = float("-inf")
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._factories: dict[str, sessionmaker[Session]] = {}

    # --- writes ----------------------------------------------------------------------
    def mark(self, primary: Engine, agent_ids: Iterable[str]) -> None:
        """Record that the agents' latest writes, committed on ``primary`` just now, must
        be visible to their reads."""
        if self.marks is None:
            return
        agents = list(agent_ids)
        if not agents:
            return
        with primary.connect() as conn:
            lsn = conn.execute(text("SELECT pg_current_wal_insert_lsn()::text")).scalar_one()
        self.marks.record(agents, parse_lsn(lsn))

    # --- reads -----------------------------------------------------------------------
    @contextmanager
    def read_session(self, agent_id: str, primary: Engine) -> Iterator[Session]:
        """A session of explicit transactions (``memoryd.db.engine
        .explicit_transactions``) for pure reads of the agent's data: on a healthy
        replica that has replayed the agent's mark, else on ``primary``.
        ``session.info["replica"]`` names the replica, or is None on the primary."""
        session = self._replica_session(agent_id, primary)
        if session is None:
            with session_scope(primary, explicit=True) as on_primary:
                on_primary.info["replica"] = None
                yield on_primary
            return
        replica = session.info["replica"]
        try:
            yield session
        except DBAPIError as exc:
            if exc.connection_invalidated:
                self._by_name(replica).failed(time.monotonic())
            raise
        finally:
            session.close()  # a rollback: nothing was written

    def _replica_session(self, agent_id: str, primary: Engine) -> Session | None:
        if self.marks is None:
            return self._primary("no_marks")
        healthy = self.healthy(primary)
        if not healthy:
            return self._primary("no_healthy_replica")
        random.shuffle(healthy)
        mark = MarkRead(self.marks, agent_id)
        for replica in healthy:
            session, replayed = self._open(replica, mark)
            known, wanted = mark.get()
            if session is None:  # the replica failed: marked down, the next one is tried
                continue
            if not known:
                session.close()
                return self._primary("marks_unreachable")
            if replayed is None or (wanted is not None and replayed < wanted):
                session.close()  # reachable, but not yet at the agent's mark
                return self._primary("behind_mark")
            self._served(replica.name)
            return session
        return self._primary("replica_failed" if mark.get()[0] else "marks_unreachable")

    def _open(self, replica: Replica, mark: MarkRead) -> tuple[Session | None, int | None]:
        """A session on ``replica`` and the replay position it reported before any of
        its reads (None: not in recovery); no session if the replica failed (it is then
        marked down). The agent's mark is read from Redis while the replica answers (the
        check is sent ahead of its result: ``memoryd.db.pipeline``). The check is a
        transaction of its own: the reads' snapshots are taken after it."""
        factory = self._factories.get(replica.name)
        if factory is None:
            factory = self._factories[replica.name] = sessionmaker(
                replica.engine, expire_on_commit=False)
        session = factory()
        session.info["replica"] = replica.name
        try:
            explicit_transactions(session)
            with pipeline(session, begin=False) as pipe:
                sent = pipe.send("SELECT pg_last_wal_replay_lsn()::text AS replayed", {})
                mark.get()
            replayed = sent.rows()[0]["replayed"]
        except DBAPIError as exc:
            session.close()
            replica.failed(time.monotonic())
            log.warning("replicas.read_failed", replica=replica.name,
                        error=type(exc.orig).__name__)
            return None, None
        return session, None if replayed is None else parse_lsn(replayed)

    def _primary(self, why: str) -> Session | None:
        """The read goes to the primary (counted under ``why``): no replica session."""
        self._served(f"primary:{why}")
        return None

    def _served(self, where: str) -> None:
        self.served[where] = self.served.get(where, 0) + 1

    def _by_name(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.name == name)

    # --- health ----------------------------------------------------------------------
    def healthy(self, primary: Engine) -> list[Replica]:
        """The replicas that may serve reads, checked again first if the last check is
        older than the interval (by one thread; the others use the last one's view)."""
        if time.monotonic() - self._checked_at >= self.check_interval_s:
            self._refresh_once(primary)
        return [r for r in self.replicas if r.health.ok]

    def _refresh_once(self, primary: Engine) -> None:
        if self._pid != os.getpid():  # a lock held across a fork is never released
            self._lock, self._pid = threading.Lock(), os.getpid()
        if not self._lock.acquire(blocking=False):
            return
        try:
            if time.monotonic() - self._checked_at >= self.check_interval_s:
                self.refresh(primary)
        finally:
            self._lock.release()

    def refresh(self, primary: Engine) -> None:
        """Check the primary's WAL position, then each replica, now."""
        started = time.monotonic()
        try:
            with primary.connect() as conn:
                position = conn.execute(text("SELECT pg_current_wal_lsn()::text")).scalar_one()
            self.lag.add(started, parse_lsn(position))
        except DBAPIError as exc:
            log.warning("replicas.primary_check_failed", error=type(exc.orig).__name__)
        for replica in self.replicas:
            before = replica.health
            replica.health = self._check(replica)
            if replica.health.state != before.state:
                log.info("replicas.health", replica=replica.name, state=replica.health.state,
                         lag_s=replica.health.lag_s)
        self._checked_at = started

    def _check(self, replica: Replica) -> Health:
        now = time.monotonic()
        try:
            with replica.check_engine.connect() as conn:
                row = conn.execute(text(
                    "SELECT pg_is_in_recovery() AS recovering, "
                    "pg_last_wal_replay_lsn()::text AS replayed, "
                    "extract(epoch FROM now() - pg_last_xact_replay_timestamp()) AS age"
                )).one()
        except DBAPIError:
            return Health("down", checked_at=now)
        if not row.recovering or row.replayed is None:
            return Health("promoted", checked_at=now)
        replayed = parse_lsn(row.replayed)
        lag = self.lag.lag(now, replayed, None if row.age is None else float(row.age))
        state = "ok" if lag <= self.max_lag_s else "lagging"
        return Health(state, replay_lsn=replayed, lag_s=lag, checked_at=now)

    def dispose(self, after_fork: bool = False) -> None:
        for replica in self.replicas:
            replica.engine.dispose(close=not after_fork)
            replica.check_engine.dispose(close=not after_fork)
        if self.marks is not None and not after_fork:
            self.marks.close()


def _replica(url: str, pool_size: int | None) -> Replica:
    sep = "&" if "?" in url else "?"
    checked = url if "connect_timeout=" in url else f"{url}{sep}connect_timeout={CONNECT_TIMEOUT_S}"
    return Replica(name=safe_name(url), engine=make_engine(checked, pool_size=pool_size),
                   check_engine=make_engine(checked, pool_size=1,
                                            statement_timeout_ms=CHECK_TIMEOUT_MS))


def mark_ttl_s(settings: Settings) -> int:
    """How long a mark is kept: far longer than any replica serving reads can be behind."""
    stale = settings.replica_max_lag_s + settings.replica_check_interval_s
    return int(max(MARK_TTL_FLOOR_S, 10 * stale))


def _forget(sets: dict[tuple[Any, ...], ReplicaSet], after_fork: bool) -> None:
    for replica_set in sets.values():
        replica_set.dispose(after_fork)


# The process's replica sets, one per configuration (a test may run several stores).
_SETS: Slot[dict[tuple[Any, ...], ReplicaSet]] = Slot("replicas", forget=_forget)


def replica_set(settings: Settings) -> ReplicaSet | None:
    """The replicas the settings name, shared by the process's stores; None when none
    are configured (every read on the primary, and no marks on writes)."""
    urls = settings.replica_urls()
    if not urls:
        return None
    where = marks_url(settings)
    key = (tuple(urls), settings.replica_max_lag_s, settings.replica_check_interval_s, where)
    sets = _SETS.get(dict)
    with LOCK:
        return sets.get(key) or sets.setdefault(key, _new_set(settings, urls, where))


def _new_set(settings: Settings, urls: list[str], where: str | None) -> ReplicaSet:
    if where is None:
        log.warning("replicas.no_marks", reason="no Redis result backend or broker: "
                    "reads stay on the primary")
    marks = Marks(where, mark_ttl_s(settings)) if where else None
    return ReplicaSet(urls, max_lag_s=settings.replica_max_lag_s,
                      check_interval_s=settings.replica_check_interval_s, marks=marks)
