"""The items a forecast or an item bank is read for: one helper turns a Q-matrix's rows into what the model reads."""

from __future__ import annotations

from providers.item_response import ItemToForecast, items_to_forecast
from qmatrix import Item, QMatrix


def _q() -> QMatrix:
    return QMatrix(id="q", concepts=("A", "B"), items=(
        Item(id="i2", concepts=("B",), text="second"), Item(id="i1", concepts=("A", "B")),
        Item(id="i3", concepts=("A",)),
    ))


def test_every_row_in_row_order_with_its_q_row_and_text() -> None:
    # Execute
    items = items_to_forecast(_q())
    # Assert
    assert items == [ItemToForecast("i2", ("B",), "second"), ItemToForecast("i1", ("A", "B"), None),
                     ItemToForecast("i3", ("A",), None)]


def test_only_the_named_items_keep_row_order() -> None:
    assert [i.item_id for i in items_to_forecast(_q(), {"i3", "i2", "zz"})] == ["i2", "i3"]
    assert items_to_forecast(_q(), set()) == []
