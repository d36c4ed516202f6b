"""Maintenance at scale: how long do memoryd's bounded-batch maintenance jobs take on a
large store, compared with the one bare SQL statement making the same change?

A store of ``--scale`` memories (1,000 per agent) is generated server-side, shaped so
each job has real work on about 10 % of the rows:

- consolidate (its decay pass, ``merge=False``): 10 % idle for more than 7 days (a
  tenth of them pinned, so 9 % decay);
- evict: 10 % old and unimportant (``age``) or of low confidence;
- expire: 10 % past ``expires_at`` (another 10 % expire in the future);
- deduplicate: 10 % are case/punctuation variants of another memory of their agent.

The seeded database is the template of two copies per job (``CREATE DATABASE ...
TEMPLATE``): on one, memoryd's ``run_job`` runs with its default batch size (follow-up
runs until complete); on the other, the bare single SQL statement doing the same change.
Each side runs in a fresh child process, which reports its wall time (after connecting)
and its peak RSS; the two copies must end in the same state.

    .venv/bin/python -m bench.maintenance [--scale N] [--out PATH.json] [--chart PATH.png]

Heavy runs: ``flock /tmp/memoryd-bench.lock .venv/bin/python -m bench.maintenance``.
Targets: each job <= 10 s at 1M rows, <= 1.5x the bare statement, <= 300 MB RSS.
See bench/README.md, "Maintenance at scale".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    OUT_DIR,
    REPO_ROOT,
    Stopwatch,
    Timer,
    format_table,
    machine_info,
    now_iso,
    pool_model,
    progress,
    progress_bar,
    timer,
    write_json,
)

DEFAULT_SCALE = 1_000_000
DEFAULT_OUT = OUT_DIR / "maintenance.json"
DEFAULT_CHART = OUT_DIR / "maintenance.png"

ROWS_PER_AGENT = 1000
POOL = 20_000  # distinct unit vectors; row i gets vector i % POOL
SEED_CHUNK = 50_000
JOBS = ("consolidate", "evict", "expire", "deduplicate")
TARGET_S = 10.0
TARGET_RATIO = 1.5
TARGET_RSS_MB = 300.0
TEMPLATE_DB = "bench_seeded"
_RESULT = "BENCH-RESULT "  # prefix of the child's result line on stdout

# memoryd's job parameters (all defaults, except decay alone for consolidate).
JOB_PARAMS: dict[str, dict[str, Any]] = {
    "consolidate": {"merge": False}, "evict": {}, "expire": {}, "deduplicate": {},
}

# --- the bare statements ------------------------------------------------------------
# Each makes in one statement the change the job makes (defaults of the job's params;
# memoryd moves rows to evicted_memories rather than deleting them, and so do these,
# with memoryd's own conditions and its own move). They are built from memoryd's SQL
# pieces, so a change to a job's conditions changes its baseline too.


def bare_statement(job: str) -> str:
    """The one statement doing what ``job`` does; it returns the rows it changed as a
    row count (an UPDATE) or a single count (the moves)."""
    from memoryd.memory.maintenance import consolidate, evict, expire
    from memoryd.memory.maintenance.evicting import GONE, move_gone
    from memoryd.memory.maintenance.sql import protected

    moved = "SELECT count(*) FROM moved"
    if job == "consolidate":
        return f"UPDATE memories m SET {consolidate.DECAY} WHERE {consolidate.eligible('TRUE')}"
    if job == "deduplicate":
        return _bare_deduplicate()
    if job == "evict":
        return f"""
WITH gone AS (
    DELETE FROM memories m
    WHERE NOT {protected()} AND (({evict.AGE}) OR {evict.LOW_CONFIDENCE})
    {GONE}, CASE WHEN {evict.AGE} THEN 'age' ELSE 'low_confidence' END AS reason
), {move_gone("gone.reason")}
{moved}"""
    return f"""
