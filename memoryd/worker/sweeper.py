"""Each worker's sweep for threads past their deadline (``memoryd.working``).

Redis never expires a thread on its own; every worker instead looks, every
``working_sweep_interval_s``, for threads past their deadline and for promotions whose
claim lapsed, and sends ``memoryd.working.promote`` for each. The sweep is one atomic
script, so any number of workers may run it: each thread is handed out once per lease."""

from __future__ import annotations

import threading

import structlog

from memoryd.config import Settings
from memoryd.redaction import summarize
from memoryd.working.store import PROMOTE_TASK, WorkingStore

log = structlog.get_logger(__name__)


class Sweeper:
    """A daemon thread sweeping until ``stop``."""

    def __init__(self, app: object, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memoryd-sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        working: WorkingStore | None = None
        while not self._stop.wait(self.settings.working_sweep_interval_s):
            try:
                working = working or WorkingStore.from_settings(self.settings)
                self.sweep_once(working)
            except Exception as exc:  # Redis or the broker away: the next sweep tries again
                log.warning("working.sweep_failed", error=type(exc).__name__)
        if working is not None:
            working.close()

    def sweep_once(self, working: WorkingStore) -> int:
        tags = working.sweep()
        for tag in tags:
            self.app.send_task(PROMOTE_TASK, kwargs={"tag": tag},  # type: ignore[attr-defined]
                               argsrepr="()", kwargsrepr=summarize({"tag": tag}))
        if tags:
            log.info("working.swept", promotions=len(tags))
        return len(tags)
