"""Loaders for the real datasets in ../shared/data (read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qmatrix import Dataset, DatasetNotFound, default_data_dir, load_assist0910, load_frcsub

DATA_DIR = default_data_dir()
needs_shared_data = pytest.mark.skipif(
    not DATA_DIR.is_dir(), reason=f"shared datasets not present at {DATA_DIR} (see ../shared/data/README.md)"
)


def _proportion_correct(ds: Dataset) -> float:
    scores = [r.score for s in ds.students for r in s.responses]
    return sum(scores) / len(scores)


@pytest.fixture(scope="module")
def frcsub() -> Dataset:
    return load_frcsub()


@pytest.fixture(scope="module")
def assist() -> Dataset:
    # About 3-4 s: load once for the module.
    return load_assist0910()


# --- locating the data -------------------------------------------------------------------


def test_default_data_dir_is_shared_data_beside_project(monkeypatch):
    # Prepare
    monkeypatch.delenv("FEDCD_DATA_DIR", raising=False)
    project_root = Path(__file__).resolve().parents[2]

    # Execute
    found = default_data_dir()

    # Assert
    assert found == project_root.parent / "shared" / "data"


def test_data_dir_argument_wins_over_env(monkeypatch, tmp_path):
    # Prepare
    monkeypatch.setenv("FEDCD_DATA_DIR", str(tmp_path / "env"))

    # Execute
    found = default_data_dir(tmp_path / "arg")

    # Assert
    assert found == tmp_path / "arg"


def test_missing_folder_raises_dataset_not_found_naming_path(tmp_path):
    # Prepare
    empty = tmp_path / "nowhere"

    # Execute
    with pytest.raises(DatasetNotFound) as err:
        load_frcsub(data_dir=empty)

    # Assert
    assert str(empty / "frcsub") in str(err.value)
    assert "FEDCD_DATA_DIR" in str(err.value)


def test_missing_assist_folder_raises_dataset_not_found_naming_path(tmp_path):
    with pytest.raises(DatasetNotFound, match="assist0910"):
        load_assist0910(data_dir=tmp_path)


def test_dataset_not_found_is_a_file_not_found_error():
    assert issubclass(DatasetNotFound, FileNotFoundError)


def test_env_var_is_respected_when_pointing_nowhere(monkeypatch, tmp_path):
    # Prepare
    monkeypatch.setenv("FEDCD_DATA_DIR", str(tmp_path))

    # Execute
    with pytest.raises(DatasetNotFound) as err:
        load_frcsub()

    # Assert
    assert str(tmp_path / "frcsub") in str(err.value)


@needs_shared_data
def test_env_var_is_respected_when_pointing_at_data(monkeypatch, tmp_path):
    # Prepare: a link to the real folder from a fresh data dir (nothing is copied)
    (tmp_path / "frcsub").symlink_to(DATA_DIR / "frcsub", target_is_directory=True)
    monkeypatch.setenv("FEDCD_DATA_DIR", str(tmp_path))

    # Execute
    ds = load_frcsub()

    # Assert
    assert default_data_dir() == tmp_path
    assert len(ds.students) == 536


# --- FrcSub ------------------------------------------------------------------------------


@needs_shared_data
def test_frcsub_has_536_students(frcsub):
    assert len(frcsub.students) == 536


@needs_shared_data
def test_frcsub_every_student_answers_the_20_items(frcsub):
    # Prepare
    item_ids = list(frcsub.qmatrix.item_ids)

    # Assert
    assert len(item_ids) == 20 and len(frcsub.qmatrix.concepts) == 8
    assert all(sorted(s.item_ids()) == sorted(item_ids) for s in frcsub.students)


@needs_shared_data
def test_frcsub_proportion_correct(frcsub):
    assert round(_proportion_correct(frcsub), 4) == 0.5339


@needs_shared_data
def test_frcsub_is_real_data(frcsub):
    assert frcsub.name == "frcsub" and frcsub.simulated is False and frcsub.true_mastery == {}


# --- ASSIST0910 --------------------------------------------------------------------------


@needs_shared_data
def test_assist_has_2380_students(assist):
    assert len(assist.students) == 2380


@needs_shared_data
def test_assist_has_110_concepts(assist):
    assert len(assist.qmatrix.concepts) == 110


@needs_shared_data
def test_assist_has_16804_items(assist):
    assert len(assist.qmatrix.items) == 16804


@needs_shared_data
def test_assist_has_257585_responses(assist):
    assert sum(len(s.responses) for s in assist.students) == 257585


@needs_shared_data
def test_assist_responses_refer_to_qmatrix_items(assist):
    # Prepare
    answered = {r.item_id for s in assist.students for r in s.responses}

    # Assert
    assert assist.qmatrix.unknown_items(answered) == []


@needs_shared_data
def test_assist_max_students_limits_students():
    # Execute
    ds = load_assist0910(max_students=5)

    # Assert
    assert len(ds.students) == 5