WITH gone AS (
    DELETE FROM memories m WHERE {expire.EXPIRED} AND NOT {protected()}
    {GONE}
), {move_gone("'expired'")}
{moved}"""


def _bare_deduplicate() -> str:
    """Every duplicate group merged at once, with memoryd's fold and move."""
    from memoryd.memory.maintenance.evicting import GONE, move_gone
    from memoryd.memory.maintenance.merging import fold
    from memoryd.memory.maintenance.sql import protected

    return f"""
WITH ranked AS (
    SELECT m.id, {protected()} AS protected,
           first_value(m.id) OVER w AS survivor, row_number() OVER w AS rn
    FROM memories m
    WHERE m.archived_at IS NULL AND m.content_norm_hash IS NOT NULL
    WINDOW w AS (PARTITION BY m.agent_id, m.content_norm_hash
                 ORDER BY {protected()} DESC, m.created_at DESC, m.id DESC)
), p AS (
    SELECT r.id AS loser, r.survivor FROM ranked r WHERE r.rn > 1 AND NOT r.protected
), sums AS (
    SELECT p.survivor, sum(l.access_count) AS access_count, max(l.importance) AS importance,
           max(l.confidence) AS confidence, max(l.last_accessed_at) AS last_accessed_at
    FROM p JOIN memories l ON l.id = p.loser GROUP BY p.survivor
), tags AS (
    SELECT p.survivor, array_agg(DISTINCT t.tag ORDER BY t.tag) AS tags
    FROM p JOIN memories l ON l.id = p.loser, unnest(l.tags) AS t(tag) GROUP BY p.survivor
), fold AS (
    UPDATE memories s SET {fold("coalesce(t.tags, '{}')")}
    FROM sums a LEFT JOIN tags t ON t.survivor = a.survivor
    WHERE s.id = a.survivor  -- like memoryd, only survivors the fold changes
      AND (a.access_count <> 0 OR a.importance > s.importance OR a.confidence > s.confidence
           OR a.last_accessed_at > coalesce(s.last_accessed_at, '-infinity')
           OR NOT coalesce(t.tags, '{{}}') <@ s.tags)
), links AS (
    INSERT INTO memory_links (agent_id, source_id, target_id, kind, score)
    SELECT s.agent_id, p.survivor, p.loser, 'derived_from', 1.0
    FROM p JOIN memories s ON s.id = p.survivor
    ON CONFLICT DO NOTHING
), gone AS (
    DELETE FROM memories m USING p WHERE m.id = p.loser {GONE}
), {move_gone("'duplicate'")}
SELECT count(*) FROM moved"""


def bare_params() -> dict[str, Any]:
    """The binds of the bare statements: the jobs' default parameters, at the time now."""
    now = datetime.now(UTC)
    return {"floor": 0.05, "rate": 0.05, "idle_before": now - timedelta(days=7),
            "age_before": now - timedelta(days=30), "min_importance": 0.2,
            "min_confidence": 0.1, "now": now, "run_id": None}


# What both copies must agree on after the change.
_FINGERPRINT = """
SELECT (SELECT count(*) FROM memories) AS memories,
       (SELECT round(CAST(sum(confidence) AS numeric), 3) FROM memories) AS confidence,
       (SELECT sum(access_count) FROM memories) AS access_count,
       (SELECT count(*) FROM evicted_memories) AS evicted,
       (SELECT count(*) FROM memory_links) AS links"""


# --- the server and the seeded store ------------------------------------------------
def server_options(scale: int) -> dict[str, str]:
    big = scale >= 200_000
    return {
        "shared_buffers": "3GB" if big else "256MB",
        "maintenance_work_mem": "2GB" if big else "256MB",
        "work_mem": "64MB",
        "max_wal_size": "16GB",
        "checkpoint_timeout": "30min",
        "max_parallel_maintenance_workers": "1",
    }


