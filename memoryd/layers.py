"""memoryd's layers, bottom first: a module imports only from its own layer or below.

``tests/unit/test_layers.py`` reads every import of the package (module level and inside
functions) and fails on an import that goes up this order or on any import cycle, so the
order below is the house plan and not a wish. Imports under ``if TYPE_CHECKING:`` count
too: a type names a dependency as much as a call does. Each entry names a module or a
package and all its modules (the root package only itself); the most specific entry
decides a module's layer, and a module no entry names fails the test.

- base: types, errors, settings and the process's globals, redaction, logging, the
  argument rules, the job names and cron syntax. They need nothing of memoryd's services,
  so the thin client and every server part can stand on them.
- broker: the task queues and Celery's settings, which client and workers share.
- working: each thread's working memory in Redis, which the client and the gateway
  reach without a worker.
- client: the thin client sends tasks on the broker and must never load the database,
  memory or worker code.
- embedded: the PostgreSQL and Redis servers memoryd starts from its settings; below
  db because the database engine asks the embedded server for its URL.
- db: the engine, models, migrations, fault classification, backups, and the routing of
  reads to streaming replicas (``memoryd.db.replicas``).
- memory: the domain (store, recall, writes, embeddings, the LLM) on the database.
- maintenance: the maintenance jobs, which work through the memory layer.
- auth: API keys and their scopes, kept in the database.
- schedules: when each job runs (the table, Celery beat, APScheduler).
- worker: the Celery app, its signals and delivery guards.
- tasks: the thin Celery tasks, each calling one plain function of the layers below.
- gateway: the HTTP API and MCP, which reach workers only through the client.
- integrations: the framework adapters, built on the client.
- cli: the ``memoryd`` command, which assembles everything.
- facade: the package itself (``memoryd.MemoryStore``, ``memoryd.MemoryClient``).
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("memoryd.types", "memoryd.errors", "memoryd.private_files", "memoryd.process",
              "memoryd.clock", "memoryd.redaction", "memoryd.logging", "memoryd.layers",
              "memoryd.schedules.names", "memoryd.schedules.cron", "memoryd.validation",
              "memoryd.config")),
    ("broker", ("memoryd.broker", "memoryd.celery_config")),
    ("working", ("memoryd.working",)),
    ("client", ("memoryd.client",)),
    ("embedded", ("memoryd.embedded",)),
    ("db", ("memoryd.db",)),
    ("memory", ("memoryd.memory",)),
    ("maintenance", ("memoryd.memory.maintenance",)),
    ("auth", ("memoryd.auth",)),
    ("schedules", ("memoryd.schedules",)),
    ("worker", ("memoryd.worker",)),
    ("tasks", ("memoryd.tasks",)),
    ("gateway", ("memoryd.gateway",)),
    ("integrations", ("memoryd.integrations",)),
    ("cli", ("memoryd.cli", "memoryd.__main__")),
    ("facade", ("memoryd",)),
)

# The thin client and the framework adapters run where the server's dependencies are
# not installed: what they load at run time, directly or through other modules, lies in
# these layers.
THIN = ("memoryd.client", "memoryd.integrations")
THIN_LAYERS = ("base", "broker", "working", "client", "integrations")
