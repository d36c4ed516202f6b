"""``MemoryStore``: the in-process API over PostgreSQL. The worker and the
scheduler wrap it; agents that embed memoryd as a library call it directly."""

from __future__ import annotations

import builtins
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from memoryd import validation as check
from memoryd.config import Settings, get_settings
from memoryd.db import migrate as migrations
from memoryd.db import replicas as replication
from memoryd.db.engine import make_engine, session_scope
from memoryd.errors import LLMError, NotFound, ValidationError
from memoryd.memory import (
    detection,
    erasure,
    forgetting,
    graph,
    recall,
    sessions,
    supersession,
    turn,
    versions,
    writes,
)
from memoryd.memory.access import AccessBuffer
from memoryd.memory.agent_indexes import IndexWatch, OwnIndexes
from memoryd.memory.embeddings import (
    Embedder,
    configured_model,
    embedder_for,
    get_embedder,
    get_query_embedder,
)
from memoryd.memory.recall import QueryVector, Recaller
from memoryd.memory.rows import select_list, to_memory
from memoryd.types import (
    Entity,
    History,
    Memory,
    Page,
    Recalled,
    RecallMode,
    Related,
    SessionInfo,
    StoreItem,
    StoreResult,
    Supersession,
)
from memoryd.working import model as working_model
from memoryd.working.model import TurnContext, WorkingMemory

log = structlog.get_logger(__name__)

# ``list``'s orders. By key, in code point order whatever the database's collation, so
# a caller can page through keys it sorts the same way.
_ORDER_SQL = {"newest": "m.created_at DESC", "key": 'm.key COLLATE "C"'}