@contextmanager
def bench_server(scale: int, keep: Path | None = None) -> Iterator[Any]:
    """An embedded PostgreSQL with benchmark settings, stopped after; its directory is
    a temp dir deleted after, or ``keep`` (kept, with its seeded store, for reruns)."""
    from memoryd.embedded.postgres import EmbeddedPostgres

    data_dir = keep or Path(tempfile.mkdtemp(prefix="memoryd-bench-maint-"))
    server = EmbeddedPostgres(data_dir, server_options=server_options(scale))
    try:
        server.ensure_running()
        yield server
    finally:
        try:
            server.stop()
        finally:
            if keep is None:
                shutil.rmtree(data_dir, ignore_errors=True)


def seeded_before(server: Any, scale: int) -> dict[str, Any] | None:
    """The seed report of a kept server's template database, if it holds ``scale`` rows
    and is at memoryd's newest migration. An older store is seeded again rather than
    migrated: a migration that rewrites ``memories`` (0004 adds a stored column) rebuilds
    every index, the HNSW graph included, which takes as long as seeding."""
    from sqlalchemy import text

    admin = _admin(server)
    with admin.connect() as conn:
        comment = conn.execute(text("""
            SELECT shobj_description(oid, 'pg_database') FROM pg_database
            WHERE datname = :name"""), {"name": TEMPLATE_DB}).scalar()
    admin.dispose()
    try:
        info = json.loads(comment) if comment else None
    except ValueError:
        return None
    if not isinstance(info, dict) or info.get("scale") != scale:
        return None
    return info if _revision(server.url(TEMPLATE_DB)) == head_revision() else None


def head_revision() -> str | None:
    """memoryd's newest migration."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from memoryd.db import migrate

    config = Config()
    config.set_main_option("script_location", str(Path(migrate.__file__).parent / "migrations"))
    return ScriptDirectory.from_config(config).get_current_head()


def _revision(url: str) -> str | None:
    from memoryd.db.migrate import current_revision

    engine = _engine(url)
    try:
        return current_revision(engine)
    finally:
        engine.dispose()


def _admin(server: Any) -> Any:
    from sqlalchemy import create_engine

    from memoryd.db.engine import normalize_url

    return create_engine(normalize_url(server.owner_url("postgres")),
                         isolation_level="AUTOCOMMIT", poolclass=_null_pool(),
                         hide_parameters=True)


def _null_pool() -> Any:
    from sqlalchemy.pool import NullPool

    return NullPool


def _engine(url: str) -> Any:
    from sqlalchemy import create_engine

    from memoryd.db.engine import normalize_url

    return create_engine(normalize_url(url), poolclass=_null_pool(), hide_parameters=True,
                         connect_args={"options": "-c statement_timeout=0"})


_ROW = """
INSERT INTO memories (agent_id, content, content_hash, category, importance, confidence,
                      pinned, created_at, updated_at, expires_at, embedding, embedding_model)
SELECT r.agent_id, r.content, md5(r.content), 'fact', r.importance, r.confidence, r.pinned,
       r.created_at, r.created_at, r.expires_at, p.v, CAST(:model AS text)
