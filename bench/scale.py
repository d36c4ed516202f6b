"""Seeding a large memoryd store for the scale benchmarks (recall latency, maintenance).

Layout of a seeded store (``total`` memories over ``agents`` agents):

- ``agent-big``: ``big_agent_size`` memories, stored through ``MemoryStore.store_many``;
- ``agent-typical``: ``typical_agent_size`` memories, stored through ``store_many`` with
  real MiniLM embeddings;
- ``bg-0000`` ... : the other agents share the rest. Their rows are generated server-side
  (``INSERT ... SELECT ... FROM generate_series``) from a pool of distinct sentences
  embedded once, each row's vector being its pool sentence's vector plus a small fixed
  noise vector (re-normalized), so no two rows share a vector and the HNSW graph is
  not a pile of exact duplicates.

Embedding a million sentences takes most of an hour on two cores, so only the pool
and the queried agents are embedded. By default the big agent's vectors come from the
pool too (same sentence + noise; contents are distinct and stored through the real
API); ``real_big_embeddings=True`` embeds all of its sentences instead.

The HNSW and GIN indexes are dropped before the bulk load and rebuilt afterwards with
generous ``maintenance_work_mem``; the build times are recorded in ``SeedInfo``.

Agents added to a seeded store (the recall benchmark's size sweep and neighbour case)
are stored as the big agent is, from the statement templates with pool vectors:
``add_sweep_agents`` (once per kept cluster, listed in ``sweep.json``),
``add_neighbour``, ``forget``. The pool is embedded again for them (and kept in the
cluster's directory), the seeding having dropped its scratch copy.

Reuse: ``seeded_cluster(dir, ...)`` seeds into ``dir`` once (``seed.json`` records what
is there) and later calls just start the server. Other benchmarks use

    with seeded_cluster(path, total=1_000_000) as (url, info): ...

or the pieces: ``server(dir)``, ``seed(url, ...)``, ``open_seeded(dir)``, ``prewarm(url)``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import Engine, create_engine, text

from bench.common import Stopwatch, Timer, pool_model
from bench.common import progress as _progress
from bench.common import progress_bar as _progress_bar

BIG_AGENT = "agent-big"
TYPICAL_AGENT = "agent-typical"
BACKGROUND_PREFIX = "bg-"
POOL_SIZE = 20_000
NOISE_VECTORS = 997            # prime, so (pool row, noise row) pairs do not repeat early
NOISE_NORM = 0.35              # relative to the unit sentence vector
STORE_BATCH = 500
INSERT_CHUNK = 50_000
SEED_FILE = "seed.json"
# Dropped for the bulk load, rebuilt after it (migrations 0001 and 0006 define them).
BULK_INDEXES = ("ix_memories_embedding_hnsw", "ix_memories_agent_lexemes")
SEED_VERSION = 2  # 2: the measured agents' memories are turns of sessions
# The measured agents' memories are stored as turns of conversations this long, so that
# recall reads session lists (its context score and second round) as it does for agents
# that store conversations.
SESSION_TURNS = 30

# Server settings while loading (no WAL for index builds, big sort memory) ...
LOAD_OPTIONS = {
    "shared_buffers": "4GB", "maintenance_work_mem": "8GB",
    "max_parallel_maintenance_workers": "2", "max_worker_processes": "8",
    "synchronous_commit": "off", "max_wal_size": "32GB", "checkpoint_timeout": "30min",
    "wal_level": "minimal", "max_wal_senders": "0", "autovacuum": "off",
}
# ... and while serving (a sized server; durability settings left at their defaults).
SERVE_OPTIONS = {
    "shared_buffers": "10GB", "effective_cache_size": "16GB", "work_mem": "16MB",
    "maintenance_work_mem": "2GB", "max_wal_size": "8GB", "random_page_cost": "1.1",
}

# --- deterministic sentences ---------------------------------------------------------
PEOPLE = ("Alice", "Bruno", "Chen", "Dana", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jonas",
          "Kemal", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
          "Uma", "Viktor", "Wen", "Ximena", "Yusuf", "Zoe", "the user", "my manager",
          "the landlord", "our designer")
CITIES = ("Lisbon", "Oslo", "Nairobi", "Kyoto", "Denver", "Porto", "Tallinn", "Seoul",
          "Montreal", "Cusco", "Hanoi", "Zurich", "Austin", "Dublin", "Marrakesh", "Perth",
          "Helsinki", "Valencia", "Lagos", "Bergen", "Krakow", "Osaka", "Quito", "Adelaide")
FOODS = ("green tea", "espresso", "ramen", "sourdough bread", "dark chocolate", "oat milk",
         "spicy curry", "grilled fish", "vegan burgers", "mango sorbet", "black coffee",
         "lentil soup", "sushi", "falafel", "pho", "blueberry pancakes", "kimchi",
         "goat cheese", "pad thai", "cold brew")
PROJECTS = ("billing", "onboarding", "search", "mobile app", "data pipeline", "analytics",
            "checkout", "recommendation", "notifications", "reporting", "auth", "inventory",
            "migration", "payroll", "CRM", "dashboard")
TECH = ("PostgreSQL", "Redis", "Kafka", "Rust", "Go", "TypeScript", "Kubernetes", "Terraform",
        "GraphQL", "gRPC", "SQLite", "Elasticsearch", "React", "Django", "FastAPI", "Celery")
RELATIVES = ("sister", "brother", "mother", "father", "cousin", "aunt", "uncle", "daughter",
             "son", "grandmother", "partner", "best friend")
JOBS = ("nurse", "architect", "teacher", "software engineer", "chef", "pilot", "lawyer",
        "photographer", "dentist", "accountant", "carpenter", "journalist")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
HOBBIES = ("rock climbing", "pottery", "chess", "trail running", "painting", "the violin",
           "birdwatching", "baking", "sailing", "yoga", "photography", "gardening",
           "salsa dancing", "woodworking", "cycling", "knitting")
THINGS = ("laptop", "car", "bike", "phone", "dishwasher", "router", "printer", "heater",
          "coffee machine", "camera", "washing machine", "keyboard")
MOODS = ("frustrated", "relieved", "excited", "anxious", "tired", "proud", "annoyed",
         "hopeful")
EVENTS = ("conference", "wedding", "marathon", "workshop", "concert", "job interview",
          "family reunion", "hackathon", "book fair", "film festival")
ALLERGENS = ("peanuts", "shellfish", "gluten", "lactose", "pollen", "cats", "penicillin",
             "sesame")
DOCS = ("design doc", "budget", "contract", "release notes", "roadmap", "slide deck",
        "postmortem", "test plan", "invoice", "proposal")
VOCAB: dict[str, Sequence[str]] = {
    "person": PEOPLE, "person2": PEOPLE, "city": CITIES, "city2": CITIES, "food": FOODS,
    "food2": FOODS, "project": PROJECTS, "tech": TECH, "tech2": TECH, "relative": RELATIVES,
    "job": JOBS, "month": MONTHS, "weekday": WEEKDAYS, "hobby": HOBBIES, "thing": THINGS,
    "mood": MOODS, "event": EVENTS, "allergen": ALLERGENS, "doc": DOCS,
    "n": tuple(str(i) for i in range(2, 61)),
}
STATEMENTS = (
    "{person} prefers {food} over {food2}, especially when eating out in {city}.",
    "{person} mentioned that their {relative} lives in {city} and works as a {job}.",
    "The {project} deadline moved to {weekday} after the review with {person}.",
    "We decided to use {tech} instead of {tech2} for the {project} service.",
    "{person} is allergic to {allergen} and always checks menus carefully in {city}.",
    "{person} plans to travel to {city} in {month} for a {event}.",
    "Task: finish the {doc} for the {project} team before {weekday}.",
    "On {weekday} {person} felt {mood} because the {thing} stopped working again.",
    "{person} has been practising {hobby} for {n} months and wants to get better.",
    "The {project} migration to {tech} took {n} days and {person} led it.",
    "{person} asked me to remind them about the {event} in {city} next {month}.",
    "{person} said the {thing} was repaired in {city} for about {n} euros.",
    "Our {project} budget for {month} is {n} thousand and {person} approved it.",
    "{person} usually drinks {food} on {weekday} mornings before work.",
    "{person}'s {relative} recommended a {job} in {city2} who speaks three languages.",
    "{person} moved from {city} to {city2} in {month} and started {hobby} there.",
    "The {doc} for {project} still lacks a section on {tech}, according to {person}.",
    "{person} felt {mood} after the {event} and wants to skip the next one.",
    "{person} and {person2} share a {thing} and argue about it every {weekday}.",
    "Reminder: {person} dislikes {food} and should not be offered it at the {event}.",
)
QUESTIONS = (
    "What does {person} like to eat in {city}?",
    "Where does {person}'s {relative} live and what is their job?",
    "When is the {project} deadline now?",
    "Which technology did we pick for the {project} service?",
    "What is {person} allergic to?",
    "When is {person} going to {city}?",
    "What do I need to prepare for the {project} team?",
    "Why was {person} {mood} last week?",
    "How long has {person} been doing {hobby}?",
    "Who led the {project} migration to {tech}?",
    "Is there an {event} coming up in {city}?",
    "How much did the {thing} repair cost?",
    "What is the {project} budget for {month}?",
    "What does {person} drink in the morning?",
    "Can anyone recommend a {job} in {city2}?",
    "Where did {person} move to and when?",
    "What is missing from the {project} {doc}?",
    "How did {person} feel about the {event}?",
    "Who shares a {thing} with {person}?",
    "Which food should we avoid serving {person}?",
)
_SLOT_CACHE: dict[str, list[str]] = {}


def _slots(template: str) -> list[str]:
    if template not in _SLOT_CACHE:
        import string

        _SLOT_CACHE[template] = [name for _, name, _, _ in string.Formatter().parse(template)
                                 if name]
    return _SLOT_CACHE[template]


def _fill(template: str, rng: random.Random) -> str:
    values = {name: rng.choice(VOCAB[name]) for name in _slots(template)}
    sentence = template.format(**values)
    return sentence[0].upper() + sentence[1:]


def sentences(count: int, seed: int, *, exclude: set[str] | None = None) -> list[str]:
    """``count`` distinct statements from the templates, the same for the same seed."""
    rng = random.Random(seed)
    seen: set[str] = set(exclude or ())
    out: list[str] = []
    attempts = 0
    while len(out) < count:
        attempts += 1
        if attempts > 50 * count + 1000:
            raise ValueError(f"cannot generate {count} distinct sentences")
        sentence = _fill(rng.choice(STATEMENTS), rng)
        if sentence not in seen:
            seen.add(sentence)
            out.append(sentence)
    return out


def queries(count: int, seed: int = 7) -> list[str]:
    """``count`` questions from the question templates (never equal to a statement)."""
    rng = random.Random(seed)
    return [_fill(rng.choice(QUESTIONS), rng) for _ in range(count)]


def _noise(count: int, dim: int, seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((count, dim)).astype(np.float32)
    raw *= NOISE_NORM / np.linalg.norm(raw, axis=1, keepdims=True)
    return raw


def _unit(v: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    out: npt.NDArray[np.float32] = (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(
        np.float32)
    return out


# --- seeding ---------------------------------------------------------------------
@dataclass
class SeedInfo:
    total: int
    agents: int
    big_agent: str
    big_agent_size: int
    typical_agent: str
    typical_agent_size: int
    background_agents: int
    background_rows: int
    pool_size: int
    real_big_embeddings: bool
    seconds: dict[str, float] = field(default_factory=dict)
    created_at: str = ""
    version: int = SEED_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SeedInfo:
        return cls(**data)


class PrecomputedEmbedder:
    """An embedder answering from a text -> vector map (texts embedded elsewhere)."""

    def __init__(self, vectors: dict[str, npt.NDArray[np.float32]], dim: int,
                 name: str) -> None:
        self.dim = dim
        self.name = name  # the model that embedded ``vectors``
        self._vectors = vectors

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32, copy=False)


def _engine(url: str) -> Engine:
    from memoryd.db.engine import normalize_url

    return create_engine(normalize_url(url), pool_size=2, max_overflow=2,
                         hide_parameters=True)


def _index_defs(engine: Engine, names: Sequence[str]) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories' "
            "AND indexname = ANY(:n)"), {"n": list(names)}).all()
    return {r.indexname: r.indexdef for r in rows}


def _bar(total: int, show: bool, **kwargs: Any) -> Any:
    if show:
        return _progress_bar(total, **kwargs)
    from tqdm import tqdm

    return tqdm(total=total, disable=True)


def _say(enabled: bool, message: str) -> None:
    if enabled:
        import sys

        print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class _Pool:
    """The embedded sentence pool and the noise vectors added to its vectors."""

    sentences: list[str]
    vectors: npt.NDArray[np.float32]
    noise: npt.NDArray[np.float32]


def pool_count(pool_size: int, background_rows: int) -> int:
    """How many pool sentences: at most ``pool_size``, and at least 20 rows per sentence."""
    return max(1, min(pool_size, background_rows // 20 or 1, background_rows))


def _require_empty(engine: Engine) -> None:
    with engine.begin() as conn:
        if conn.execute(text("SELECT EXISTS (SELECT 1 FROM memories)")).scalar_one():
            raise RuntimeError("the database already holds memories; seed an empty one")


def _load_pool(engine: Engine, embedder: Any, pool_n: int, show: bool,
               watch: Stopwatch) -> _Pool:
    """Step 1: a pool of distinct sentences embedded once, and noise vectors, also
    copied into scratch tables for the server-side load."""
    from memoryd.memory.embeddings import DIM

    sentences_ = sentences(pool_n, seed=1)
    with watch("embed_pool"):
        vectors = _embed(embedder, sentences_, show, "embedding pool")
    noise = _noise(NOISE_VECTORS, DIM, seed=3)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS bench_pool, bench_noise"))
        conn.execute(text("CREATE UNLOGGED TABLE bench_pool (i int PRIMARY KEY, "
                          f"content text NOT NULL, embedding vector({DIM}) NOT NULL)"))
        conn.execute(text("CREATE UNLOGGED TABLE bench_noise (j int PRIMARY KEY, "
                          f"v vector({DIM}) NOT NULL)"))
        _copy(conn, "bench_pool (i, content, embedding)",
              ((i, t, _vec(v)) for i, (t, v) in enumerate(zip(sentences_, vectors,
                                                               strict=True))))
        _copy(conn, "bench_noise (j, v)", ((j, _vec(v)) for j, v in enumerate(noise)))
    return _Pool(sentences_, vectors, noise)


def _drop_bulk_indexes(engine: Engine) -> dict[str, str]:
    """Step 2: drop the vector and full-text indexes for the bulk load; their DDL."""
    defs = _index_defs(engine, BULK_INDEXES)
    with engine.begin() as conn:
        for name in defs:
            conn.execute(text(f"DROP INDEX {name}"))
    return defs


def _load_background(engine: Engine, rows: int, pool_n: int, agents: int,
                     show: bool) -> None:
    """Step 3: the background agents' rows, generated server-side in chunks."""
    insert = text(background_insert())
    with _bar(rows, show, desc="background rows", unit="row") as bar:
        for lo in range(0, rows, INSERT_CHUNK):
            hi = min(lo + INSERT_CHUNK, rows) - 1
            with engine.begin() as conn:
                conn.execute(insert, {
                    "model": pool_model(), "lo": lo, "hi": hi, "pool": pool_n,
                    "noise": NOISE_VECTORS, "agents": agents})
            bar.update(hi - lo + 1)


