"""QMatrix validation (messages name the offending row/column), queries and construction."""

from __future__ import annotations

import numpy as np
import pytest

from qmatrix import Item, QMatrix, QMatrixError, qmatrix_from_csv_text, qmatrix_from_json

CONCEPTS = ("add", "mul", "neg")


def _q(items: tuple[Item, ...], concepts: tuple[str, ...] = CONCEPTS, id: str = "t") -> QMatrix:
    return QMatrix(id=id, concepts=concepts, items=items)


def _valid_items() -> tuple[Item, ...]:
    return (
        Item(id="i1", concepts=("add",)),
        Item(id="i2", concepts=("mul", "neg")),
        Item(id="i3", concepts=("add", "neg")),
    )


# --- validation: each message names the row and/or column ------------------------------


def test_csv_non_binary_cell_names_row_item_and_column():
    # Prepare
    text = "item_id,text,add,mul\ni1,one,1,0\ni2,two,0,2\n"

    # Execute
    with pytest.raises(QMatrixError) as err:
        qmatrix_from_csv_text(text, id="t")

    # Assert
    assert len(err.value.problems) == 1
    problem = err.value.problems[0]
    assert "row 2" in problem and "'i2'" in problem and "column 'mul'" in problem and "'2'" in problem


def test_duplicate_item_id_names_the_second_row():
    # Prepare
    items = (Item(id="i1", concepts=("add",)), Item(id="i1", concepts=("mul",)), Item(id="i2", concepts=("neg",)))

    # Execute
    with pytest.raises(QMatrixError) as err:
        _q(items)

    # Assert
    assert err.value.problems == ["row 2 (item 'i1'): duplicate item id"]


def test_item_with_no_concept_names_its_row():
    # Prepare
    items = (*_valid_items(), Item(id="empty", concepts=()))

    # Execute
    with pytest.raises(QMatrixError) as err:
        _q(items)

    # Assert
    assert err.value.problems == ["row 4 (item 'empty'): item assesses no concept"]


def test_csv_row_of_zeros_is_an_item_with_no_concept():
    # Prepare
    text = "item_id,text,add,mul\ni1,,1,0\ni2,,0,1\ni3,,0,0\n"

    # Execute
    with pytest.raises(QMatrixError) as err:
        qmatrix_from_csv_text(text, id="t")

    # Assert
    assert err.value.problems == ["row 3 (item 'i3'): item assesses no concept"]


def test_concept_used_by_no_item_names_its_column():
    # Prepare
    concepts = (*CONCEPTS, "unused")

    # Execute
    with pytest.raises(QMatrixError) as err:
        _q(_valid_items(), concepts=concepts)

    # Assert
    assert err.value.problems == ["column 'unused': concept used by no item"]


def test_json_unknown_concept_names_row_item_and_concept():
    # Prepare
    data = {
        "id": "t",
        "concepts": ["add", "mul"],
        "items": [{"id": "i1", "concepts": ["add"]}, {"id": "i2", "concepts": ["mul", "zzz"]}],
    }

    # Execute
    with pytest.raises(QMatrixError) as err:
        qmatrix_from_json(data)

    # Assert
    assert err.value.problems == ["row 2 (item 'i2'): unknown concept 'zzz'"]


def test_duplicate_concept_names_its_column():
    # Prepare
    concepts = ("add", "mul", "neg", "mul")

    # Execute
    with pytest.raises(QMatrixError) as err:
        _q(_valid_items(), concepts=concepts)

    # Assert
    assert err.value.problems == ["column 'mul': duplicate concept name"]


def test_concept_listed_twice_in_one_item_names_its_row():
    # Prepare
    items = (*_valid_items(), Item(id="i4", concepts=("add", "add")))

    # Execute
    with pytest.raises(QMatrixError) as err:
        _q(items)

    # Assert
    assert err.value.problems == ["row 4 (item 'i4'): a concept is listed twice"]


@pytest.mark.parametrize(
    ("qid", "concepts", "items", "expected"),
    [
        ("", CONCEPTS, _valid_items(), "id: must be a non-empty string"),
        ("t", (), (Item(id="i1", concepts=()),), "concepts: at least one concept is required"),
        ("t", CONCEPTS, (), "items: at least one item is required"),
        ("t", (*CONCEPTS, " "), _valid_items(), "column 4: concept name must be non-empty"),
        ("t", CONCEPTS, (*_valid_items(), Item(id="", concepts=("add",))), "row 4: item id must be non-empty"),
    ],
    ids=["empty-id", "no-concepts", "no-items", "blank-concept", "blank-item-id"],
)
def test_structural_problems_are_reported(qid, concepts, items, expected):
    # Execute
    with pytest.raises(QMatrixError) as err:
        QMatrix(id=qid, concepts=concepts, items=items)

    # Assert
    assert expected in err.value.problems