FROM (
    SELECT i, 'agent-' || lpad(CAST(i % :agents AS text), 5, '0') AS agent_id,
           CASE WHEN s.b = 3
                THEN upper(format(:base, s.k + 1, i % :agents, (s.k + 1) % 13)) || ' !!'
                ELSE format(:base, s.k, i % :agents, s.k % 13) END AS content,
           CASE WHEN s.b = 1 AND s.k % 20 = 1 THEN 0.1 ELSE 0.5 END AS importance,
           CASE WHEN s.b = 1 AND s.k % 20 = 1 THEN 0.05
                WHEN s.b = 1 THEN 0.08 ELSE 1.0 END AS confidence,
           s.b = 0 AND s.k % 100 = 50 AS pinned,
           now() - CASE WHEN s.b = 0 THEN make_interval(days => 10 + s.k % 5)
                        WHEN s.b = 1 AND s.k % 20 = 1 THEN make_interval(days => 45 + s.k % 5)
                        ELSE make_interval(days => s.k % 5, hours => 1 + s.b) END
               AS created_at,
           CASE WHEN s.b = 2 THEN now() - interval '1 day'
                WHEN s.b = 5 THEN now() + interval '30 days' END AS expires_at
    FROM generate_series(CAST(:lo AS int), CAST(:hi AS int)) AS i,
         LATERAL (SELECT i / CAST(:agents AS int) AS k, (i / CAST(:agents AS int)) % 10 AS b) s
) r JOIN bench_pool p ON p.id = r.i % :pool
"""
_BASE = "Note %s of agent %s: the user prefers green tea, %s cups a day."



def expected_rows(scale: int) -> dict[str, int]:
    """How many rows each job should change (for the report; the copies are compared)."""
    agents = max(1, scale // ROWS_PER_AGENT)
    per_bucket = dict.fromkeys(range(10), 0)
    decay = 0
    for i in range(scale):
        k = i // agents
        per_bucket[k % 10] += 1
        if k % 10 == 0 and k % 100 != 50:
            decay += 1
    return {"consolidate": decay, "evict": per_bucket[1], "expire": per_bucket[2]}


def seed(server: Any, scale: int) -> dict[str, Any]:
    """Create, migrate and fill the template database; returns timings and sizes."""
    url = _create_template(server)
    agents = max(1, scale // ROWS_PER_AGENT)
    pool = min(POOL, max(1, scale // 10))
    watch = Stopwatch()
    engine = _engine(url)
    with engine.connect() as conn:
        with watch("load_s"):
            _create_vector_pool(conn, pool)
            indexes = _drop_secondary_indexes(conn)
            _load_rows(conn, scale, agents, pool)
        with watch("index_s"):
            _build_indexes(conn, indexes, watch)
        _drop_vector_pool(conn)
    with watch("vacuum_s"):
        size = _vacuum(server, engine)
    engine.dispose()
    info = {"scale": scale, "agents": agents, "vector_pool": pool,
            "database_mb": round(size / 2**20), **watch.rounded()}
    _mark_complete(server, info)
    return info


def _create_template(server: Any) -> str:
    """A new, migrated template database; its URL."""
    from sqlalchemy import text

    from memoryd.memory.store import MemoryStore

    admin = _admin(server)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE_DB}"'))
    admin.dispose()
    server.create_database(TEMPLATE_DB)  # the app role's to migrate, as memoryd's is
    url = server.url(TEMPLATE_DB)
    store = MemoryStore(url)
    store.migrate()
    store.engine.dispose()
    return str(url)


def _create_vector_pool(conn: Any, pool: int) -> None:
    """``pool`` random unit vectors the rows share (row i gets vector i % pool)."""
    from sqlalchemy import text

    conn.execute(text("""
        CREATE UNLOGGED TABLE bench_pool AS
        SELECT p AS id, l2_normalize(CAST(array_agg(random() - 0.5) AS vector)) AS v
        FROM generate_series(0, :pool - 1) AS p, generate_series(1, 384) AS d
        GROUP BY p"""), {"pool": pool})
    conn.execute(text("ALTER TABLE bench_pool ADD PRIMARY KEY (id)"))


def _drop_secondary_indexes(conn: Any) -> list[tuple[str, str]]:
    """Drop the secondary indexes of ``memories`` for the load; (name, definition) of
    each, in the order to rebuild them (HNSW last)."""
    from sqlalchemy import text

    indexes = [(str(name), str(definition)) for name, definition in conn.execute(text("""
        SELECT i.indexname, i.indexdef FROM pg_indexes i
        JOIN pg_class c ON c.relname = i.indexname
        JOIN pg_index x ON x.indexrelid = c.oid
        WHERE i.tablename = 'memories' AND NOT x.indisprimary
        ORDER BY i.indexdef LIKE '%hnsw%', i.indexname""")).all()]
    for name, _ in indexes:
        conn.execute(text(f"DROP INDEX {name}"))
    conn.commit()
    return indexes


def _load_rows(conn: Any, scale: int, agents: int, pool: int) -> None:
    """``scale`` rows, ``SEED_CHUNK`` per transaction."""
    from sqlalchemy import text

    with progress_bar(scale, desc="seeding", unit="row") as bar:
        for lo in range(0, scale, SEED_CHUNK):
            hi = min(scale, lo + SEED_CHUNK) - 1
            conn.execute(text(_ROW), {"lo": lo, "hi": hi, "agents": agents,
                                      "pool": pool, "base": _BASE, "model": pool_model()})
            conn.commit()
            bar.update(hi - lo + 1)


def _build_indexes(conn: Any, indexes: Sequence[tuple[str, str]], watch: Stopwatch) -> None:
    """Rebuild the dropped indexes, timing each as ``index_<name>_s``."""
    from sqlalchemy import text

    for name, definition in progress(indexes, desc="indexing", unit="index"):
        with watch(f"index_{name}_s"):
            conn.execute(text(definition))
            conn.commit()


def _drop_vector_pool(conn: Any) -> None:
    from sqlalchemy import text

    conn.execute(text("DROP TABLE bench_pool"))
    conn.commit()


def _vacuum(server: Any, engine: Any) -> int:
    """Vacuum, analyze and checkpoint (the owner's to run) the loaded store; its
    database's size in bytes."""
    from sqlalchemy import text

    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE) memories"))
        with server.connect_owner("postgres") as owner:
            owner.execute("CHECKPOINT")
        return int(conn.execute(text(
            "SELECT pg_database_size(current_database())")).scalar_one())


