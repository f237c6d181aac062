"""Local differential privacy for entity answers (imports nothing of fedcd but itself)."""

from privacy.accountants import (
    Accountant,
    BasicCompositionAccountant,
    RDPAccountant,
    ZCDPAccountant,
    accountant_names,
    make_accountant,
    register_accountant,
)
from privacy.bounded import DuchiMechanism, HybridMechanism, PiecewiseMechanism
from privacy.central import CohortConceptStats, cohort_statistics
from privacy.gaussian import AnalyticGaussianMechanism, analytic_gaussian_sigma
from privacy.mechanisms import (
    LaplaceMechanism,
    Mechanism,
    NoNoise,
    SensitivityMode,
    laplace_for_request,
    make_rng,
    sensitivity_for,
)
from privacy.ledger import BudgetExceeded, Charge, ChargeStateError, LedgerError, PrivacyLedger, UnknownCharge
from privacy.ranges import (
    COORDINATE_EPSILON_MIN,
    DELTA_MAX,
    DELTA_MIN,
    DIMENSION_MAX,
    EPSILON_MAX,
    EPSILON_MIN,
    MAX_RELEASE_EPSILON,
    check_delta,
    check_dimension,
    check_epsilon,
)
from privacy.registry import DEFAULT_DELTA, MECHANISM_NAMES, MechanismName, charge_parameters, mechanism_for_request
from privacy.sampling import SecureLaplaceMechanism

__all__ = [
    "COORDINATE_EPSILON_MIN",
    "DEFAULT_DELTA",
    "DELTA_MAX",
    "DELTA_MIN",
    "DIMENSION_MAX",
    "EPSILON_MAX",
    "EPSILON_MIN",
    "MAX_RELEASE_EPSILON",
    "MECHANISM_NAMES",
    "Accountant",
    "AnalyticGaussianMechanism",
    "BasicCompositionAccountant",
    "BudgetExceeded",
    "Charge",
    "ChargeStateError",
    "CohortConceptStats",
    "LedgerError",
    "PrivacyLedger",
    "RDPAccountant",
    "UnknownCharge",
    "ZCDPAccountant",
    "accountant_names",
    "charge_parameters",
    "cohort_statistics",
    "make_accountant",
    "register_accountant",
    "DuchiMechanism",
    "HybridMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "MechanismName",
    "NoNoise",
    "PiecewiseMechanism",
    "SecureLaplaceMechanism",
    "SensitivityMode",
    "analytic_gaussian_sigma",
    "check_delta",
    "check_dimension",
    "check_epsilon",
    "laplace_for_request",
    "make_rng",
    "mechanism_for_request",
    "sensitivity_for",
]
