"""Helpers shared by the benchmarks: a throwaway embedded PostgreSQL, an embedder
that embeds each text once, the one clock (``timer`` / ``Timer``, and ``Stopwatch`` for
phases), a plain-text table, and JSON / PNG output."""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parents[1]
OUT_DIR = REPO_ROOT / "bench" / "out"

T = TypeVar("T")


# --- database -----------------------------------------------------------------------
def let_service_user_in(workdir: Path) -> Path:
    """``workdir``, a temporary directory of the benchmark's own, which the ``memoryd``
    service user may enter (o+x: not list) when run as root: memoryd runs its embedded
    servers as that user, and never opens a directory above the one it is given."""
    if os.geteuid() == 0:
        workdir.chmod(stat.S_IMODE(workdir.stat().st_mode) | stat.S_IXOTH)
    return workdir


@contextmanager
def embedded_postgres(prefix: str = "memoryd-bench-") -> Iterator[str]:
    """A fresh embedded PostgreSQL in a temp dir; yields its URL, then stops it and
    deletes the directory (also on errors and Ctrl-C)."""
    from memoryd.embedded.postgres import EmbeddedPostgres

    data_dir = Path(tempfile.mkdtemp(prefix=prefix))
    server = EmbeddedPostgres(data_dir)
    try:
        yield server.ensure_running()
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)


def start_standby(primary: Any, data_dir: Path) -> Any:
    """A hot standby of the embedded PostgreSQL ``primary`` (an ``EmbeddedPostgres``):
    ``pg_basebackup -R -X stream`` into ``data_dir``, started on a free port, streaming
    from the primary as its superuser. Same roles and passwords; stop it with ``stop()``."""
    import subprocess

    from memoryd.embedded._proc import free_port
    from memoryd.embedded.postgres import APP_ROLE, OWNER, EmbeddedPostgres, bin_dir
    from memoryd.private_files import UMASK, write_private

    standby = EmbeddedPostgres(data_dir, port=free_port())
    standby._prepare_dir(standby.data_dir)  # as root, the service user's (as the primary's)
    for role in (OWNER, APP_ROLE):
        write_private(standby.password_file(role), primary.password(role))
        standby.password(role)
    env = {**os.environ, "PGPASSWORD": primary.password(OWNER)}
    result = subprocess.run(
        [str(bin_dir() / "pg_basebackup"), "-D", str(standby.pgdata), "-R", "-X", "stream",
         "-c", "fast", "-h", "127.0.0.1", "-p", str(primary.port), "-U", OWNER, "-w"],
        env=env, capture_output=True, text=True, check=False, umask=UMASK,
        **standby._run_as())
    if result.returncode != 0:
        raise RuntimeError(f"pg_basebackup failed: {result.stderr.strip()[-2000:]}")
    standby._start()
    return standby


# --- embeddings -------------------------------------------------------------------
class CachingEmbedder:
    """Wraps an embedder and remembers every text's vector.

    A benchmark warms it with its whole corpus once (with a progress bar), then hands
    it to ``MemoryStore(..., embedder=...)``: memoryd and the baselines see exactly the
    same vectors, and nothing is embedded twice.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dim: int = inner.dim
        self.name: str = inner.name
        self._cache: dict[str, npt.NDArray[np.float32]] = {}

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for text, vector in zip(missing, self.inner.embed(missing), strict=True):
                self._cache[text] = vector
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts]).astype(np.float32, copy=False)

    def warm(self, texts: Sequence[str], *, batch: int = 256,
             desc: str = "embedding") -> npt.NDArray[np.float32]:
        """Embed ``texts`` (progress bar by batch) and return their matrix, in order."""
        unique = [t for t in dict.fromkeys(texts) if t not in self._cache]
        for start in progress(range(0, len(unique), batch), desc=desc, unit="batch"):
            self.embed(unique[start:start + batch])
        return self.embed(texts)


# --- timing and progress ---------------------------------------------------------
class Timer:
    """Wall-clock time from its start (``time.perf_counter``): running until ``stop()``,
    fixed afterwards. The one clock of the benchmarks; most code uses it through
    ``timer()`` or ``Stopwatch``."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stopped: float | None = None

    @property
    def seconds(self) -> float:
        end = time.perf_counter() if self.stopped is None else self.stopped
        return end - self.started

    @property
    def ms(self) -> float:
        return self.seconds * 1000

    def stop(self) -> float:
        """Stop the clock (once; later calls keep the first stop); the seconds."""
        if self.stopped is None:
            self.stopped = time.perf_counter()
        return self.seconds


@contextmanager
def timer() -> Iterator[Timer]:
    """``with timer() as t: work()`` then ``t.seconds`` / ``t.ms``; inside the block they
    read the time so far."""
    clock = Timer()
    try:
        yield clock
    finally:
        clock.stop()


class Stopwatch:
    """Accumulates wall-clock seconds per phase: ``with watch("store"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        clock = Timer()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + clock.stop()

    def rounded(self, digits: int = 2) -> dict[str, float]:
        return {k: round(v, digits) for k, v in self.seconds.items()}


def _quiet() -> bool:
    return os.environ.get("BENCH_NO_PROGRESS", "") not in ("", "0")


def progress(iterable: Iterable[T], **kwargs: Any) -> Iterator[T]:
    """Iterate with a tqdm bar on stderr; quiet under ``BENCH_NO_PROGRESS=1``."""
    from tqdm import tqdm

    yield from tqdm(iterable, mininterval=0.5, dynamic_ncols=True, disable=_quiet(), **kwargs)


def progress_bar(total: int, **kwargs: Any) -> Any:
    """A manual tqdm bar (``with progress_bar(n) as bar: bar.update(k)``)."""
    from tqdm import tqdm

    return tqdm(total=total, mininterval=0.5, dynamic_ncols=True, disable=_quiet(), **kwargs)


# --- reporting --------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "platform": platform.platform(),
            "python": platform.python_version()}


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
                 digits: int = 3) -> str:
    """A fixed-width text table; floats get ``digits`` decimals, the first column is left-
    aligned and the others right-aligned."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}f}"
        return "" if value is None else str(value)

    body = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths, strict=True))).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(list(headers)), rule, *(line(r) for r in body)])


def write_json(path: Path, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def grouped_bars(ax: Any, groups: Sequence[str], series: Mapping[str, Sequence[float]], *,
                 title: str, ylabel: str) -> None:
    """Draw one bar per series inside each group, values printed on the bars."""
    count = max(len(series), 1)
    width = 0.8 / count
    xs = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
        bars = ax.bar(xs + (i - (count - 1) / 2) * width, values, width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
    ax.set_xticks(xs, list(groups))
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def write_bar_charts(path: Path, panels: Sequence[Mapping[str, Any]], *,
                     suptitle: str = "") -> Path:
    """A PNG with one grouped bar chart per panel. Each panel is a mapping with
    ``groups``, ``series`` (name -> values), ``title`` and ``ylabel``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
    try:
        for ax, panel in zip(axes[0], panels, strict=True):
            grouped_bars(ax, panel["groups"], panel["series"], title=panel["title"],
                         ylabel=panel["ylabel"])
        if suptitle:
            fig.suptitle(suptitle)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
    return path


def pool_model() -> str:
    """The model benchmarks' precomputed vectors come from: the configured one."""
    from memoryd.config import get_settings
    from memoryd.memory.embeddings import configured_model

    return configured_model(get_settings())