def _store_queried(store: Any, url: str, pool: _Pool, *, typical_size: int, big_size: int,
                   real_big_embeddings: bool, show: bool, watch: Stopwatch) -> None:
    """Step 4: the queried agents, through the real API (``store_many``)."""
    from memoryd.memory.store import MemoryStore

    with watch("store_typical"):
        typical = sentences(typical_size, seed=11)
        _store(store, TYPICAL_AGENT, typical, show)
    with watch("store_big"):
        big = sentences(big_size, seed=12, exclude=set(typical))
        if real_big_embeddings:
            _store(store, BIG_AGENT, big, show)
        else:
            big_store = MemoryStore(url, engine=store.engine, embedder=_pool_embedder(
                big, pool.sentences, pool.vectors, pool.noise))
            _store(big_store, BIG_AGENT, big, show)


def _rebuild_indexes(engine: Engine, defs: dict[str, str], show: bool,
                     watch: Stopwatch) -> None:
    """Step 5: the dropped indexes back, with generous sort memory."""
    for name, ddl in defs.items():
        _say(show, f"building {name} ...")
        with watch(f"build_{name}"), engine.begin() as conn:
            conn.execute(text("SET LOCAL maintenance_work_mem = '8GB'"))
            conn.execute(text("SET LOCAL max_parallel_maintenance_workers = 2"))
            conn.execute(text(ddl))
        _say(show, f"built {name} in {watch.seconds[f'build_{name}']:.1f} s")


