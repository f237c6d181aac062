"""Evaluation: protocols (paper, held-out, simulated), baselines and reports.

The seeded splits and the proportion-correct truth rule live in ``qmatrix`` (the gateway uses them without
importing this package); they are re-exported here, where the evaluation's users have always found them.
"""

from qmatrix import StudentSplit, holdout_responses, proportion_correct_truth, split_students

__all__ = ["StudentSplit", "holdout_responses", "proportion_correct_truth", "split_students"]
