"""Evaluation: seeded splits, protocols (paper, held-out, simulated), baselines and reports."""

from evaluation.splits import StudentSplit, holdout_responses, proportion_correct_truth, split_students

__all__ = ["StudentSplit", "holdout_responses", "proportion_correct_truth", "split_students"]
