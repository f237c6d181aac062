"""The diagnosis models local-fed can serve, and the one place a model's kind is read.

* ``higher-order-irt`` (local-fed v2, :class:`~federated.hocdm.HigherOrderCDM`): per-item
  parameters, a higher-order concept prior and a Bayesian fold-in. The default.
* ``evidence-encoder`` (local-fed v1, :class:`~federated.model.CDModel`): items as features
  only. Models published before v2 carry no ``kind`` and load as v1.

Both take the same inputs (rows from ``model.item_table``), answer ``mastery``/``forward`` the
same way and train under the same loop (:mod:`federated.local`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

from federated.hocdm import MODEL_KIND as HIGHER_ORDER
from federated.hocdm import HigherOrderCDM
from federated.model import MODEL_KIND as EVIDENCE_ENCODER
from federated.model import CDModel, Interaction
from qmatrix import QMatrix

__all__ = ["DEFAULT_KIND", "DiagnosisModel", "MODEL_KINDS", "ModelKind", "build_model", "new_model"]

DiagnosisModel = CDModel | HigherOrderCDM
ModelKind = Literal["higher-order-irt", "evidence-encoder"]
MODEL_KINDS: tuple[str, ...] = (HIGHER_ORDER, EVIDENCE_ENCODER)
DEFAULT_KIND: ModelKind = "higher-order-irt"


def build_model(config: Mapping[str, Any]) -> DiagnosisModel:
    """The model a saved ``config`` describes (``model.config()``); no ``kind`` means v1."""
    kind = config.get("kind", EVIDENCE_ENCODER)
    arguments = {k: v for k, v in config.items() if k != "kind"}
    if kind == HIGHER_ORDER:
        return HigherOrderCDM(**arguments)
    if kind == EVIDENCE_ENCODER:
        return CDModel(**arguments)
    raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(MODEL_KINDS)}")


def new_model(kind: str, qmatrix: QMatrix, *, seed: int, text_dim: int = 0, hidden: int = 32,
              interaction: Interaction = "dina") -> DiagnosisModel:
    """A fresh model of ``kind`` for ``qmatrix``: v2's item vocabulary is the Q-matrix's item bank; ``hidden`` and
    ``interaction`` shape v1's networks (v2 has neither)."""
    generator = torch.Generator().manual_seed(seed)
    if kind == HIGHER_ORDER:
        widest = max(len(item.concepts) for item in qmatrix.items)
        return HigherOrderCDM(qmatrix.concepts, items=qmatrix.item_ids, text_dim=text_dim, generator=generator,
                              max_item_concepts=widest)
    if kind == EVIDENCE_ENCODER:
        return CDModel(qmatrix.concepts, text_dim=text_dim, hidden=hidden, interaction=interaction,
                       generator=generator)
    raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(MODEL_KINDS)}")
