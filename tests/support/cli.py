"""Running the real ``memoryd`` command in a subprocess, as an operator would."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def memoryd(env: dict[str, str], *args: str, timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "memoryd", *args], env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"memoryd {' '.join(args)} exited {done.returncode}:\n"
                             f"stdout: {done.stdout}\nstderr: {done.stderr}")
    return done


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(done.stdout)
