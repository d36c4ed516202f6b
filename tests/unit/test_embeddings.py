"""The local MiniLM embedder: one text (its own one-thread session) and batches agree;
the int8 rendition of the wheel's model is derived once, cached, and stays close to it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memoryd.config import get_settings
from memoryd.memory.embeddings import DIM, MiniLMEmbedder, get_embedder, model_file, to_pgvector

TEXTS = ["The user is allergic to peanuts.", "Meeting moved to Tuesday.",
         "A much longer sentence about the quarterly budget review and the new hires."]


@pytest.mark.parametrize("int8", [True, False])
def test_single_text_and_batch_give_the_same_unit_vectors(int8: bool) -> None:
    embedder = get_embedder()
    assert isinstance(embedder, MiniLMEmbedder) and not embedder.int8
    if int8:
        embedder = MiniLMEmbedder(0, int8=True)
    batch = embedder.embed(TEXTS)
    alone = np.stack([embedder.embed([t])[0] for t in TEXTS])
    assert batch.shape == alone.shape == (3, DIM)
    assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    assert np.allclose(batch, alone, atol=1e-4)
    assert float(alone[0] @ alone[1]) < 0.9  # different texts, different vectors


def test_int8_model_is_opt_in_and_derived_once(tmp_path: Path) -> None:
    assert not get_settings().embed_int8
    derived = model_file(int8=True, cache_dir=tmp_path)
    assert derived.parent == tmp_path and derived.name.startswith("minilm-int8-")
    stamp = derived.stat().st_mtime_ns
    assert model_file(int8=True, cache_dir=tmp_path) == derived
    assert derived.stat().st_mtime_ns == stamp  # reused, not derived again
    assert [p.name for p in tmp_path.iterdir()] == [derived.name]  # no temp files left
    wheel = model_file(int8=False, cache_dir=tmp_path)
    assert wheel != derived and wheel.stat().st_size > 0


@pytest.mark.parametrize("threads", [1])
def test_int8_vectors_stay_close_to_the_wheel_model(tmp_path: Path, threads: int) -> None:
    wheel = MiniLMEmbedder(threads, int8=False, model=model_file(int8=False, cache_dir=tmp_path))
    int8 = MiniLMEmbedder(threads, int8=True, model=model_file(int8=True, cache_dir=tmp_path))
    a, b = wheel.embed(TEXTS), int8.embed(TEXTS)
    agreement = (a * b).sum(axis=1)
    assert agreement.min() > 0.97
    assert not np.allclose(a, b, atol=1e-4)  # really a different model
    # Both keep the same notion of similar: the closest pair is the same pair.
    assert np.argmax(np.triu(a @ a.T, 1)) == np.argmax(np.triu(b @ b.T, 1))




@pytest.mark.parametrize("dim", [1, 3, DIM])
def test_pgvector_text_holds_each_value_to_seven_significant_digits(dim: int) -> None:
    rng = np.random.default_rng(dim)
    for scale in (1e-9, 1e-3, 1.0, 1e5):
        vector = (rng.standard_normal(dim) * scale).astype(np.float32)
        text = to_pgvector(vector)
        assert text.startswith("[") and text.endswith("]") and " " not in text
        parsed = np.array([float(x) for x in text[1:-1].split(",")])
        assert parsed.shape == (dim,)
        assert np.allclose(parsed, vector, rtol=5e-7, atol=0)
        assert all(len(x.lstrip("-").replace(".", "").split("e")[0].lstrip("0")) <= 7
                   for x in text[1:-1].split(","))
