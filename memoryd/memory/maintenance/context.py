"""What every job function receives (``JobContext``) and returns (``JobOutcome``).

Job modules import these from here, never from the runner: the runner looks jobs up
in the schedule table, which imports every job module.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from memoryd.memory import llm as llm_mod

if TYPE_CHECKING:
    from memoryd.memory.store import MemoryStore


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

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

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