class MemoryStore:
    """Memories, sessions and a knowledge graph per agent, in one PostgreSQL database."""

    def __init__(self, database_url: str | None = None, *, engine: Engine | None = None,
                 embedder: Embedder | None = None, query_embedder: Embedder | None = None,
                 settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        if engine is None:
            from memoryd.db.engine import database_url as configured_url

            engine = make_engine(database_url or configured_url())
        self.engine = engine
        self._embedder = embedder
        # An injected embedder also embeds the queries, unless a query embedder is given.
        self._query_embedder = query_embedder or embedder
        # Recall's per-store memos: each agent's size, the store's embedding models.
        self.agent_sizes = recall.AgentSizeCache(self.settings.recall_exact_threshold)
        self.store_models = recall.StoreModels()
        # Large agents recalled without an index of their own; a worker sets its request.
        self.index_watch = IndexWatch(self.settings.agent_index_min_memories,
                                      self.settings.recall_exact_threshold)
        self.own_indexes = OwnIndexes()
        # Streaming replicas that may serve reads (``memoryd.db.replicas``), and the
        # access counts of recalls they served, on their way to the primary.
        self.replicas = replication.replica_set(self.settings)
        self.access = AccessBuffer(self.engine) if self.replicas is not None else None
        self._embedded: Any = None

    @classmethod
    def embedded(cls, data_dir: str | Path | None = None, **kwargs: Any) -> MemoryStore:
        """A store on the embedded PostgreSQL (started, or reused if already running)."""
        from memoryd.embedded.postgres import EmbeddedPostgres

        server = (EmbeddedPostgres(Path(data_dir)) if data_dir is not None
                  else EmbeddedPostgres.from_settings())
        store = cls(server.use(), **kwargs)
        store._embedded = server
        return store

    @property
    def embedder(self) -> Embedder:
        """Embeds what is stored."""
        if self._embedder is None:
            self._embedder = get_embedder()
        return self._embedder

    @property
    def query_embedder(self) -> Embedder:
        """Embeds recall queries (by default the int8 rendition: ``get_query_embedder``)."""
        if self._query_embedder is None:
            self._query_embedder = get_query_embedder()
        return self._query_embedder

    @property
    def model(self) -> str:
        """The name of the model new memories are embedded with, without loading it (a
        process that only recalls needs only the query embedder)."""
        return (self._embedder.name if self._embedder is not None
                else configured_model(self.settings))

    def embedder_for(self, model: str, *, query: bool = False) -> Embedder:
        """The embedder of memories of ``model`` (``query``: of recall queries compared
        with them): this store's own for its model, else ``embeddings.embedder_for``."""
        if model == self.model:
            return self.query_embedder if query else self.embedder
        return embedder_for(model, query=query)

    def migrate(self) -> None:
        """Bring the schema to the newest revision (idempotent, safe concurrently)."""
        migrations.upgrade(self.engine)

    def close(self) -> None:
        """Release connections and the access flusher, and the embedded server: the last
        process using it stops it."""
        if self.access is not None:
            self.access.close()
        self.engine.dispose()
        if self._embedded is not None:
            self._embedded.release()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with session_scope(self.engine) as session:
            yield session

    @contextmanager
    def read_session(self, agent_id: str) -> Iterator[Session]:
        """A session for pure reads of the agent's data: on a replica when one is
        configured, healthy and has replayed the agent's own writes, else the primary
        (``session.info["replica"]`` says which). Of explicit transactions
        (``memoryd.db.engine.explicit_transactions``): each statement is a transaction of
        its own, which spares a read its BEGIN and COMMIT round trips, unless a pipeline
        begins one (recall does, for the settings its statements share). In READ
        COMMITTED, PostgreSQL's default, each statement reads its own snapshot either way."""
        if self.replicas is None:
            with session_scope(self.engine, explicit=True) as session:
                yield session
            return
        with self.replicas.read_session(agent_id, self.engine) as session:
            yield session

    @contextmanager
    def write_session(self, *agent_ids: str) -> Iterator[Session]:
        """A session on the primary whose commit the agents' later reads will see,
        wherever they are served (``mark_written``)."""
        with self.session() as session:
            yield session
        self.mark_written(agent_ids)

    def mark_written(self, agent_ids: Iterable[str]) -> None:
        """The agents' writes committed so far must be visible to their next reads: a
        replica that has not replayed them serves those reads no more (no-op without
        replicas)."""
        if self.replicas is not None:
            self.replicas.mark(self.engine, agent_ids)

    def _touch(self, session: Session, agent_id: str, ids: builtins.list[Any]
               ) -> dict[Any, Mapping[Any, Any]]:
        """Recall's access bump: at once on the primary, deferred to it from a replica."""
        if self.access is not None and session.info.get("replica"):
            return self.access.touch(session, agent_id, ids)
        return recall.touch(session, agent_id, ids)

    # --- writing ----------------------------------------------------------------
    def store(self, agent_id: str, content: str, **fields: Any) -> StoreResult:
        """Store one memory; an identical content for this agent is a duplicate."""
        agent = check.agent_id(agent_id)
        # Validated here too so errors name the argument (``content``), not ``items[0].content``.
        item = check.store_item({"content": content, **fields}, self.settings.max_content_bytes)
        return self.store_many(agent, [item])[0]

    def store_many(self, agent_id: str,
                   items: Iterable[StoreItem | Mapping[str, Any]]) -> builtins.list[StoreResult]:
        """Store several memories: one embedding batch, one transaction."""
        agent = check.agent_id(agent_id)
        checked = check.store_items(items, self.settings.max_content_bytes)
        return self.store_validated([(agent, item) for item in checked])

    def store_validated(self, pairs: Sequence[tuple[str, StoreItem]], *,
                        actor: str | None = None) -> builtins.list[StoreResult]:
        """Store already validated (agent id, item) pairs, of one or more agents: one
        embedding pass outside the transaction, then one transaction, in which the
        memories each replaces are superseded (``detection.after_write``). ``actor``: who
        stores them (``key:<id>``), as versions and supersessions record it."""
        rows = writes.prepare(self.embedder, pairs, actor=actor)
        judges = self.judges
        # An LLM's call is made after the commit, never inside a transaction.
        judge_now = judges if judges is not None and judges.llm is None else None
        with self.write_session(*{agent for agent, _ in pairs}) as session:
            results = writes.write(session, rows)
            results, later = detection.after_write(session, pairs, results, judge_now,
                                                   actor=actor, judging=judges is not None)
        if later and judges is not None:
            results = self._judge_after(later, results, judges, actor=actor)
        return results

    def _judge_after(self, pending: Mapping[str, builtins.list[uuid.UUID]],
                     results: builtins.list[StoreResult], judges: detection.Judges, *,
                     actor: str | None) -> builtins.list[StoreResult]:
        """Judge committed memories with the LLM beside the offline judge: candidates
        read, the one call made outside any transaction, decisions written in a short
        one. An LLM that fails leaves the offline judge alone (``reconcile`` can judge
        them again later)."""
        superseded: dict[uuid.UUID, builtins.list[uuid.UUID]] = {}
        for agent, ids in pending.items():
            with self.session() as session:
                pairs = detection.pairs_of(session, agent, ids, offline=False)
            if not pairs:
                continue
            try:
                applied, queued = detection.decide(pairs, judges, "judge")
            except LLMError as exc:
                log.warning("store.llm_judge_failed", error=type(exc).__name__)
                applied, queued = detection.decide(pairs, detection.Judges(), "judge")
            with self.write_session(agent) as session:
                outcome = detection.record(session, agent, applied, queued,
                                           judged=len(pairs), actor=actor)
            for new, olds in outcome.superseded.items():
                superseded.setdefault(new, []).extend(olds)
        return detection.with_superseded(results, superseded)

    @property
    def judges(self) -> detection.Judges | None:
        """Who judges new memories against the ones they may replace (``settings.judge``)."""
        return detection.Judges.configured(self.settings)

    # --- reading ------------------------------------------------------------------
    def recall(self, agent_id: str, query: str, *, limit: int = 10,
               category: str | None = None, tags: Iterable[str] | None = None,
               session_id: str | None = None, include_archived: bool = False,
               mode: RecallMode = "fast", since: datetime | str | None = None,
               until: datetime | str | None = None,
               metadata: Mapping[str, Any] | None = None, include_superseded: bool = False,
               as_of: datetime | str | None = None) -> builtins.list[Recalled]:
        """The agent's memories most relevant to ``query``, best first; ``since`` and
        ``until`` bound ``created_at`` (until exclusive), ``metadata`` keeps memories
        whose metadata has each given key with exactly that value. Current memories only,
        unless ``include_superseded`` (replaced ones come too, marked) or ``as_of`` (what
        was true then)."""
        agent = check.agent_id(agent_id)
        text_query = check.query(query)
        check.limit(limit)
        check.mode(mode)
        filters = _filters(since, until, metadata, category=check.category(category),
                           tags=check.tags(tags),
                           session_id=check.short_text("session_id", session_id),
                           include_archived=check.boolean("include_archived", include_archived),
                           include_superseded=check.boolean("include_superseded",
                                                            include_superseded),
                           as_of=check.as_of(as_of))
        vector = self.query_vector(text_query)
        with self.read_session(agent) as session:
            return recall.recall(self.recaller, session, agent, text_query, filters,
                                 limit=limit, mode=mode, query_vector=vector)

    def query_vector(self, query: str) -> QueryVector:
        """``query``'s embedding by the store's query embedder, computed when recall
        asks for it."""
        return recall.QueryVector(lambda: self.query_embedder, query)

    @property
    def recaller(self) -> Recaller:
        """What this store lends its recalls (``recall.recall``)."""
        return Recaller(
            settings=self.settings, sizes=self.agent_sizes, models=self.store_models,
            own_model=self.model,
            query_embedder_for=lambda model: self.embedder_for(model, query=True),
            touch=self._touch, notice_size=self.index_watch.notice,
            has_own_index=self.own_indexes.has,
            own_graph_current=self.own_indexes.current)

    def get(self, agent_id: str, memory_id: uuid.UUID | str) -> Memory:
        agent, mid = check.agent_id(agent_id), check.memory_id(memory_id)
        return self._fetch_one(agent, "m.agent_id = :a AND m.id = :id", {"a": agent, "id": mid},
                               f"memory {mid} not found for this agent")

    def get_by_key(self, agent_id: str, key: str) -> Memory:
        agent, memory_key = check.agent_id(agent_id), check.short_text("key", key)
        return self._fetch_one(agent, "m.agent_id = :a AND m.key = :k AND m.valid_to IS NULL",
                               {"a": agent, "k": memory_key},
                               f"no memory with key {memory_key!r} for this agent")

    def _fetch_one(self, agent: str, where_sql: str, params: Mapping[str, Any],
                   not_found_message: str) -> Memory:
        """The agent's one memory (alias ``m``) matching ``where_sql``; ``NotFound`` if none."""
        with self.read_session(agent) as session:
            row = session.execute(text(
                f"SELECT {select_list()} FROM memories m WHERE {where_sql}"),
                params).mappings().first()
        if row is None:
            raise NotFound(not_found_message)
        return to_memory(row)

    def list(self, agent_id: str, *, category: str | None = None, limit: int = 50,
             offset: int = 0, since: datetime | str | None = None,
             until: datetime | str | None = None,
             metadata: Mapping[str, Any] | None = None, order: str = "newest",
             include_superseded: bool = False, as_of: datetime | str | None = None) -> Page:
        """The agent's memories, filtered like ``recall``: newest first, or with
        ``order="key"`` by key (code point order; memories without a key last)."""
        agent = check.agent_id(agent_id)
        check.limit(limit)
        check.offset(offset)
        ordering = _ORDER_SQL[check.list_order(order)]
        filters = _filters(since, until, metadata, category=check.category(category),
                           include_superseded=check.boolean("include_superseded",
                                                            include_superseded),
                           as_of=check.as_of(as_of))
        where = " AND ".join(["m.agent_id = :a", *filters.listed()])
        params = {"a": agent, "n": limit, "o": offset, **filters.params()}
        with self.read_session(agent) as session:
            total = session.execute(text(f"SELECT count(*) FROM memories m WHERE {where}"),
                                    params).scalar_one()
            rows = session.execute(text(
                f"SELECT {select_list()} FROM memories m WHERE {where} "
                f"ORDER BY {ordering}, m.id LIMIT :n OFFSET :o"), params).mappings()
            return Page(total=total, items=[to_memory(r) for r in rows])

    def metadata_values(self, agent_id: str, field: str, *,
                        metadata: Mapping[str, Any] | None = None, limit: int = 100,
                        offset: int = 0) -> builtins.list[Any]:
        """The distinct values of the metadata key ``field`` among the agent's memories
        (those whose metadata also passes ``metadata``), in jsonb order: what a caller
        that files memories under a metadata key lists without reading the memories."""
        agent, name = check.agent_id(agent_id), check.required_text("field", field)
        check.limit(limit)
        check.offset(offset)
        filters = _filters(None, None, metadata)
        where = " AND ".join(["m.agent_id = :a", "jsonb_exists(m.metadata, :field)",
                              *filters.listed()])
        params = {"a": agent, "field": name, "n": limit, "o": offset, **filters.params()}
        with self.read_session(agent) as session:
            return builtins.list(session.execute(text(
                f"SELECT DISTINCT m.metadata -> :field AS v FROM memories m WHERE {where} "
                "ORDER BY v LIMIT :n OFFSET :o"), params).scalars())

    def related(self, agent_id: str, memory_id: uuid.UUID | str,
                limit: int = 10) -> builtins.list[Related]:
        """Explicitly linked memories first, then the nearest neighbours by meaning."""
        agent, mid = check.agent_id(agent_id), check.memory_id(memory_id)
        check.limit(limit)
        with self.read_session(agent) as session:
            if session.execute(text("SELECT 1 FROM memories WHERE agent_id = :a AND id = :id"),
                               {"a": agent, "id": mid}).first() is None:
                raise NotFound(f"memory {mid} not found for this agent")
            rows = session.execute(text(f"""
                WITH linked AS (
                    SELECT CASE WHEN l.source_id = :id THEN l.target_id ELSE l.source_id END
                               AS other, l.kind, l.score
                    FROM memory_links l
                    WHERE l.agent_id = :a AND (l.source_id = :id OR l.target_id = :id)),
                near AS (
                    SELECT o.id AS other, 'similar' AS kind,
                           1 - (o.embedding <=> self.embedding) AS score
                    FROM memories self, memories o
                    WHERE self.id = :id AND self.agent_id = :a AND o.agent_id = :a
                      AND o.id <> :id AND o.archived_at IS NULL AND o.valid_to IS NULL
                      AND o.embedding_model = self.embedding_model
                    ORDER BY (o.embedding <=> self.embedding) + 0 LIMIT :n),
                merged AS (
                    SELECT DISTINCT ON (other) other, kind, score, prio FROM (
                        SELECT other, kind, score, 0 AS prio FROM linked
                        UNION ALL SELECT other, kind, score, 1 FROM near) u
                    ORDER BY other, prio)
                SELECT {select_list()}, merged.kind AS link_kind, merged.score AS link_score
                FROM merged JOIN memories m ON m.id = merged.other AND m.agent_id = :a
                ORDER BY merged.prio, merged.score DESC LIMIT :n
            """), {"a": agent, "id": mid, "n": limit}).mappings().all()
        return [Related(memory=to_memory(r), kind=r["link_kind"], score=float(r["link_score"]))
                for r in rows]

    def context(self, agent_id: str, query: str, *, limit: int = 10,
                as_of: datetime | str | None = None, thread_id: str | None = None,
                budget: int | None = None, budget_unit: str = "chars") -> str:
        """A prompt-ready block of the relevant memories, grouped by category (as of a
        point in time, if given): ``turn_context``'s block."""
        return self.turn_context(agent_id, query, limit=limit, as_of=as_of,
                                 thread_id=thread_id, budget=budget,
                                 budget_unit=budget_unit).context

    def turn_context(self, agent_id: str, query: str, *, limit: int = 10,
                     as_of: datetime | str | None = None, thread_id: str | None = None,
                     budget: int | None = None, budget_unit: str = "chars",
                     working: WorkingMemory | None = None) -> TurnContext:
        """The turn's context (``memory.turn``): ``working``, the thread's working
        memory, and the long-term memories similar to ``query``, naming its entities and
        recent in session ``thread_id``, fused within ``budget``."""
        agent, text_query, count = check.agent_id(agent_id), check.query(query), \
            check.limit(limit)
        moment = check.as_of(as_of)
        thread = None if thread_id is None else working_model.thread_id(thread_id)
        size, unit = working_model.budget_of(budget), working_model.unit_of(budget_unit)
        similar = [hit.memory for hit in self.recall(agent, text_query, limit=count,
                                                     as_of=moment)]
        names = turn.entity_names(text_query, working.entities if working else ())
        with self.read_session(agent) as session:
            named = turn.named(session, agent, names, count, moment)
            recent = (sessions.messages(session, agent, thread, max(1, count // 2))
                      if thread is not None else [])
        return turn.assemble(similar, named, recent, working, limit=count, budget=size,
                             unit=unit)

    # --- validity: supersession, history, review ------------------------------------
    def supersede(self, agent_id: str, memory_id: uuid.UUID | str,
                  supersedes: Iterable[uuid.UUID | str], *,
                  actor: str | None = None) -> builtins.list[uuid.UUID]:
        """Mark memories the agent holds as replaced by ``memory_id`` (as ``store``'s
        ``supersedes`` does for a new memory); the ids superseded."""
        agent, mid = check.agent_id(agent_id), check.memory_id(memory_id)
        olds = check.memory_ids("supersedes", supersedes)
        if not olds:
            raise ValidationError("supersedes", "must name at least one memory")
        with self.write_session(agent) as session:
            if session.execute(text("SELECT 1 FROM memories WHERE agent_id = :a AND id = :id "
                                    "AND valid_to IS NULL"), {"a": agent, "id": mid}).first() \
                    is None:
                raise NotFound(f"memory {mid} not found among this agent's current memories")
            return supersession.explicit(session, agent, mid, olds, actor=actor)

    def restore_superseded(self, agent_id: str, memory_id: uuid.UUID | str, *,
                           actor: str | None = None) -> bool:
        """Undo a supersession: the memory is current again (False if it was)."""
        agent, mid = check.agent_id(agent_id), check.memory_id(memory_id)
        with self.write_session(agent) as session:
            return supersession.restore(session, agent, mid, actor=actor)

    def history(self, agent_id: str, memory_id: uuid.UUID | str) -> History:
        """The memory, each earlier state of it, and the supersessions naming it."""
        agent, mid = check.agent_id(agent_id), check.memory_id(memory_id)
        with self.read_session(agent) as session:
            return versions.history(session, agent, mid)

    def reviews(self, agent_id: str | None = None, *, status: str = "review",
                limit: int = 50, offset: int = 0) -> builtins.list[Supersession]:
        """The review queue: replacements the judges were unsure of (one agent's, or all)."""
        agent = None if agent_id is None else check.agent_id(agent_id)
        check.limit(limit)
        check.offset(offset)
        with self.session() as session:
            return supersession.reviews(session, agent, status=status, limit=limit,
                                        offset=offset)

    def decide_review(self, review_id: int, *, accept: bool, agent_id: str | None = None,
                      actor: str | None = None) -> Supersession:
        """Accept (supersede) or reject one queued replacement."""
        number = check.limit(review_id, "review_id", high=2**63 - 1)
        agent = None if agent_id is None else check.agent_id(agent_id)
        with self.session() as session:
            decided = supersession.decide(session, number, accept=check.boolean(
                "accept", accept), actor=actor, agent_id=agent)
        self.mark_written([decided.agent_id])
        return decided

    # --- forgetting -------------------------------------------------------------
    def forget(self, agent_id: str, memory_id: uuid.UUID | str) -> bool:
        """Erase one memory and every copy of it: its versions, what derives from it
        (``memory.forgetting``). False if it did not exist."""
        agent, mid = check.agent_id(agent_id), check.memory_id(memory_id)
        with self.write_session(agent) as session:
            return forgetting.forget(session, agent, mid)

    def forget_agent(self, agent_id: str, batch_size: int = 5000) -> int:
        """Erase everything memoryd holds of the agent, in bounded batches
        (``memoryd.memory.erasure``). Returns memories deleted."""
        batch = check.limit(batch_size, "batch_size", high=erasure.MAX_BATCH)
        done = erasure.forget_agent(self, agent_id, batch_size=batch)
        self.mark_written([agent_id])
        return done.deleted["memories"]

    # --- knowledge graph and sessions ---------------------------------------------
    def kg_add(self, agent_id: str, entity: Entity | Mapping[str, Any]) -> bool:
        agent, parsed = check.agent_id(agent_id), check.entity(entity)
        with self.write_session(agent) as session:
            return graph.add(session, agent, parsed)

    def kg_query(self, agent_id: str, start_id: str, depth: int = 2, *,
                 as_of: datetime | str | None = None) -> builtins.list[Entity]:
        """Entities reachable from ``start_id`` over current edges (or those valid at
        ``as_of``)."""
        agent = check.agent_id(agent_id)
        start, hops = check.entity_ref("start_id", start_id), check.depth(depth)
        moment = check.as_of(as_of)
        with self.read_session(agent) as session:
            return graph.query(session, agent, start, hops, as_of=moment)

    def sessions(self, agent_id: str) -> builtins.list[SessionInfo]:
        agent = check.agent_id(agent_id)
        with self.read_session(agent) as session:
            return sessions.list_sessions(session, agent)

    def session_messages(self, agent_id: str, session_id: str, *,
                         limit: int | None = None) -> builtins.list[Memory]:
        """A session's messages in order, oldest first: the newest ``limit`` (all when
        None). Empty for a session that does not exist."""
        agent = check.agent_id(agent_id)
        sid = check.required_text("session_id", session_id)
        count = check.message_limit(limit)
        with self.read_session(agent) as session:
            return sessions.messages(session, agent, sid, count)


def _filters(since: object, until: object, metadata: object, **chosen: Any) -> recall.Filters:
    """Recall's and list's filters, the time range and metadata checked by name."""
    start, end = check.time_range(since, until)
    wanted = check.metadata_filter(metadata)
    return recall.Filters(since=start, until=end,
                          metadata=json.dumps(wanted, sort_keys=True) if wanted else None,
                          **chosen)
