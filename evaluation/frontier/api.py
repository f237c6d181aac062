"""The frontier's entry points for the CLI: its datasets, its command line, a progress total, and one call that runs it all."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from evaluation.frontier.compute import _unpack, privacy_frontier
from evaluation.frontier.report import write_frontier_report
from evaluation.frontier.results import DEFAULT_EPSILONS, DEFAULT_REPEATS, FrontierResult, Progress
from evaluation.simulation import SimulatedStudents, simulate
from evaluation.splits import split_students
from privacy.registry import MECHANISM_NAMES
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
    any other name goes through :func:`evaluation.datasets.load_dataset` unrestricted."""
    from evaluation.datasets import load_dataset

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


def frontier_command(
    *,
    out: str | Path,
    datasets: Sequence[str],
    entities: Sequence[str],
    epsilons: Sequence[float],
    mechanisms: Sequence[str],
    seed: int,
    sensitivity: str,
    max_students: int | None,
    max_items: int | None,
    n_simulated: int,
    repeats: int = 1,
) -> str:
    """The ``fedcd evaluate --privacy-frontier`` command line that reproduces a run (for the report)."""
    args = ["evaluate", "--privacy-frontier", "--out", str(out), "--datasets", ",".join(datasets), "--entities", ",".join(entities),
            "--epsilons", ",".join(f"{e:g}" for e in epsilons), "--mechanisms", ",".join(mechanisms), "--seed", str(seed),
            "--sensitivity", sensitivity, "--repeats", str(repeats)]
    if max_students is not None:
        args += ["--max-students", str(max_students)]
    if max_items is not None:
        args += ["--max-items", str(max_items)]
    if "simulated" in datasets:
        args += ["--n-simulated", str(n_simulated)]
    return "fedcd " + " ".join(shlex.quote(a) for a in args)


async def run_privacy_frontier(
    out: str | Path,
    *,
    datasets: Sequence[str] = ("frcsub", "assist0910", "simulated"),
    entities: Mapping[str, Entity] | None = None,
    epsilons: Sequence[float] = DEFAULT_EPSILONS,
    mechanisms: Sequence[str] = MECHANISM_NAMES,
    seed: int = 0,
    sensitivity: str = "paper",
    max_students: int | None = 300,
    max_items: int | None = 30,
    n_simulated: int = 536,
    repeats: int = DEFAULT_REPEATS,
    data_dir: str | Path | None = None,
    progress: Progress | None = None,
    command: str | None = None,
    python_command: str | None = None,
) -> tuple[FrontierResult, list[Path]]:
    """Load the datasets, run :func:`privacy_frontier` and write the report into ``out``.

    ``entities`` defaults to the SIMULATED hosted family (``providers.simulated.simulated_family(seed)``).
    ``command`` defaults to the equivalent ``fedcd evaluate --privacy-frontier ...`` line and, with the
    default entities, ``python_command`` to the equivalent Python one-liner (both go into the report).
    Returns the result and the paths written.
    """
    from providers.simulated import simulated_family

    chosen = dict(entities) if entities is not None else dict(simulated_family(seed=seed))
    data = frontier_datasets(datasets, data_dir=data_dir, max_students=max_students, max_items=max_items, n_simulated=n_simulated, seed=seed)
    result = await privacy_frontier(
        data, chosen, epsilons=epsilons, mechanisms=mechanisms, seed=seed, sensitivity=sensitivity, repeats=repeats, progress=progress,
    )
    if python_command is None and entities is None:
        python_command = (
            "OPENBLAS_NUM_THREADS=1 .venv/bin/python -c \"import asyncio; from evaluation.frontier import run_privacy_frontier; "
            f"asyncio.run(run_privacy_frontier({str(out)!r}, datasets={tuple(datasets)!r}, epsilons={tuple(float(e) for e in epsilons)!r}, "
            f"mechanisms={tuple(mechanisms)!r}, seed={seed}, sensitivity={sensitivity!r}, max_students={max_students!r}, "
            f"max_items={max_items!r}, n_simulated={n_simulated}, repeats={repeats}))\""
        )
    if command is None:
        command = frontier_command(
            out=out, datasets=datasets, entities=list(chosen), epsilons=result.epsilons, mechanisms=mechanisms, seed=seed,
            sensitivity=sensitivity, max_students=max_students if "assist0910" in datasets else None,
            max_items=max_items if "assist0910" in datasets else None, n_simulated=n_simulated, repeats=repeats,
        )
    return result, write_frontier_report(result, out, command=command, python_command=python_command)


def progress_total(datasets: Sequence[Dataset | SimulatedStudents], *, n_epsilons: int, n_mechanisms: int, repeats: int = 1, seed: int = 0) -> int:
    """How many times :func:`privacy_frontier` will call ``progress`` (for a progress bar)."""
    total = 0
    settings = 1 + n_epsilons * n_mechanisms
    for item in datasets:
        split = split_students(_unpack(item)[0].students, seed=seed)
        n_val, n_test = len(split.validation), len(split.test)
        total += n_val + (n_test + n_val + n_test) * repeats * settings
    return total
