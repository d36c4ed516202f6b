"""The maintenance benchmark reports each job child's own peak memory, not the size of
the process that started it (Linux carries ``ru_maxrss`` across exec)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHILD = "from bench.maintenance import own_peak_rss_mb; print(own_peak_rss_mb())"


def test_a_child_started_from_a_large_process_reports_its_own_peak() -> None:
    ballast = bytearray(600 * 1024 * 1024)  # resident: bytearray zero-fills what it allocates
    try:
        done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO, capture_output=True,
                              text=True, check=True)
    finally:
        del ballast
    peak = float(done.stdout)
    assert 5 < peak < 400, peak


def test_the_peak_grows_with_what_the_process_holds() -> None:
    grow = ("from bench.maintenance import own_peak_rss_mb; before = own_peak_rss_mb(); "
            "ballast = bytearray(200 * 1024 * 1024); print(own_peak_rss_mb() - before)")
    done = subprocess.run([sys.executable, "-c", grow], cwd=REPO, capture_output=True,
                          text=True, check=True)
    assert 190 < float(done.stdout) < 260