def _finish(engine: Engine, watch: Stopwatch) -> None:
    """Step 6: drop the scratch tables, vacuum and analyze."""
    with watch("vacuum_analyze"):
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS bench_pool, bench_noise"))
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text("VACUUM (ANALYZE) memories"))


def seed(url: str, *, total: int = 1_000_000, agents: int = 1_000,
         big_agent_size: int = 100_000, typical_agent_size: int = 1_000,
         pool_size: int = POOL_SIZE, real_big_embeddings: bool = False,
         embedder: Any = None, progress: bool = True) -> SeedInfo:
    """Fill the (migrated or empty) database at ``url``; returns what was loaded.

    The database should be empty of memories: seeding is not incremental.
    """
    from memoryd.memory.embeddings import get_embedder
    from memoryd.memory.store import MemoryStore

    if agents < 3 or big_agent_size + typical_agent_size >= total:
        raise ValueError("need at least 3 agents and room for background rows")
    background_agents = agents - 2
    background_rows = total - big_agent_size - typical_agent_size
    pool_n = pool_count(pool_size, background_rows)
    embedder = embedder or get_embedder()
    watch = Stopwatch()
    engine = _engine(url)
    store = MemoryStore(url, embedder=embedder)
    try:
        with watch("total"):
            store.migrate()
            _require_empty(engine)
            pool = _load_pool(engine, embedder, pool_n, progress, watch)
            defs = _drop_bulk_indexes(engine)
            with watch("load_background"):
                _load_background(engine, background_rows, pool_n, background_agents,
                                 progress)
            _store_queried(store, url, pool, typical_size=typical_agent_size,
                           big_size=big_agent_size, real_big_embeddings=real_big_embeddings,
                           show=progress, watch=watch)
            _rebuild_indexes(engine, defs, progress, watch)
            _finish(engine, watch)
        return SeedInfo(total=total, agents=agents, big_agent=BIG_AGENT,
                        big_agent_size=big_agent_size, typical_agent=TYPICAL_AGENT,
                        typical_agent_size=typical_agent_size,
                        background_agents=background_agents, background_rows=background_rows,
                        pool_size=pool_n, real_big_embeddings=real_big_embeddings,
                        seconds=watch.rounded(2),
                        created_at=datetime.now(UTC).isoformat(timespec="seconds"))
    finally:
        store.engine.dispose()
        engine.dispose()