def _mark_complete(server: Any, info: dict[str, Any]) -> None:
    """Record the seed report on the template, which marks it complete (``--keep``)."""
    from sqlalchemy import text

    admin = _admin(server)
    with admin.connect() as conn:
        conn.execute(text(f"COMMENT ON DATABASE \"{TEMPLATE_DB}\" IS "
                          f"'{json.dumps(info)}'"))
    admin.dispose()


def warm_shared_buffers(server: Any) -> None:
    """Read the template through shared buffers once (a TID range scan uses no ring
    buffer), so every timed run finds them in the state of a server that has been up
    for a while. Right after a start the server has not touched its shared memory yet:
    whichever run first read a few GB through it paid for faulting them in (3-4 s at
    1M rows, on the first job only)."""
    from sqlalchemy import text

    engine = _engine(server.url(TEMPLATE_DB))
    with engine.connect() as conn:
        conn.execute(text("SET enable_seqscan = off"))
        conn.execute(text("SELECT count(*) FROM memories WHERE ctid >= '(0,0)'"))
    engine.dispose()


def _copy(server: Any, name: str) -> str:
    from sqlalchemy import text

    admin = _admin(server)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_DB}" '
                          "STRATEGY FILE_COPY"))
    admin.dispose()
    return str(server.url(name))


def _drop(server: Any, name: str) -> None:
    from sqlalchemy import text

    admin = _admin(server)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _table_stats(url: str) -> dict[str, Any]:
    from sqlalchemy import text

    engine = _engine(url)
    with engine.connect() as conn:
        fingerprint = dict(conn.execute(text(_FINGERPRINT)).one()._mapping)
        stats = conn.execute(text("""
            SELECT n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables
            WHERE relname = 'memories'""")).one()
    engine.dispose()
    return {"fingerprint": {k: str(v) for k, v in fingerprint.items()},
            "updates": int(stats.n_tup_upd), "hot_updates": int(stats.n_tup_hot_upd),
            "deletes": int(stats.n_tup_del)}


