"""CSV and JSON forms of the Q-matrix: round trips, the real FrcSub file, normalisation."""

from __future__ import annotations

import json

import pytest

from qmatrix import (
    Item,
    QMatrix,
    QMatrixError,
    default_data_dir,
    example_qmatrix,
    load_qmatrix,
    qmatrix_from_csv_text,
    qmatrix_from_json,
    qmatrix_to_csv_text,
    qmatrix_to_json,
    save_qmatrix,
)


def _tricky_qmatrix() -> QMatrix:
    # Concepts deliberately not in alphabetical order; texts with commas, quotes and unicode.
    return QMatrix(
        id="tricky",
        concepts=("zeta", "alpha", "Mu, with comma"),
        items=(
            Item(id="q1", text='Compute 5/3 - 3/4, then "simplify"', concepts=("zeta", "Mu, with comma")),
            Item(id="q2", text="Résoudre x − 2 = 5 → x?", concepts=("alpha",)),
            Item(id="q3", text=None, concepts=("alpha", "Mu, with comma")),
        ),
    )


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_save_then_load_round_trips(tmp_path, suffix):
    # Prepare
    q = _tricky_qmatrix()
    path = tmp_path / f"tricky{suffix}"

    # Execute
    save_qmatrix(q, path)
    loaded = load_qmatrix(path)

    # Assert
    assert loaded == q


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_round_trip_preserves_concept_order(tmp_path, suffix):
    # Prepare
    q = _tricky_qmatrix()
    path = tmp_path / f"q{suffix}"

    # Execute
    save_qmatrix(q, path)
    loaded = load_qmatrix(path, id="tricky")

    # Assert
    assert loaded.concepts == ("zeta", "alpha", "Mu, with comma")


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_round_trip_preserves_text(tmp_path, suffix):
    # Prepare
    q = _tricky_qmatrix()
    path = tmp_path / f"q{suffix}"

    # Execute
    save_qmatrix(q, path)
    loaded = load_qmatrix(path, id="tricky")

    # Assert
    assert [i.text for i in loaded.items] == ['Compute 5/3 - 3/4, then "simplify"', "Résoudre x − 2 = 5 → x?", None]


def test_csv_load_takes_id_from_file_stem(tmp_path):
    # Prepare
    path = tmp_path / "my-matrix.csv"
    save_qmatrix(_tricky_qmatrix(), path)

    # Execute
    loaded = load_qmatrix(path)

    # Assert
    assert loaded.id == "my-matrix"


def test_json_load_with_id_overrides_stored_id(tmp_path):
    # Prepare
    path = tmp_path / "q.json"
    save_qmatrix(_tricky_qmatrix(), path)

    # Execute
    loaded = load_qmatrix(path, id="renamed")

    # Assert
    assert loaded.id == "renamed" and loaded.items == _tricky_qmatrix().items


def test_csv_text_round_trip():
    # Prepare
    q = _tricky_qmatrix()

    # Execute
    again = qmatrix_from_csv_text(qmatrix_to_csv_text(q), id="tricky")

    # Assert
    assert again == q


def test_json_dict_round_trip():
    # Prepare
    q = example_qmatrix()

    # Execute
    again = qmatrix_from_json(qmatrix_to_json(q))

    # Assert
    assert again == q


def test_csv_text_header_holds_concepts_in_order():
    # Execute
    header = qmatrix_to_csv_text(_tricky_qmatrix()).splitlines()[0]

    # Assert
    assert header == 'item_id,text,zeta,alpha,"Mu, with comma"'


def test_csv_with_byte_order_mark_and_blank_lines_loads():
    # Prepare
    text = "\ufeffitem_id,text,a,b\n\ni1,first,1,0\n\ni2,,0,1\n"

    # Execute
    q = qmatrix_from_csv_text(text, id="bom")

    # Assert
    assert q.concepts == ("a", "b") and q.item_ids == ("i1", "i2")


def test_csv_header_must_start_with_item_id_text():
    with pytest.raises(QMatrixError, match="header must start with 'item_id,text'"):
        qmatrix_from_csv_text("id,text,a\ni1,,1\n", id="t")


def test_csv_row_with_wrong_cell_count_names_row():
    with pytest.raises(QMatrixError, match=r"row 1 \(item 'i1'\): expected 4 cells, got 3"):
        qmatrix_from_csv_text("item_id,text,a,b\ni1,,1\n", id="t")


def test_unsupported_extension_raises(tmp_path):
    # Prepare
    path = tmp_path / "q.yaml"
    path.write_text("x")

    # Execute / Assert
    with pytest.raises(QMatrixError, match="unsupported extension"):
        load_qmatrix(path)
    with pytest.raises(QMatrixError, match="unsupported extension"):
        save_qmatrix(_tricky_qmatrix(), path)


def test_json_item_concepts_out_of_order_are_normalised_to_column_order():
    # Prepare
    data = {
        "id": "t",
        "concepts": ["a", "b", "c"],
        "items": [{"id": "i1", "concepts": ["c", "a", "b"]}, {"id": "i2", "concepts": ["b", "a"]}],
    }

    # Execute
    q = qmatrix_from_json(json.dumps(data))

    # Assert
    assert [i.concepts for i in q.items] == [("a", "b", "c"), ("a", "b")]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"concepts": ["a"], "items": []}, "id: field required"),
        ({"id": "t", "concepts": "a", "items": []}, "concepts: must be a list of strings"),
        ({"id": "t", "concepts": ["a"], "items": {}}, "items: must be a list"),
        ({"id": "t", "concepts": ["a"], "items": [{"concepts": ["a"]}]}, "items[0]: must be an object"),
        ({"id": "t", "concepts": ["a"], "items": [{"id": "i1", "concepts": "a"}]}, "items[0] (item 'i1')"),
    ],
    ids=["missing-id", "concepts-not-list", "items-not-list", "item-without-id", "item-concepts-not-list"],
)
def test_json_malformed_forms_are_rejected(data, expected):
    with pytest.raises(QMatrixError) as err:
        qmatrix_from_json(data)

    assert any(expected in p for p in err.value.problems)


def test_example_qmatrix_loads():
    # Execute
    q = example_qmatrix()

    # Assert
    assert q.id == "example-prealgebra"
    assert len(q.concepts) == 6 and len(q.items) == 12


def test_frcsub_qmatrix_csv_loads_with_20_items_and_8_concepts():
    # Prepare
    path = default_data_dir() / "frcsub" / "qmatrix.csv"
    if not path.is_file():
        pytest.skip(f"shared data not present at {path}")

    # Execute
    q = load_qmatrix(path, id="frcsub")

    # Assert
    assert len(q.items) == 20
    assert len(q.concepts) == 8
    assert q.matrix.shape == (20, 8)
    assert q.item("item01").text == "5/3 - 3/4"


def test_fingerprint_ignores_the_id_and_sees_every_cell() -> None:
    import dataclasses

    from qmatrix import QMatrix, example_qmatrix, qmatrix_fingerprint

    q = example_qmatrix()
    renamed = QMatrix(id="copy-of-it", concepts=q.concepts, items=q.items)
    first, *rest = q.items
    other = next(c for c in q.concepts if c not in first.concepts)
    edited = QMatrix(id=q.id, concepts=q.concepts, items=(dataclasses.replace(first, concepts=(other,)), *rest))
    assert qmatrix_fingerprint(renamed) == qmatrix_fingerprint(q) != qmatrix_fingerprint(edited)