# What a background row sets, per column of ``memories``; every other column takes its
# default. Row n: pool sentence (n mod pool) + a distinguishing suffix, its vector plus
# noise (n mod 997), an agent (n mod agents), a spread of ages, categories, importances.
# The content hash is ``writes.content_hash`` in SQL (the contents hold no runs of
# whitespace for it to normalize).
BACKGROUND_CATEGORIES = ("fact", "preference", "decision", "task", "context", "event")
_AGE = ("now() - make_interval(days => CAST(g.n % 400 AS int), "
        "secs => CAST(g.n % 86400 AS float8))")
BACKGROUND_VALUES: dict[str, str] = {
    "agent_id": "a.agent_id",
    "content": "c.content",
    "content_hash": "encode(sha256(convert_to(c.content, 'UTF8')), 'hex')",
    "category": "(ARRAY[{}])[1 + g.n % {}]".format(
        ", ".join(f"'{c}'" for c in BACKGROUND_CATEGORIES), len(BACKGROUND_CATEGORIES)),
    "importance": "0.3 + (g.n % 5) * 0.1",
    "created_at": _AGE,
    "updated_at": _AGE,
    "embedding": "l2_normalize(p.embedding + z.v)",
    "embedding_model": "CAST(:model AS text)",  # the pool's model (``pool_model``)
}


