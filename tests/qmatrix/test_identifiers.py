"""Ids that look identical are identical: no padding, control, zero-width or bidi characters."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qmatrix import Item, QMatrix, QMatrixError, Response, identifier_problem


@pytest.mark.parametrize("value", [
    "victim ", " victim", "victim\u200b", "vic\u200dtim", "\u202evictim", "victim\u2066", "victim\n", "vic\x00tim",
    "victim\u00a0", "\ud800", "", "   ",
])
def test_lookalike_ids_are_refused(value: str) -> None:
    assert identifier_problem(value) is not None
    with pytest.raises(ValueError):
        Response(item_id=value, correct=True)


@pytest.mark.parametrize("value", ["victim", "Victim", "élève-42", "学生 7", "a.b_c-d"])
def test_ordinary_ids_are_kept_as_given(value: str) -> None:
    assert identifier_problem(value) is None
    assert Response(item_id=value, correct=True).item_id == value


def test_qmatrix_item_ids_follow_the_rule() -> None:
    with pytest.raises(QMatrixError, match="item id has leading or trailing whitespace"):
        QMatrix(id="q", concepts=("A",), items=(Item("i1 ", ("A",)),))
    with pytest.raises(QMatrixError, match="U\\+200B"):
        QMatrix(id="q", concepts=("A\u200b",), items=(Item("i1", ("A\u200b",)),))


@given(st.text(min_size=1, max_size=20))
def test_an_accepted_id_has_no_padding_and_no_invisible_character(value: str) -> None:
    if identifier_problem(value) is None:
        assert value == value.strip()
        assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp") for ch in value)
