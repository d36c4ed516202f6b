"""What every job function receives (``JobContext``) and returns (``JobOutcome``).

Job modules import these from here, never from the runner: the runner looks jobs up
in the schedule table, which imports every job module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog
from sqlalchemy.exc import DBAPIError

from memoryd.db import faults
from memoryd.errors import ValidationError
from memoryd.memory import llm as llm_mod
from memoryd.redaction import describe_error

if TYPE_CHECKING:
    from memoryd.memory.store import MemoryStore

log = structlog.get_logger(__name__)

# The most failures a run's stats list (``failed``); ``agents_failed`` counts them all.
MAX_FAILURES_LISTED = 100


@dataclass
class JobContext:
    """One run's store, scope, batch size and time budget."""

    store: MemoryStore
    run_id: int | None
    agent_id: str | None
    dry_run: bool
    batch_size: int
    deadline: float  # time.monotonic() value after which the job should stop and resume later
    now: datetime
    llm: llm_mod.LLM | None = None
    # One entry per agent's step that failed alone (``apart``), for the run's stats.
    failures: list[dict[str, str]] = field(default_factory=list)

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def apart(self, step: str, work: Callable[[], object], **subject: str) -> bool:
        """Run one agent's ``step`` of a fleet-wide job (``subject``: ``agent_id=...``,
        or the object it works on); whether it succeeded. A failure of that agent's
        step alone is recorded (``failures``: the subject, the step and the error's class
        and condition, never a row's values) and the job goes on with the others: one
        agent's data or lock must not stop every other agent's maintenance. A failure
        no agent can escape (a lost connection, a bug) still ends the run."""
        try:
            work()
        except (DBAPIError, ValidationError) as exc:
            if not one_agents_fault(exc):
                raise
            self.failures.append({**subject, "step": step, "error": describe_error(exc)})
            log.warning("maintenance.step_failed", run_id=self.run_id, step=step,
                        error=describe_error(exc), **subject)
            return False
        return True

    def failure_stats(self) -> dict[str, Any]:
        """What the run's stats say of the steps that failed alone (nothing if none)."""
        if not self.failures:
            return {}
        return {"agents_failed": len(self.failures),
                "failed": self.failures[:MAX_FAILURES_LISTED]}

    def agent_clause(self, alias: str = "m") -> str:
        """SQL restricting to the run's agent, if any (bind ``:agent_id``)."""
        return f"{alias}.agent_id = :agent_id" if self.agent_id else "TRUE"

    def get_llm(self) -> llm_mod.LLM:
        if self.llm is None:
            self.llm = llm_mod.get_llm()
        return self.llm


@dataclass
class JobOutcome:
    """A job's result: its stats, and whether it finished or ran out of its time budget."""

    stats: dict[str, Any]
    complete: bool = True


JobFn = Callable[..., JobOutcome]


def llm_label(llm: llm_mod.LLM) -> str:
    """What stats call the LLM: ``extractive`` for the offline fallback, else its name."""
    return "extractive" if llm_mod.is_fallback(llm) else llm.name


def one_agents_fault(exc: DBAPIError | ValidationError) -> bool:
    """Whether ``exc`` concerns the step's own agent: its data refused, a lock or a name
    in the way, a timeout. Not when the connection or the server is gone (SQLSTATE class
    08, 57P0x, or no answer at all): every next agent would fail the same way."""
    if isinstance(exc, ValidationError):
        return True
    state = faults.sqlstate(exc)
    return not (exc.connection_invalidated or state is None or state.startswith(("08", "57P")))
