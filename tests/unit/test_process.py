"""The process globals live in one place and one reset forgets them all."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from memoryd import clock, process
from memoryd.config import get_settings
from memoryd.memory.llm import ExtractiveLLM, get_llm, set_llm


def test_reset_forgets_every_process_global() -> None:
    get_settings()
    set_llm(ExtractiveLLM())
    clock.set_clock(lambda: datetime(2020, 1, 1, tzinfo=UTC))
    try:
        process.reset()
        assert {"settings", "llm", "clock"} <= set(process.SLOTS)
        assert {name: slot.value for name, slot in process.SLOTS.items()} == dict.fromkeys(
            process.SLOTS)
        assert clock.now().year >= 2026
    finally:
        set_llm(None)
        clock.set_clock(None)


def test_settings_are_read_again_after_a_reset() -> None:
    before = get_settings().max_content_bytes
    os.environ["MEMORYD_MAX_CONTENT_BYTES"] = str(before + 1)
    try:
        assert get_settings().max_content_bytes == before  # cached
        process.reset()
        assert get_settings().max_content_bytes == before + 1
    finally:
        del os.environ["MEMORYD_MAX_CONTENT_BYTES"]
        process.reset()


def test_an_installed_llm_wins_until_it_is_removed() -> None:
    fake = ExtractiveLLM()
    set_llm(fake)
    try:
        assert get_llm() is fake
    finally:
        set_llm(None)
    assert get_llm() is not fake
