"""The frontier's entry points for the CLI: its datasets, its command line, a progress total, and one call that runs it all."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evaluation.frontier.compute import FrontierSettings, privacy_frontier
from evaluation.frontier.report import write_frontier_report
from evaluation.frontier.results import DEFAULT_REPEATS, FrontierResult, Progress
from evaluation.simulation import SimulatedStudents, dataset_and_simulation, simulate
from qmatrix.splits import split_students
from providers import Entity
from qmatrix import Dataset


def frontier_datasets(
    names: Sequence[str] = ("frcsub", "assist0910", "simulated"),
    *,
    data_dir: str | Path | None = None,
    max_students: int | None = 300,
    max_items: int | None = 30,
    n_simulated: int = 536,
    seed: int = 0,
) -> list[Dataset | SimulatedStudents]:
    """The frontier's datasets by name. ``max_students`` / ``max_items`` apply to ASSIST0910 only
    (FrcSub is small); ``simulated`` is SIMULATED DINA students on the FrcSub Q-matrix (with oracle);
    any other name goes through :func:`qmatrix.catalog.load_dataset` unrestricted."""
    from qmatrix.catalog import load_dataset

    out: list[Dataset | SimulatedStudents] = []
    for name in names:
        if name == "simulated":
            q = load_dataset("frcsub", data_dir=data_dir).qmatrix
            out.append(simulate(q, generator="dina", n_students=n_simulated, seed=seed))
        elif name == "assist0910":
            out.append(load_dataset(name, data_dir=data_dir, max_students=max_students, max_items=max_items, seed=seed))
        else:
            out.append(load_dataset(name, data_dir=data_dir, seed=seed))
    return out


@dataclass(frozen=True, kw_only=True)
class FrontierDatasets:
    """Which datasets the frontier runs on (:func:`frontier_datasets`), and how much of them: ``max_students`` and
    ``max_items`` apply to ASSIST0910 only, ``n_simulated`` to ``simulated``; ``data_dir``: where the public
    datasets are (None: the default folder)."""

    names: Sequence[str] = ("frcsub", "assist0910", "simulated")
    max_students: int | None = 300
    max_items: int | None = 30
    n_simulated: int = 536
    data_dir: str | Path | None = None

    def load(self, seed: int) -> list[Dataset | SimulatedStudents]:
        return frontier_datasets(self.names, data_dir=self.data_dir, max_students=self.max_students,
                                 max_items=self.max_items, n_simulated=self.n_simulated, seed=seed)


def frontier_command(out: str | Path, plan: FrontierSettings, data: FrontierDatasets, entities: Sequence[str]) -> str:
    """The ``fedcd evaluate --privacy-frontier`` command line that reproduces a run (for the report)."""
    args = ["evaluate", "--privacy-frontier", "--out", str(out), "--datasets", ",".join(data.names), "--entities", ",".join(entities),
            "--epsilons", ",".join(f"{e:g}" for e in plan.epsilons), "--mechanisms", ",".join(plan.mechanisms),
            "--seed", str(plan.seed), "--sensitivity", plan.sensitivity, "--repeats", str(plan.repeats)]
    if data.max_students is not None:
        args += ["--max-students", str(data.max_students)]
    if data.max_items is not None:
        args += ["--max-items", str(data.max_items)]
    if "simulated" in data.names:
        args += ["--n-simulated", str(data.n_simulated)]
    return "fedcd " + " ".join(shlex.quote(a) for a in args)


def _python_command(out: str | Path, plan: FrontierSettings, data: FrontierDatasets) -> str:
    """The equivalent Python one-liner (the report quotes it; the default entities only)."""
    extra = "".join(f", {name}={getattr(plan, name)!r}" for name in ("delta", "concurrency")
                    if getattr(plan, name) != getattr(FrontierSettings(), name))
    return (
        "OPENBLAS_NUM_THREADS=1 .venv/bin/python -c \"import asyncio; from evaluation.frontier import FrontierDatasets, "
        f"FrontierSettings, run_privacy_frontier; asyncio.run(run_privacy_frontier({str(out)!r}, FrontierSettings("
        f"epsilons={tuple(float(e) for e in plan.epsilons)!r}, mechanisms={tuple(plan.mechanisms)!r}, seed={plan.seed}, "
        f"sensitivity={plan.sensitivity!r}, repeats={plan.repeats}{extra}), FrontierDatasets(names={tuple(data.names)!r}, "
        f"max_students={data.max_students!r}, max_items={data.max_items!r}, n_simulated={data.n_simulated})))\""
    )


async def run_privacy_frontier(
    out: str | Path,
    plan: FrontierSettings | None = None,
    data: FrontierDatasets | None = None,
    *,
    entities: Mapping[str, Entity] | None = None,
    progress: Progress | None = None,
    command: str | None = None,
    python_command: str | None = None,
) -> tuple[FrontierResult, list[Path]]:
    """Load the datasets, run :func:`privacy_frontier` and write the report into ``out``.

    ``plan`` defaults to :class:`FrontierSettings` with ``DEFAULT_REPEATS`` noise draws (the committed report's),
    ``data`` to :class:`FrontierDatasets`' defaults. ``entities`` defaults to the SIMULATED hosted family
    (``providers.simulated.simulated_family(plan.seed)``).
    ``command`` defaults to the equivalent ``fedcd evaluate --privacy-frontier ...`` line and, with the
    default entities, ``python_command`` to the equivalent Python one-liner (both go into the report).
    Returns the result and the paths written.
    """
    from providers.simulated import simulated_family

    plan = plan or FrontierSettings(repeats=DEFAULT_REPEATS)
    data = data or FrontierDatasets()
    chosen = dict(entities) if entities is not None else dict(simulated_family(seed=plan.seed))
    result = await privacy_frontier(data.load(plan.seed), chosen, plan, progress=progress)
    if python_command is None and entities is None:
        python_command = _python_command(out, plan, data)
    if command is None:
        assist = "assist0910" in data.names  # the limits apply to it only, so only then are they part of the command
        command = frontier_command(
            out, dataclasses.replace(plan, epsilons=result.epsilons),
            dataclasses.replace(data, max_students=data.max_students if assist else None,
                                max_items=data.max_items if assist else None),
            list(chosen),
        )
    return result, write_frontier_report(result, out, command=command, python_command=python_command)


def progress_total(datasets: Sequence[Dataset | SimulatedStudents], *, n_epsilons: int, n_mechanisms: int, repeats: int = 1, seed: int = 0) -> int:
    """How many times :func:`privacy_frontier` will call ``progress`` (for a progress bar)."""
    total = 0
    settings = 1 + n_epsilons * n_mechanisms
    for item in datasets:
        split = split_students(dataset_and_simulation(item)[0].students, seed=seed)
        n_val, n_test = len(split.validation), len(split.test)
        total += n_val + (n_test + n_val + n_test) * repeats * settings
    return total