def test_multiple_problems_are_reported_together():
    # Prepare: a duplicate item, an unknown concept, an empty item and an unused concept
    concepts = ("add", "mul", "neg", "unused")
    items = (
        Item(id="i1", concepts=("add",)),
        Item(id="i1", concepts=("mul",)),
        Item(id="i2", concepts=("neg", "zzz")),
        Item(id="i3", concepts=()),
    )

    # Execute
    with pytest.raises(QMatrixError) as err:
        QMatrix(id="t", concepts=concepts, items=items)

    # Assert
    assert err.value.problems == [
        "row 2 (item 'i1'): duplicate item id",
        "row 3 (item 'i2'): unknown concept 'zzz'",
        "row 4 (item 'i3'): item assesses no concept",
        "column 'unused': concept used by no item",
    ]
    assert str(err.value) == "; ".join(err.value.problems)


def test_csv_reports_every_bad_cell_together():
    # Prepare
    text = "item_id,text,add,mul\ni1,,x,0\ni2,,1,0.5\n"

    # Execute
    with pytest.raises(QMatrixError) as err:
        qmatrix_from_csv_text(text, id="t")

    # Assert
    assert err.value.problems == [
        "row 1 (item 'i1'), column 'add': cell must be 0 or 1, got 'x'",
        "row 2 (item 'i2'), column 'mul': cell must be 0 or 1, got '0.5'",
    ]


def test_qmatrix_error_is_a_value_error():
    assert issubclass(QMatrixError, ValueError)


# --- queries ----------------------------------------------------------------------------


def test_concepts_for_returns_q_filtered_concepts_in_column_order():
    # Prepare
    q = _q(_valid_items())

    # Execute: i2 lists (mul, neg); asking in reverse item order must not change the order
    concepts = q.concepts_for(["i2", "i1"])

    # Assert
    assert concepts == ("add", "mul", "neg")


def test_concepts_for_leaves_out_concepts_the_items_do_not_assess():
    # Prepare
    q = _q(_valid_items())

    # Execute
    concepts = q.concepts_for(["i3"])

    # Assert
    assert concepts == ("add", "neg")


def test_concepts_for_repeated_item_ids_count_once():
    # Prepare
    q = _q(_valid_items())

    # Execute
    concepts = q.concepts_for(["i1", "i1"])

    # Assert
    assert concepts == ("add",)


def test_concepts_for_names_all_unknown_item_ids():
    # Prepare
    q = _q(_valid_items(), id="demo")

    # Execute
    with pytest.raises(QMatrixError) as err:
        q.concepts_for(["i1", "x9", "i2", "y7", "x9"])

    # Assert
    assert err.value.problems == ["unknown item ids for Q-matrix 'demo': x9, y7"]


def test_item_lookup_unknown_id_raises_naming_it():
    # Prepare
    q = _q(_valid_items(), id="demo")

    # Execute
    with pytest.raises(QMatrixError) as err:
        q.item("nope")

    # Assert
    assert "'nope'" in str(err.value) and "'demo'" in str(err.value)


def test_matrix_property_shape_and_values():
    # Prepare
    q = _q(_valid_items())

    # Execute
    m = q.matrix

    # Assert
    assert m.shape == (3, 3)
    np.testing.assert_array_equal(m, [[1, 0, 0], [0, 1, 1], [1, 0, 1]])


def test_matrix_follows_column_order_not_item_listing_order():
    # Prepare: the item lists its concepts opposite to the column order
    q = QMatrix(id="t", concepts=("a", "b"), items=(Item(id="i1", concepts=("b", "a")),))

    # Execute
    m = q.matrix

    # Assert
    np.testing.assert_array_equal(m, [[1, 1]])


def test_item_ids_keep_row_order():
    assert _q(_valid_items()).item_ids == ("i1", "i2", "i3")


# --- from_matrix ------------------------------------------------------------------------


def test_from_matrix_builds_items_from_rows():
    # Prepare
    matrix = [[1, 0, 1], [0, 1, 0]]

    # Execute
    q = QMatrix.from_matrix(id="m", concepts=["a", "b", "c"], item_ids=["x", "y"], matrix=matrix, texts=["tx", None])

    # Assert
    assert q.items == (Item(id="x", concepts=("a", "c"), text="tx"), Item(id="y", concepts=("b",), text=None))
    np.testing.assert_array_equal(q.matrix, matrix)


def test_from_matrix_accepts_numpy_array():
    # Prepare
    matrix = np.array([[1, 1], [0, 1]], dtype=np.int8)

    # Execute
    q = QMatrix.from_matrix(id="m", concepts=["a", "b"], item_ids=["x", "y"], matrix=matrix)

    # Assert
    np.testing.assert_array_equal(q.matrix, matrix)
    assert q.concepts == ("a", "b")


def test_from_matrix_shape_mismatch_raises():
    # Execute
    with pytest.raises(QMatrixError) as err:
        QMatrix.from_matrix(id="m", concepts=["a", "b"], item_ids=["x"], matrix=[[1, 0, 1]])

    # Assert
    assert "does not match 1 items x 2 concepts" in str(err.value)


def test_from_matrix_non_binary_cell_names_row_and_column():
    # Execute
    with pytest.raises(QMatrixError) as err:
        QMatrix.from_matrix(id="m", concepts=["a", "b"], item_ids=["x", "y"], matrix=[[1, 0], [0, 3]])

    # Assert
    assert len(err.value.problems) == 1
    assert "row 2 (item 'y'), column 'b'" in err.value.problems[0]
