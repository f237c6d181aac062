"""The diagnosis models local-fed can serve, and the one place a model's kind is read.

* ``higher-order-irt`` (local-fed v2, :class:`~federated.hocdm.HigherOrderCDM`): per-item
  parameters, a higher-order concept prior and a Bayesian fold-in. The default. :func:`new_model` builds it on the
  pinned ability scale (docs/mastery.md); a configuration without ``scale`` (published before) rebuilds the free one.
* ``irt-2pl`` (:class:`~federated.irt2pl.IRT2PL`): the same item parameters, one latent ability per
  student (a federated 2PL); every concept's mastery is σ(ability), so the served forecasts read its item-response function.
* ``evidence-encoder`` (local-fed v1, :class:`~federated.model.CDModel`): items as features
  only. Models published before v2 carry no ``kind`` and load as v1.

All take the same inputs (rows from ``model.item_table``), answer ``mastery``/``forward`` the
same way and train under the same loop (:mod:`federated.local`). ``fedcd train`` fits every kind of
``CANDIDATE_KINDS`` (``model_kind="auto"``) and publishes the one with the best held-out AUC on the
coordinator's held-out students (:mod:`federated.train`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

from federated.hocdm import MODEL_KIND as HIGHER_ORDER
from federated.hocdm import HigherOrderCDM
from federated.irt2pl import MODEL_KIND as IRT_2PL
from federated.irt2pl import IRT2PL
from federated.itembank import POPULATION
from federated.model import MODEL_KIND as EVIDENCE_ENCODER
from federated.model import CDModel, Interaction
from qmatrix import QMatrix

__all__ = ["AUTO", "CANDIDATE_KINDS", "DEFAULT_KIND", "DiagnosisModel", "MODEL_KINDS", "ModelKind", "TRAINABLE_KINDS",
           "build_model", "candidate_kinds", "new_model"]

DiagnosisModel = CDModel | HigherOrderCDM | IRT2PL
ModelKind = Literal["higher-order-irt", "irt-2pl", "evidence-encoder"]
MODEL_KINDS: tuple[str, ...] = (HIGHER_ORDER, IRT_2PL, EVIDENCE_ENCODER)
# The kind one model is built as where no choice is made (the Flower engines, the untrained evidence model).
DEFAULT_KIND: ModelKind = "higher-order-irt"
# What ``model_kind="auto"`` fits; the coordinator's held-out AUC picks the one published.
AUTO = "auto"
CANDIDATE_KINDS: tuple[str, ...] = (HIGHER_ORDER, IRT_2PL)
TRAINABLE_KINDS: tuple[str, ...] = (AUTO, *MODEL_KINDS)


def candidate_kinds(kind: str) -> tuple[str, ...]:
    """The kinds a training run with ``model_kind=kind`` fits: every candidate for ``auto``, else ``kind`` alone."""
    if kind == AUTO:
        return CANDIDATE_KINDS
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(TRAINABLE_KINDS)}")
    return (kind,)


def build_model(config: Mapping[str, Any]) -> DiagnosisModel:
    """The model a saved ``config`` describes (``model.config()``); no ``kind`` means v1."""
    kind = config.get("kind", EVIDENCE_ENCODER)
    arguments = {k: v for k, v in config.items() if k != "kind"}
    if kind == HIGHER_ORDER:
        return HigherOrderCDM(**arguments)
    if kind == IRT_2PL:
        return IRT2PL(**arguments)
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
                              max_item_concepts=widest, scale=POPULATION)
    if kind == IRT_2PL:
        return IRT2PL(qmatrix.concepts, items=qmatrix.item_ids, text_dim=text_dim, generator=generator)
    if kind == EVIDENCE_ENCODER:
        return CDModel(qmatrix.concepts, text_dim=text_dim, hidden=hidden, interaction=interaction,
                       generator=generator)
    raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(MODEL_KINDS)}")
