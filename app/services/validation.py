"""The validation students a ``/v1/calibrate`` job fits on: the request's own records, a named dataset's validation
part, or SIMULATED DINA students on the request's Q-matrix — each with the truth the fit aims at and what the
calibration record must say about where they came from."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.domain_errors import InvalidInput, NotFound
from app.schemas import CalibrateRequest
from app.settings import Settings
from app.storage import QMatrixStore, StoredQMatrix
from calibration import ValidationStudent
from qmatrix import EXAMPLE_QMATRIX_ID, load_dataset, proportion_correct_truth, split_students
from qmatrix.simulate import DINA_GUESS, DINA_MASTERY_RATE, DINA_SLIP

__all__ = ["SIMULATED_TRUTH", "ValidationCohort", "ValidationLoader"]

SIMULATED_TRUTH = "simulated-true-mastery"  # the truth of SIMULATED validation students (the first-start calibration's)


@dataclass
class ValidationCohort:
    """A job's validation students (their truth resolved) and what the record must say about them."""

    stored: StoredQMatrix
    students: list[ValidationStudent]
    truth_source: str  # provided | proportion-correct | mixed | simulated-true-mastery
    simulated: bool = False
    # per student: its truth was derived from its responses (the paper's rule), not provided or simulated; the job
    # puts such truths on the serving model's scale (calibration.ability_truth)
    derived: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


class ValidationLoader:
    """Reads a calibration request's validation students; a resumed job reads the same students again (datasets
    and simulations are seeded)."""

    def __init__(self, *, qmatrices: QMatrixStore, settings: Settings) -> None:
        self.qmatrices, self.settings = qmatrices, settings

    def load(self, request: CalibrateRequest, tenant: str) -> ValidationCohort:
        if request.records is not None:
            stored = self.qmatrices.get(tenant, request.qmatrix_id or "")
            if stored is None:
                raise NotFound(("qmatrix_id",), [f"unknown Q-matrix id '{request.qmatrix_id}'"])
            q = stored.qmatrix
            # A record without truth is scored by the paper's rule (proportion correct per concept).
            students = [
                ValidationStudent(r.student_id, r.responses, r.truth or proportion_correct_truth(q, r.responses))
                for r in request.records
            ]
            source = "provided" if all(r.truth is not None for r in request.records) else (
                "proportion-correct" if all(r.truth is None for r in request.records) else "mixed"
            )
            return ValidationCohort(stored, students, source, derived=[r.truth is None for r in request.records])
        assert request.dataset is not None
        ref = request.dataset
        if ref.name == "synthetic":
            return self._simulated(request, tenant)
        dataset = load_dataset(ref.name, data_dir=self.settings.data_dir, max_students=ref.max_students, seed=ref.seed)
        if request.qmatrix_id is not None and request.qmatrix_id != dataset.qmatrix.id:
            raise InvalidInput(("dataset",), [f"dataset '{ref.name}' uses Q-matrix '{dataset.qmatrix.id}', not "
                                              f"'{request.qmatrix_id}'"])
        if self.qmatrices.is_builtin(dataset.qmatrix.id):
            stored = self.qmatrices.get(tenant, dataset.qmatrix.id)
            assert stored is not None
        else:
            stored = self.qmatrices.ensure(tenant, dataset.qmatrix)  # so the tenant's diagnoses can name it
        q = stored.qmatrix
        part = split_students(dataset.students, seed=ref.seed).part(ref.part)
        students = [
            ValidationStudent(
                s.student_id, s.responses,
                dataset.true_mastery.get(s.student_id) or proportion_correct_truth(q, s.responses),
            )
            for s in part
        ]
        return ValidationCohort(stored, students, SIMULATED_TRUTH if dataset.simulated else "proportion-correct",
                                simulated=dataset.simulated,
                                derived=[not dataset.true_mastery.get(s.student_id) for s in part])

    def _simulated(self, request: CalibrateRequest, tenant: str) -> ValidationCohort:
        """SIMULATED DINA students on the request's own Q-matrix (the example when it names none), seeded by the
        dataset's seed; their simulated mastery is the truth."""
        assert request.dataset is not None
        ref = request.dataset
        stored = self.qmatrices.get(tenant, request.qmatrix_id or EXAMPLE_QMATRIX_ID)
        if stored is None:
            raise NotFound(("qmatrix_id",), [f"unknown Q-matrix id '{request.qmatrix_id}'"])
        q = stored.qmatrix
        # A simulated student answers no more items than a diagnosis accepts, drawn at random from a large bank.
        per_student = min(len(q.items), self.settings.max_responses_per_student)
        dataset = load_dataset(
            "synthetic", qmatrix=q, max_students=ref.max_students, seed=ref.seed,
            synthetic_items=per_student if per_student < len(q.items) else None,
        )
        part = split_students(dataset.students, seed=ref.seed).part(ref.part)
        students = [ValidationStudent(s.student_id, s.responses, dataset.true_mastery[s.student_id]) for s in part]
        note = (
            f"SIMULATED validation students: {len(students)} DINA students (the {ref.part} part of "
            f"{len(dataset.students)}, seed {ref.seed}; slip {DINA_SLIP:g}, guess {DINA_GUESS:g}, mastery rate "
            f"{DINA_MASTERY_RATE:g}; {per_student} of {len(q.items)} items each) on "
            f"Q-matrix '{q.id}' version {stored.version}, their simulated mastery the truth: this calibration describes "
            "how the entities read simulated students, not real ones; refit on real validation students when you have them"
        )
        return ValidationCohort(stored, students, SIMULATED_TRUTH, simulated=True, notes=[note],
                                metrics={"simulated_students": float(len(students))})
