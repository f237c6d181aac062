"""The round loop, once for every engine (the in-process driver, ``fedcd train`` and the Flower ServerApp).

Each round: (1) ask the accountant whether the round would exceed the ε budget and stop *before* running
it if so; (2) the engine plays the round (sample, train, aggregate, apply, evaluate) and returns its
record; (3) charge the accountant for the round that ran; (4) stamp the record with its number and the ε
spent so far; (5) report it. What differs between engines is only step (2).

Under DP, step (4) also blanks the record's ``train_loss`` (NaN): the mean loss of the training students is a
statistic of their data that no noise covers and the accountant does not charge, so no history, progress
callback, CLI table or manifest built from the records may carry it. Without DP it is kept.

Several runs on the same students (``fedcd train`` fitting candidate model kinds) share one ``accountant``:
each later run is charged on top of the earlier ones, its budget check and ε column are the total, and what
is published (one model chosen by comparing them) is covered by that total.

:class:`BestRound` keeps the weights of the round with the best held-out AUC, which trainers publish
instead of the last round's (training can overfit rare items after the first rounds; the held-out
students are the coordinator's, never trained on, so choosing by them costs no privacy).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import torch

from federated.accountant import PrivacyAccountant

if TYPE_CHECKING:
    from federated.modes import DPMode

__all__ = ["BestRound", "RoundPlan", "run_rounds"]

R = TypeVar("R")  # a frozen dataclass record with ``round``, ``epsilon`` and ``train_loss`` (RoundRecord and kin)


class RoundPlan(Protocol):
    """What the loop reads of a run's configuration (``federated.inprocess.FedConfig``)."""

    rounds: int
    dp: DPMode
    epsilon_budget: float | None
    delta: float

    def round_mechanism(self) -> tuple[float, float, int] | None: ...


def run_rounds(config: RoundPlan, play_round: Callable[[int], R], *, on_round: Callable[[R], None] | None = None,
               accountant: PrivacyAccountant | None = None
               ) -> tuple[list[R], str | None, PrivacyAccountant | None]:
    """Play ``config.rounds`` rounds; returns (history, the reason it stopped early or None, the accountant).
    ``accountant``: continue one that earlier runs on the same students were charged to (module docstring)."""
    if not config.dp.private:
        accountant = None
    elif accountant is None:
        accountant = PrivacyAccountant()
    mechanism = config.round_mechanism()
    history: list[R] = []
    for r in range(1, config.rounds + 1):
        if accountant is not None and mechanism is not None and config.epsilon_budget is not None:
            sigma, q, steps = mechanism
            if accountant.would_exceed(noise_multiplier=sigma, sample_rate=q, steps=steps,
                                       epsilon_budget=config.epsilon_budget, delta=config.delta):
                return history, (f"round {r} would exceed the epsilon budget {config.epsilon_budget} "
                                 f"(delta={config.delta})"), accountant
        record = play_round(r)
        if accountant is not None and mechanism is not None:
            accountant.step(noise_multiplier=mechanism[0], sample_rate=mechanism[1], steps=mechanism[2])
        stamp: dict[str, Any] = {"round": r, "epsilon": accountant.get_epsilon(config.delta) if accountant else None}
        if not config.dp.reveals_train_loss:  # outside the privacy accounting: never released (module docstring)
            stamp["train_loss"] = float("nan")
        record = dataclasses.replace(record, **stamp)  # type: ignore[type-var]
        history.append(record)
        if on_round is not None:
            on_round(record)
    return history, None, accountant


class BestRound:
    """Called with each round's record: keeps a copy of ``model``'s state after the round with the highest held-out
    AUC (the earliest of equals; a NaN AUC never counts). :meth:`restore` puts it back."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.round: int | None = None
        self.auc = float("-inf")
        self._state: dict[str, Any] | None = None

    def __call__(self, record: Any) -> None:
        auc = float(record.auc)
        if auc == auc and auc > self.auc:
            self.round, self.auc = int(record.round), auc
            self._state = copy.deepcopy(self.model.state_dict())

    def restore(self) -> int | None:
        """Load the best round's state into the model; returns that round (None: no round had a finite AUC,
        the model is left as it is)."""
        if self._state is not None:
            self.model.load_state_dict(self._state)
        return self.round
