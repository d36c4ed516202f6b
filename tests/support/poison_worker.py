"""``python -m tests.support.poison_worker worker ...``: a real memoryd worker whose LLM
kills the pool process that calls it (SIGKILL, as a native crash or the OOM killer
would). A deep recall sent to it is a real poison message: every delivery kills a
process. The LLM is the one injected fake the tests may use."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from celery.signals import worker_process_init

import memoryd.worker  # noqa: F401  (connects memoryd's signal handlers first)
from memoryd.cli import main
from memoryd.memory.llm import set_llm


class KillingLLM:
    """Implements ``memoryd.memory.llm.LLM``; answers nothing."""

    name = "killing"

    def complete(self, system: str, prompt: str, max_tokens: int) -> str:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


@worker_process_init.connect
def _install(**_: Any) -> None:
    # After memoryd's own handler, which resets the process globals of a new child.
    set_llm(KillingLLM())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
