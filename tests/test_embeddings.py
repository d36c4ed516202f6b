"""The local MiniLM embedder: one text (its own one-thread session) and batches agree."""

from __future__ import annotations

import numpy as np

from memoryd.memory.embeddings import DIM, MiniLMEmbedder, get_embedder


def test_single_text_and_batch_give_the_same_unit_vectors() -> None:
    embedder = get_embedder()
    assert isinstance(embedder, MiniLMEmbedder)
    texts = ["The user is allergic to peanuts.", "Meeting moved to Tuesday.",
             "A much longer sentence about the quarterly budget review and the new hires."]
    batch = embedder.embed(texts)
    alone = np.stack([embedder.embed([t])[0] for t in texts])
    assert batch.shape == alone.shape == (3, DIM)
    assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    assert np.allclose(batch, alone, atol=1e-4)
    assert float(alone[0] @ alone[1]) < 0.9  # different texts, different vectors
