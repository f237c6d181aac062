"""Item features: what the model knows about an item instead of its id.

The model never embeds item ids. An item is its Q-matrix row (a multi-hot vector over the
model's concepts) plus, when the item has text, a small signed hashed bag of tokens. So an
item that no training student ever answered, or one added to the bank after training, is
still a valid input: it only needs a Q-row over known concepts.

Hashing uses BLAKE2b, not Python's ``hash`` (which is salted per process), so features are
identical across clients, servers and runs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from qmatrix import QMatrix, QMatrixError

__all__ = ["hash_text", "item_features"]

_TOKEN = re.compile(r"\w+|[^\w\s]")


def _bucket(token: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # Low bit decides the sign so colliding tokens tend to cancel rather than pile up.
    return (value >> 1) % dim, 1.0 if value & 1 else -1.0


def hash_text(text: str | None, *, dim: int) -> np.ndarray:
    """Signed hashed unigrams + bigrams of ``text``, L2-normalised; zeros when there is no text.

    Normalising keeps long and short questions on one scale, so the text block can only
    nudge, not dominate, the Q-row block.
    """
    out = np.zeros(dim, dtype=np.float32)
    if dim <= 0 or not text:
        return out
    tokens = _TOKEN.findall(text.lower())
    grams = tokens + [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)]
    for gram in grams:
        index, sign = _bucket(gram, dim)
        out[index] += sign
    norm = float(np.linalg.norm(out))
    return out / norm if norm > 0 else out


def item_features(qmatrix: QMatrix, concepts: Sequence[str], *, text_dim: int) -> np.ndarray:
    """Feature table, shape (n_items, len(concepts) + text_dim), in ``qmatrix.items`` order.

    ``concepts`` is the model's concept order; the Q-matrix may list them in another order
    or use only some of them, but may not use a concept the model does not know (the model
    has no parameters for it), which raises :class:`QMatrixError` naming the concepts.
    """
    column = {c: k for k, c in enumerate(concepts)}
    unknown = [c for c in qmatrix.concepts if c not in column]
    if unknown:
        raise QMatrixError([f"Q-matrix '{qmatrix.id}' uses concepts the model does not know: {', '.join(unknown)}"])
    table = np.zeros((len(qmatrix.items), len(concepts) + text_dim), dtype=np.float32)
    for r, item in enumerate(qmatrix.items):
        for concept in item.concepts:
            table[r, column[concept]] = 1.0
        if text_dim:
            table[r, len(concepts):] = hash_text(item.text, dim=text_dim)
    return table