def background_insert() -> str:
    """The INSERT of one chunk of background rows, its columns in table order as memoryd
    defines them (``rows.STORED_COLUMNS``)."""
    from memoryd.memory.rows import STORED_COLUMNS

    unknown = set(BACKGROUND_VALUES) - set(STORED_COLUMNS)
    if unknown:
        raise ValueError(f"not stored columns of memories: {sorted(unknown)}")
    columns = [c for c in STORED_COLUMNS if c in BACKGROUND_VALUES]
    values = ",\n       ".join(BACKGROUND_VALUES[c] for c in columns)
    return f"""
INSERT INTO memories ({", ".join(columns)})
SELECT {values}
FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) AS g(n)
JOIN bench_pool p ON p.i = g.n % :pool
JOIN bench_noise z ON z.j = g.n % :noise
CROSS JOIN LATERAL (SELECT '{BACKGROUND_PREFIX}' || lpad((g.n % :agents)::text, 4, '0')
                    AS agent_id) a
CROSS JOIN LATERAL (SELECT p.content || ' (note ' || g.n || ')' AS content) c
"""



def _vec(v: npt.NDArray[np.float32]) -> str:
    from memoryd.memory.embeddings import to_pgvector

    return to_pgvector(v)


def _copy(conn: Any, target: str, rows: Iterator[tuple[Any, ...]]) -> None:
    raw = conn.connection.driver_connection
    with raw.cursor() as cur, cur.copy(f"COPY {target} FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _embed(embedder: Any, texts: Sequence[str], show: bool,
           desc: str) -> npt.NDArray[np.float32]:
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    batch = 256
    steps = range(0, len(texts), batch)
    for start in (_progress(steps, desc=desc, unit="batch") if show else steps):
        out[start:start + batch] = embedder.embed(texts[start:start + batch])
    return out


