"""Q-matrices, student responses, real datasets and simulators (the bottom layer: imports nothing of fedcd)."""

from qmatrix.catalog import DATASET_NAMES, load_dataset
from qmatrix.datasets import Dataset, DatasetNotFound, default_data_dir, load_assist0910, load_frcsub
from qmatrix.example import EXAMPLE_QMATRIX_ID, example_qmatrix
from qmatrix.identifiers import Identifier, check_identifier, identifier_problem
from qmatrix.io import (
    load_qmatrix,
    qmatrix_fingerprint,
    qmatrix_from_csv_text,
    qmatrix_from_json,
    qmatrix_to_csv_text,
    qmatrix_to_json,
    save_qmatrix,
)
from qmatrix.model import Item, QMatrix, QMatrixError
from qmatrix.responses import (
    Response,
    StudentResponses,
    group_by_student,
    load_responses_csv,
    load_responses_wide_csv,
    read_responses_csv,
    score_of,
    write_responses_csv,
)
from qmatrix.simulate import simulate_dina
from qmatrix.splits import StudentSplit, holdout_responses, split_holdout, split_students
from qmatrix.truth import proportion_correct_truth
from qmatrix.uci import UCI_CONCEPTS, load_uci

__all__ = [
    "DATASET_NAMES",
    "EXAMPLE_QMATRIX_ID",
    "Dataset",
    "Identifier",
    "DatasetNotFound",
    "Item",
    "QMatrix",
    "QMatrixError",
    "Response",
    "StudentResponses",
    "check_identifier",
    "default_data_dir",
    "example_qmatrix",
    "group_by_student",
    "identifier_problem",
    "load_assist0910",
    "load_frcsub",
    "load_qmatrix",
    "load_responses_csv",
    "load_responses_wide_csv",
    "read_responses_csv",
    "qmatrix_fingerprint",
    "qmatrix_from_csv_text",
    "qmatrix_from_json",
    "qmatrix_to_csv_text",
    "qmatrix_to_json",
    "save_qmatrix",
    "score_of",
    "write_responses_csv",
    "simulate_dina",
    "load_uci",
    "UCI_CONCEPTS",
    "load_dataset",
    "StudentSplit",
    "holdout_responses",
    "proportion_correct_truth",
    "split_holdout",
    "split_students",
]
