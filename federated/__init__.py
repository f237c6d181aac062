"""Federated training of an inductive cognitive-diagnosis model, with optional differential privacy.

Layers, each usable alone: :mod:`~federated.features` (items as Q-row + hashed text),
:mod:`~federated.model` (monotone encoder, Q-respecting decoder), :mod:`~federated.data`
(tensors, splits, client partitions), :mod:`~federated.local` (plain or student-level
DP-SGD local training), :mod:`~federated.dp` and :mod:`~federated.accountant` (client-level
clipping/noise/sampling and epsilon), :mod:`~federated.modes` (the DP modes as types),
:mod:`~federated.inprocess` (a FedAvg driver), and
:mod:`~federated.predict` (diagnosis in the project's own types). Nothing here imports
Flower; a Flower app wraps these pieces.
"""

from federated.accountant import MECHANISM, PrivacyAccountant, epsilon_for, noise_multiplier_for
from federated.data import (
    ResponseTensors,
    Split,
    dirichlet_partition,
    encode_dataset,
    encode_students,
    hidden_mask,
    iid_partition,
    split_student_indices,
)
from federated.dp import add_gaussian_noise, clip_update, flatten, l2_norm, poisson_sample, unflatten, update_nbytes
from federated.features import hash_text, item_features
from federated.gate import GateDecision, GatePolicy, canary_shift, canary_students, heldout_auc, promotion_gate
from federated.inprocess import FedConfig, FedResult, RoundRecord, run_fedavg
from federated.modes import DP_MODES, ClientLevelDP, DPMode, NoDP, StudentLevelDP, dp_mode
from federated.registry import (
    FORMAT,
    LoadedModel,
    ModelNotFound,
    ModelRegistry,
    RegistryError,
    SignatureInvalid,
    model_key,
)
from federated.publish import PublishOptions
from federated.train import (
    AGGREGATIONS,
    DEFAULT_MODEL,
    Aggregation,
    TrainingConfig,
    TrainResult,
    coordinate_median,
    default_model_if_missing,
    torch_threads,
    train_federated,
    trimmed_mean,
)
from federated.local import (
    LocalConfig,
    LocalResult,
    StudentDP,
    add_update,
    clipped_grad_sum,
    get_parameters,
    set_parameters,
    train_local,
)
from federated.metrics import Evaluation, evaluate_masked, roc_auc
from federated.model import CDModel, Interaction, default_device, masked_bce
from federated.predict import (
    Diagnosis,
    diagnose,
    diagnose_batch,
    predict_mastery,
    predict_mastery_batch,
    predict_response_proba,
    predict_response_proba_batch,
)

__all__ = [
    "model_key",
    "AGGREGATIONS",
    "DEFAULT_MODEL",
    "DP_MODES",
    "FORMAT",
    "MECHANISM",
    "Aggregation",
    "CDModel",
    "ClientLevelDP",
    "DPMode",
    "Diagnosis",
    "Evaluation",
    "FedConfig",
    "FedResult",
    "GateDecision",
    "GatePolicy",
    "Interaction",
    "LoadedModel",
    "LocalConfig",
    "LocalResult",
    "ModelNotFound",
    "ModelRegistry",
    "NoDP",
    "PrivacyAccountant",
    "RegistryError",
    "ResponseTensors",
    "RoundRecord",
    "SignatureInvalid",
    "Split",
    "StudentDP",
    "StudentLevelDP",
    "TrainResult",
    "TrainingConfig",
    "PublishOptions",
    "add_gaussian_noise",
    "add_update",
    "canary_shift",
    "canary_students",
    "clip_update",
    "clipped_grad_sum",
    "coordinate_median",
    "default_device",
    "default_model_if_missing",
    "diagnose",
    "diagnose_batch",
    "dirichlet_partition",
    "dp_mode",
    "encode_dataset",
    "encode_students",
    "epsilon_for",
    "evaluate_masked",
    "flatten",
    "get_parameters",
    "hash_text",
    "heldout_auc",
    "hidden_mask",
    "iid_partition",
    "item_features",
    "l2_norm",
    "masked_bce",
    "noise_multiplier_for",
    "poisson_sample",
    "predict_mastery",
    "predict_mastery_batch",
    "predict_response_proba",
    "predict_response_proba_batch",
    "promotion_gate",
    "roc_auc",
    "run_fedavg",
    "set_parameters",
    "split_student_indices",
    "torch_threads",
    "train_federated",
    "train_local",
    "trimmed_mean",
    "unflatten",
    "update_nbytes",
]