def _pool_embedder(texts: Sequence[str], pool: Sequence[str],
                   pool_vectors: npt.NDArray[np.float32],
                   noise: npt.NDArray[np.float32]) -> PrecomputedEmbedder:
    """Vectors for ``texts`` borrowed from the pool (i-th text: pool row i mod pool,
    noise row i mod noise) - each text is paired with a pool sentence's meaning."""
    vectors = {}
    for i, t in enumerate(texts):
        vectors[t] = _unit(pool_vectors[i % len(pool)] + noise[(i * 7) % len(noise)])
    return PrecomputedEmbedder(vectors, pool_vectors.shape[1], pool_model())



def _store(store: Any, agent: str, texts: Sequence[str], show: bool) -> None:
    now = datetime.now(UTC)
    with _bar(len(texts), show, desc=f"store_many {agent}", unit="memory") as bar:
        for start in range(0, len(texts), STORE_BATCH):
            chunk = texts[start:start + STORE_BATCH]
            items = [{"content": t, "created_at": now - timedelta(minutes=37 * (start + i)),
                      "session_id": f"{agent}-session-{(start + i) // SESSION_TURNS}"}
                     for i, t in enumerate(chunk)]
            results = store.store_many(agent, items)
            if not all(r.stored for r in results):
                raise RuntimeError(f"{agent}: some memories were not stored (duplicates?)")
            bar.update(len(chunk))


# --- agents added to a seeded store ------------------------------------------------
# The recall benchmark's size sweep and neighbour case add agents to a seeded store,
# their memories drawn as the big agent's are (the statement templates, vectors borrowed
# from the pool). The sweep's agents stay (``SWEEP_FILE`` lists them); the neighbour
# case's are erased after it, and again before it should a run have been interrupted.
SWEEP_PREFIX = "agent-sweep-"
NEIGHBOUR_PREFIX = "agent-neighbour-"
NEIGHBOUR_A = NEIGHBOUR_PREFIX + "a"  # the agent measured before and after ...
NEIGHBOUR_B = NEIGHBOUR_PREFIX + "b"  # ... this one arrives
NEIGHBOUR_SEEDS = {NEIGHBOUR_A: 31, NEIGHBOUR_B: 32}  # of their sentences
SWEEP_FILE = "sweep.json"
POOL_FILE = "pool-{model}-{n}.npy"


