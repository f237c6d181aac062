"""NCDM, the neural cognitive diagnosis model (Wang et al., AAAI 2020, "NeuralCD"), in PyTorch.

Architecture (the reference is EduCDM's ``NCDM``; this is our own implementation of the paper):

* student factor  h_s = sigmoid(θ_s) ∈ (0, 1)^K — the mastery of each of the K concepts;
* exercise factors: knowledge difficulty h_diff = sigmoid(B_e) ∈ (0, 1)^K and discrimination
  h_disc = sigmoid(d_e) ∈ (0, 1);
* interaction x = Q_e ⊙ (h_s − h_diff) · h_disc (Q_e: the item's Q-matrix row, a mask);
* three fully connected layers with **non-negative weights** (|w| in the forward pass), sigmoid
  activations and dropout, K → 512 → 256 → 1, giving P(correct). Positive weights make P(correct)
  monotone in every mastery h_s — the monotonicity assumption that makes h_s interpretable.

Training minimises the binary cross-entropy of the TRAIN split's responses (partial credit counts
as a Bernoulli weight, as in ``common``) with Adam, stopping early: a seeded 10 % of the training
responses is held out, and the epoch with the lowest loss on them is kept (patience 5 epochs,
counted once 4,000 optimizer steps have run: from its initialisation the network first idles on a
plateau at chance for up to ~1,000 steps, and stopping there would keep an untrained model).

**New students** (validation and test) are folded in: the item factors and the network are frozen
and only θ of each new student is fitted to their observed responses (Adam, with a Gaussian prior
on θ centred on the training students' mean and with their spread, so a student with few
responses stays near the average instead of running to 0 or 1). Everything is seeded; torch
threads are capped while it runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Self

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from evaluation.baselines.common import CDMBaseline, NotFittedError, check_q, check_responses, select_items

__all__ = ["NCDM", "NCDMSettings"]


@dataclass(frozen=True)
class NCDMSettings:
    """Training settings (reported with the results)."""

    hidden: tuple[int, int] = (512, 256)
    dropout: float = 0.5
    max_epochs: int = 60
    patience: int = 5  # epochs without a better early-stopping loss before training stops ...
    min_steps: int = 4000  # ... counted only after this many optimizer steps (training first idles on a plateau)
    early_stopping_fraction: float = 0.1  # of the training responses, held out to choose the epoch
    batch_size: int = 64
    lr: float = 2e-3
    fold_in_steps: int = 200
    fold_in_lr: float = 0.1
    seed: int = 0
    threads: int = 2


class _PositiveLinear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.abs(), self.bias)


class _Network(nn.Module):
    def __init__(self, n_students: int, q: torch.Tensor, settings: NCDMSettings) -> None:
        super().__init__()
        n_items, k = q.shape
        self.register_buffer("q", q)
        self.theta = nn.Embedding(n_students, k)
        self.difficulty = nn.Embedding(n_items, k)
        self.discrimination = nn.Embedding(n_items, 1)
        h1, h2 = settings.hidden
        self.layers = nn.ModuleList([_PositiveLinear(k, h1), _PositiveLinear(h1, h2), _PositiveLinear(h2, 1)])
        self.dropout = nn.Dropout(settings.dropout)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_normal_(module.weight)
            elif isinstance(module, nn.Embedding):
                # unit-variance factors: sigmoid(θ) − sigmoid(B) starts spread over (−½, ½), not ≈ 0 — with
                # xavier's tiny embeddings the interaction carries no signal and training idles on a plateau
                nn.init.normal_(module.weight)
        with torch.no_grad():
            # Inputs of the 2nd and 3rd layers are sigmoid outputs (≈ ½ at the start); with |w| > 0 their sum
            # would saturate the next sigmoid and stall training for epochs, so the bias starts by centring it.
            for layer in self.layers[1:]:
                layer.bias.copy_(-0.5 * layer.weight.abs().sum(dim=1))

    def head(self, mastery: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """P(correct) from mastery h_s (rows) for the given items (same rows)."""
        x = self.q[items] * (mastery - torch.sigmoid(self.difficulty(items))) * torch.sigmoid(self.discrimination(items))
        for layer in self.layers[:-1]:
            x = self.dropout(torch.sigmoid(layer(x)))
        return torch.sigmoid(self.layers[-1](x)).squeeze(-1)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _cells(responses: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    student, item = np.nonzero(~np.isnan(responses))
    return (torch.from_numpy(student).long(), torch.from_numpy(item).long(),
            torch.from_numpy(responses[student, item]).float())


class NCDM(CDMBaseline):
    """See the module docstring."""

    name = "ncdm"

    def __init__(self, settings: NCDMSettings | None = None) -> None:
        self.settings = settings or NCDMSettings()
        self._net: _Network | None = None
        self._theta_mean: torch.Tensor | None = None
        self._theta_sd: torch.Tensor | None = None
        self.loss_trace_: list[float] = []
        self.stopping_trace_: list[float] = []
        self.epochs_ = 0

    def describe(self) -> dict[str, object]:
        return {"model": "NCDM (Wang et al. 2020)", **asdict(self.settings), "epochs_trained": self.epochs_}

    def fit(self, responses: np.ndarray, q: np.ndarray) -> Self:
        q = check_q(q)
        responses = check_responses(responses, n_items=q.shape[0])
        s = self.settings
        with _threads(s.threads), torch.random.fork_rng():
            torch.manual_seed(s.seed)
            net = _Network(responses.shape[0], torch.from_numpy(q.astype(np.float32)), s)
            student, item, y = _cells(responses)
            if y.numel() == 0:
                raise ValueError("training responses contain no answered item")
            generator = torch.Generator().manual_seed(s.seed)
            stop = torch.rand(y.numel(), generator=generator) < s.early_stopping_fraction
            fit_idx, stop_idx = torch.nonzero(~stop).squeeze(1), torch.nonzero(stop).squeeze(1)
            optimizer = torch.optim.Adam(net.parameters(), lr=s.lr)
            self.loss_trace_, self.stopping_trace_ = [], []
            best, best_state, waited, steps = float("inf"), None, 0, 0
            for _ in range(s.max_epochs):
                net.train()
                order = fit_idx[torch.randperm(fit_idx.numel(), generator=generator)]
                total = 0.0
                for start in range(0, order.numel(), s.batch_size):
                    batch = order[start:start + s.batch_size]
                    p = net.head(torch.sigmoid(net.theta(student[batch])), item[batch])
                    loss = F.binary_cross_entropy(p.clamp(1e-6, 1 - 1e-6), y[batch])
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    steps += 1
                    total += float(loss.detach()) * batch.numel()
                self.loss_trace_.append(total / max(1, order.numel()))
                net.eval()
                with torch.no_grad():
                    p = net.head(torch.sigmoid(net.theta(student[stop_idx])), item[stop_idx]).clamp(1e-6, 1 - 1e-6)
                    held = float(F.binary_cross_entropy(p, y[stop_idx])) if stop_idx.numel() else self.loss_trace_[-1]
                self.stopping_trace_.append(held)
                if held < best - 1e-4:
                    best, waited = held, 0
                    best_state = {k: v.clone() for k, v in net.state_dict().items()}
                elif steps >= s.min_steps:
                    waited += 1
                    if waited >= s.patience:
                        break
            if best_state is not None:
                net.load_state_dict(best_state)
            self.epochs_ = int(np.argmin(self.stopping_trace_)) + 1
            net.eval()
            net.requires_grad_(False)  # frozen from here: new students only fit their own θ
            theta = net.theta.weight.detach()
            answered = torch.from_numpy((~np.isnan(responses)).any(axis=1))
            trained = theta[answered] if bool(answered.any()) else theta
            self._theta_mean, self._theta_sd = trained.mean(0), trained.std(0).clamp_min(0.1)
        self._q, self._net = q, net
        return self

    def _fold_in(self, responses: np.ndarray) -> torch.Tensor:
        """θ of new students fitted to their observed responses with everything else frozen (MAP, see module docstring)."""
        if self._net is None or self._theta_mean is None or self._theta_sd is None:
            raise NotFittedError("NCDM is not fitted; call fit(responses, q) first")
        responses = self._new_responses(responses)
        s = self.settings
        student, item, y = _cells(responses)
        with _threads(s.threads), torch.random.fork_rng():
            torch.manual_seed(s.seed)
            theta = self._theta_mean.repeat(responses.shape[0], 1).clone().requires_grad_(True)
            optimizer = torch.optim.Adam([theta], lr=s.fold_in_lr)
            for _ in range(s.fold_in_steps if y.numel() else 0):
                p = self._net.head(torch.sigmoid(theta[student]), item).clamp(1e-6, 1 - 1e-6)
                nll = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).sum()
                prior = 0.5 * (((theta - self._theta_mean) / self._theta_sd) ** 2).sum()
                optimizer.zero_grad()
                (nll + prior).backward()
                optimizer.step()
        return theta.detach()

    def mastery(self, responses: np.ndarray) -> np.ndarray:
        return torch.sigmoid(self._fold_in(responses)).numpy().astype(float)

    def predict_proba(self, responses: np.ndarray, items: np.ndarray | None = None) -> np.ndarray:
        idx = select_items(items, self.q_.shape[0])
        n = responses.shape[0]
        students = np.repeat(np.arange(n), idx.size)
        return self.predict_pairs(responses, students, np.tile(idx, n)).reshape(n, idx.size)

    def predict_pairs(self, responses: np.ndarray, students: np.ndarray, items: np.ndarray) -> np.ndarray:
        """P(correct) for each (student row, item) pair only: the network runs once per pair."""
        mastery = torch.sigmoid(self._fold_in(responses)).numpy()
        return self.response_probability(mastery[np.asarray(students, dtype=int)], items)

    def response_probability(self, mastery: np.ndarray, items: np.ndarray) -> np.ndarray:
        """P(correct) of item ``items[i]`` for a student with mastery ``mastery[i]`` (rows × K, in [0, 1])."""
        if self._net is None:
            raise NotFittedError("NCDM is not fitted; call fit(responses, q) first")
        with _threads(self.settings.threads), torch.no_grad():
            rows = torch.as_tensor(np.asarray(mastery), dtype=torch.float32)
            cols = torch.from_numpy(np.asarray(items, dtype=np.int64))
            return self._net.head(rows, cols).numpy().astype(float)
