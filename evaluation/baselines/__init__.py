"""Cognitive-diagnosis baselines (2PL IRT with an empirical item prior, DINA, NCDM, proportion-correct) fitted on training students.

Each implements :class:`CDMBaseline`: ``fit(responses, q)`` on a TRAIN split, then
``mastery`` and ``predict_proba`` for NEW students from their responses alone, so LLM
diagnoses can be compared with the psychometric models they claim to beat.
"""

from evaluation.baselines.common import CDMBaseline, NotFittedError, response_matrix
from evaluation.baselines.dina import DINA, DINASettings, ProfileClasses, dina_log_likelihood, dina_posterior, profile_classes
from evaluation.baselines.irt import IRT2PL, ItemPrior, eap, irt_2pl_prob, normal_quadrature
from evaluation.baselines.ncdm import NCDM, NCDMSettings
from evaluation.baselines.proportion import ProportionCorrect, proportion_correct

__all__ = [
    "DINA",
    "DINASettings",
    "IRT2PL",
    "ItemPrior",
    "NCDM",
    "NCDMSettings",
    "CDMBaseline",
    "NotFittedError",
    "ProfileClasses",
    "ProportionCorrect",
    "dina_log_likelihood",
    "dina_posterior",
    "eap",
    "irt_2pl_prob",
    "normal_quadrature",
    "profile_classes",
    "proportion_correct",
    "response_matrix",
]