def sweep_agent(size: int) -> str:
    return f"{SWEEP_PREFIX}{size}"


def agent_memories(url: str, agent: str) -> int:
    """How many memories ``agent`` holds."""
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM memories WHERE agent_id = :a"),
                                    {"a": agent}).scalar_one())
    finally:
        engine.dispose()


def has_own_index(url: str, agent: str) -> bool:
    """Whether ``agent`` has an HNSW index of its own (``index_agents``)."""
    from memoryd.memory.agent_indexes import existing_indexes, index_name

    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return index_name(agent) in existing_indexes(conn)
    finally:
        engine.dispose()


def seeded_pool(data_dir: Path, info: SeedInfo, embedder: Any = None,
                show: bool = True) -> _Pool:
    """The seeding's pool again (the same sentences and noise; the vectors embedded once
    and kept in ``data_dir``, the seeding having dropped its scratch copy)."""
    from memoryd.memory.embeddings import DIM, get_embedder

    texts = sentences(info.pool_size, seed=1)
    model = "".join(c if c.isalnum() or c in "-._" else "_" for c in pool_model())
    path = Path(data_dir) / POOL_FILE.format(model=model, n=info.pool_size)
    if path.exists():
        vectors = np.load(path)
    else:
        vectors = _embed(embedder or get_embedder(), texts, show, "embedding pool")
        np.save(path, vectors)
    return _Pool(texts, vectors, _noise(NOISE_VECTORS, DIM, seed=3))


def store_pooled(url: str, pool: _Pool, agent: str, texts: Sequence[str],
                 show: bool = True) -> None:
    """Store ``texts`` for ``agent`` through ``store_many``, with pool vectors (as the
    big agent's memories are stored)."""
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url, embedder=_pool_embedder(texts, pool.sentences, pool.vectors,
                                                     pool.noise))
    try:
        _store(store, agent, texts, show)
    finally:
        store.close()


def forget(url: str, agent: str) -> int:
    """Erase ``agent`` (its rows and its own index, if any); memories deleted."""
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    try:
        return store.forget_agent(agent)
    finally:
        store.close()


def add_neighbour(url: str, pool: _Pool, agent: str, size: int, show: bool = True) -> None:
    """Store ``size`` memories for the neighbour case's ``agent`` (A or B)."""
    store_pooled(url, pool, agent, sentences(size, seed=NEIGHBOUR_SEEDS[agent]), show)


def read_sweep(data_dir: Path) -> dict[int, str]:
    """The sweep agents added to the store in ``data_dir``: size -> agent."""
    path = Path(data_dir) / SWEEP_FILE
    if not path.exists():
        return {}
    return {int(size): agent for size, agent in json.loads(path.read_text()).items()}


def add_sweep_agents(data_dir: Path, url: str, info: SeedInfo, sizes: Sequence[int],
                     show: bool = True) -> dict[int, dict[str, Any]]:
    """An agent of exactly each size in ``sizes``: the seeded typical or big agent where
    its size matches, else ``agent-sweep-<size>``, added once (listed in ``SWEEP_FILE``;
    one listed but not holding its size, an interrupted addition, is stored again).
    Returns size -> {"agent", "added", "store_s"}."""
    seeded = {info.typical_agent_size: info.typical_agent, info.big_agent_size: info.big_agent}
    recorded = read_sweep(data_dir)
    out: dict[int, dict[str, Any]] = {}
    pool: _Pool | None = None
    for size in sizes:
        agent = seeded.get(size) or sweep_agent(size)
        out[size] = {"agent": agent, "added": False, "store_s": None}
        if size in seeded or (recorded.get(size) == agent
                              and agent_memories(url, agent) == size):
            continue
        pool = pool or seeded_pool(data_dir, info, show=show)
        clock = Timer()
        forget(url, agent)
        store_pooled(url, pool, agent, sentences(size, seed=1000 + size), show)
        out[size].update(added=True, store_s=round(clock.stop(), 2))
        recorded[size] = agent
        (Path(data_dir) / SWEEP_FILE).write_text(json.dumps(
            {str(k): v for k, v in sorted(recorded.items())}, indent=2) + "\n")
    return out