# --- one side of one job, in a child process ----------------------------------------
def _run_child(url: str, job: str, side: str) -> dict[str, Any]:
    """Run in a fresh interpreter: its peak RSS is the job's alone."""
    spec = json.dumps({"url": url, "job": job, "side": side})
    env = {**os.environ, "BENCH_NO_PROGRESS": "1"}
    proc = subprocess.run([sys.executable, "-m", "bench.maintenance", "--child", spec],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_RESULT)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{job}/{side} failed ({proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return dict(json.loads(lines[-1][len(_RESULT):]))


def own_peak_rss_mb() -> float:
    """This process's peak resident set, in MB (``VmHWM``). Not ``ru_maxrss``: Linux
    carries that across exec, so a child started from a large process (a test runner)
    reported its parent's size, not its own."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux


def child_main(spec: dict[str, Any]) -> int:
    url, job, side = spec["url"], spec["job"], spec["side"]
    outcome = _run_bare(url, job) if side == "bare" else _run_memoryd(url, job)
    peak_mb = own_peak_rss_mb()
    print(_RESULT + json.dumps({**outcome, "peak_rss_mb": peak_mb}, default=str), flush=True)
    return 0


def _run_bare(url: str, job: str) -> dict[str, Any]:
    """The bare statement, timed from after connecting."""
    from sqlalchemy import text

    statement, params = text(bare_statement(job)), bare_params()
    engine = _engine(url)
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
        with timer() as clock:
            result: Any = conn.execute(statement, params)
            rows = int(result.scalar_one() if result.returns_rows else result.rowcount)
            conn.commit()
    engine.dispose()
    return {"seconds": clock.seconds, "rows": rows, "runs": 1, "stats": {}}


def _run_memoryd(url: str, job: str) -> dict[str, Any]:
    """memoryd's runs until the job completes, timed from after connecting; the rows
    changed and the runs are read back from the audit afterwards."""
    from sqlalchemy import text

    from memoryd.memory.maintenance import run_to_completion
    from memoryd.memory.store import MemoryStore

    store = MemoryStore(url)
    with store.engine.connect() as conn:  # connected before the clock starts
        conn.execute(text("SELECT 1"))
    with timer() as clock:
        record = run_to_completion(store, job, params=dict(JOB_PARAMS[job]), time_budget_s=3600)
    with store.session() as session:
        runs = [dict(stats) for stats in session.execute(text(
            "SELECT stats FROM maintenance_runs WHERE job = :job AND status = 'ok'"),
            {"job": job}).scalars()]
    store.engine.dispose()
    return {"seconds": clock.seconds, "rows": sum(_changed(job, stats) for stats in runs),
            "runs": len(runs),
            "stats": {k: v for k, v in record.stats.items() if k != "checkpoint"}}


def _changed(job: str, stats: dict[str, Any]) -> int:
    if job == "consolidate":
        return int(stats.get("decayed", 0)) + int(stats.get("merged", 0))
    if job == "evict":
        return sum(int(stats.get(k, 0)) for k in ("age", "low_confidence", "cap"))
    if job == "expire":
        return int(stats.get("expired", 0))
    return int(stats.get("merged", 0))


# --- the benchmark ------------------------------------------------------------------
def measure(server: Any, jobs: Sequence[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    steps = [(job, side) for job in jobs for side in ("bare", "memoryd")]
    for job, side in progress(steps, desc="measuring", unit="run"):
        name = f"bench_{job}_{side}"
        url = _copy(server, name)
        # The copy's 4 GB sit dirty in the OS page cache: written back during the timed
        # run, they slowed whichever side ran into it (and added seconds of noise).
        os.sync()
        try:
            outcome = _run_child(url, job, side)
            time.sleep(0.6)  # let the backend's table statistics reach pg_stat
            outcome.update(_table_stats(url))
        finally:
            _drop(server, name)
        results.setdefault(job, {})[side] = outcome
    for job in jobs:
        bare, ours = results[job]["bare"], results[job]["memoryd"]
        ratio = ours["seconds"] / bare["seconds"] if bare["seconds"] > 0 else None
        updates = ours["updates"]
        results[job] = {
            "rows_changed": ours["rows"], "bare_rows_changed": bare["rows"],
            "seconds": round(ours["seconds"], 3), "bare_seconds": round(bare["seconds"], 3),
            "ratio": None if ratio is None else round(ratio, 3),
            "peak_rss_mb": round(ours["peak_rss_mb"], 1),
            "bare_peak_rss_mb": round(bare["peak_rss_mb"], 1),
            "runs": ours["runs"], "same_result": ours["fingerprint"] == bare["fingerprint"],
            "hot_update_share": round(ours["hot_updates"] / updates, 3) if updates else None,
            "bare_hot_update_share": (round(bare["hot_updates"] / bare["updates"], 3)
                                      if bare["updates"] else None),
            "memoryd": ours, "bare": bare,
        }
        results[job]["meets_targets"] = bool(
            ours["seconds"] <= TARGET_S and ratio is not None and ratio <= TARGET_RATIO
            and ours["peak_rss_mb"] <= TARGET_RSS_MB)
    return results


def write_chart(path: Path, results: dict[str, Any], scale: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    jobs = list(results)
    xs = np.arange(len(jobs))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    try:
        for offset, key, label in ((-0.2, "seconds", "memoryd run_job"),
                                   (0.2, "bare_seconds", "bare SQL statement")):
            bars = left.bar(xs + offset, [results[j][key] for j in jobs], 0.4, label=label)
            left.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        left.axhline(TARGET_S, color="red", linestyle="--", linewidth=1, label="target")
        left.set_xticks(xs, jobs)
        left.set_ylabel("seconds")
        left.set_title(f"wall time, {scale:,} memories")
        left.legend(fontsize=8)
        left.grid(axis="y", alpha=0.3)
        bars = right.bar(xs, [results[j]["ratio"] or 0.0 for j in jobs], 0.5)
        right.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
        right.axhline(TARGET_RATIO, color="red", linestyle="--", linewidth=1, label="target")
        right.set_xticks(xs, jobs)
        right.set_ylabel("memoryd / bare statement")
        right.set_title("overhead of bounded batches")
        right.legend(fontsize=8)
        right.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.maintenance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, default=DEFAULT_SCALE, metavar="N",
                        help="memories in the store (1,000 per agent)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON report path")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, help="PNG chart path")
    parser.add_argument("--jobs", default=",".join(JOBS),
                        help="comma-separated subset of " + ",".join(JOBS))
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="server directory to keep (and reuse its seeded store of the "
                             "same --scale) instead of a temp dir")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return child_main(json.loads(args.child))
    jobs = [j for j in args.jobs.split(",") if j]
    unknown = set(jobs) - set(JOBS)
    if unknown or args.scale < 100:
        parser.error(f"unknown jobs {sorted(unknown)}" if unknown else "--scale must be >= 100")

    total = Timer()
    with bench_server(args.scale, args.keep) as server:
        reused = seeded_before(server, args.scale) if args.keep else None
        seeded = {**reused, "reused": True} if reused else seed(server, args.scale)
        warm_shared_buffers(server)
        results = measure(server, jobs)
    report = {
        "benchmark": "maintenance", "date": now_iso(), "machine": machine_info(),
        "scale": args.scale, "rows_per_agent": ROWS_PER_AGENT, "seed": seeded,
        "server_options": server_options(args.scale),
        "targets": {"seconds": TARGET_S, "ratio": TARGET_RATIO, "peak_rss_mb": TARGET_RSS_MB},
        "expected_rows": expected_rows(args.scale) if args.scale <= 2_000_000 else None,
        "results": results, "total_s": round(total.seconds, 1),
    }
    write_json(args.out, report)
    write_chart(args.chart, results, args.scale)
    headers = ["job", "rows", "memoryd s", "bare s", "ratio", "RSS MB", "HOT", "same", "ok"]
    print(format_table(headers, [
        [j, r["rows_changed"], r["seconds"], r["bare_seconds"], r["ratio"], r["peak_rss_mb"],
         "" if r["hot_update_share"] is None else f"{r['hot_update_share']:.0%}",
         "yes" if r["same_result"] else "NO", "yes" if r["meets_targets"] else "no"]
        for j, r in results.items()], digits=2))
    print(f"{'reused' if reused else 'seeded'} {args.scale:,} memories ({seeded['agents']} "
          f"agents, {seeded['database_mb']} MB; load {seeded['load_s']:.0f} s, indexes "
          f"{seeded['index_s']:.0f} s); report {args.out}, chart {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