# --- clusters that outlive a run --------------------------------------------------
def server(data_dir: Path, options: dict[str, str] | None = None) -> Any:
    from memoryd.embedded.postgres import EmbeddedPostgres

    return EmbeddedPostgres(Path(data_dir), server_options=dict(
        SERVE_OPTIONS if options is None else options))


def read_info(data_dir: Path) -> SeedInfo | None:
    path = Path(data_dir) / SEED_FILE
    if not path.exists():
        return None
    info = SeedInfo.from_json(json.loads(path.read_text()))
    return info if info.version == SEED_VERSION else None


def open_seeded(data_dir: Path) -> str:
    """Start (or reuse) the seeded cluster in ``data_dir``; its URL. The caller stops it
    with ``server(data_dir).stop()``."""
    if read_info(data_dir) is None:
        raise FileNotFoundError(f"{data_dir} holds no seeded memoryd cluster")
    url: str = server(data_dir).ensure_running()
    return url


def settle(url: str, wait_s: float = 300.0) -> None:
    """Let the store settle after a bulk load, as it would in service: vacuum and
    analyze ``memories``, wait for autovacuum workers to finish (at most ``wait_s``),
    then ``prewarm``. Measured right after 100,000 inserts, recall shares the cores with
    the autovacuum and analyze they set off, which is the load, not the neighbour."""
    import time

    engine = _engine(url)
    try:
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text("VACUUM (ANALYZE) memories"))
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and conn.execute(text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE backend_type = 'autovacuum worker'")).scalar_one():
                time.sleep(1.0)
    finally:
        engine.dispose()
    prewarm(url)


def prewarm(url: str) -> None:
    """Load the table and its indexes into shared buffers (pg_prewarm, which
    ``seeded_cluster`` installs)."""
    engine = _engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_prewarm"))
            names = conn.execute(text(
                "SELECT indexrelid::regclass::text FROM pg_index "
                "WHERE indrelid = 'memories'::regclass")).scalars().all()
            for name in [*names, "memories"]:  # indexes first, should memory run short
                conn.execute(text("SELECT pg_prewarm(CAST(:r AS regclass))"), {"r": name})
    finally:
        engine.dispose()


@contextmanager
def seeded_cluster(data_dir: Path, *, total: int, agents: int, big_agent_size: int,
                   typical_agent_size: int, real_big_embeddings: bool = False,
                   show: bool = True, load_options: dict[str, str] | None = None,
                   serve_options: dict[str, str] | None = None
                   ) -> Iterator[tuple[str, SeedInfo]]:
    """A running cluster in ``data_dir`` holding the requested seed (seeded now unless it
    already is); stopped on exit, the directory kept. The server settings default to
    ``LOAD_OPTIONS`` while seeding and ``SERVE_OPTIONS`` afterwards."""
    import shutil

    data_dir = Path(data_dir)
    want = (total, agents, big_agent_size, typical_agent_size, real_big_embeddings)
    info = read_info(data_dir)
    if info is not None and (info.total, info.agents, info.big_agent_size,
                             info.typical_agent_size, info.real_big_embeddings) != want:
        raise ValueError(f"{data_dir} holds a different seed ({info.total} memories); "
                         "use another directory")
    if info is None:
        if (data_dir / "pgdata").exists():
            server(data_dir).stop()
            shutil.rmtree(data_dir / "pgdata")  # an interrupted seeding
        loader = server(data_dir, LOAD_OPTIONS if load_options is None else load_options)
        try:
            url = loader.ensure_running()
            info = seed(url, total=total, agents=agents, big_agent_size=big_agent_size,
                        typical_agent_size=typical_agent_size,
                        real_big_embeddings=real_big_embeddings, progress=show)
        finally:
            loader.stop()
        (data_dir / SEED_FILE).write_text(json.dumps(info.to_json(), indent=2) + "\n")
    serving = server(data_dir, serve_options)
    url = serving.ensure_running()
    with serving.connect_owner() as conn:  # for prewarm: the superuser's to install
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    try:
        yield url, info
    finally:
        serving.stop()
