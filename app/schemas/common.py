"""Field types shared by the request bodies of several resources: ids, names, ε and δ.

``Identifier`` and ``Name`` state in the OpenAPI schema (``pattern``) what :func:`qmatrix.identifier_problem`
refuses, so a schema-valid id is never a 422: an id has no invisible or control character and no leading or
trailing whitespace; a name (a concept, an entity) has no invisible or control character and is not blank. The
patterns are built from this Python's Unicode tables, the ones the check reads. Lone surrogates (U+D800–U+DFFF)
are refused too but left out of the patterns: no UTF-8 text carries one, and ECMA-262/Rust regex engines refuse
to name them.

The ids routes take in a path or a query and look up in the database (job, calibration, key, Q-matrix, student) are
``Identifier`` too, as is a diagnosis's ``calibration_id``: a NUL would otherwise reach SQL, which PostgreSQL refuses (a
500 there, a 404 on SQLite). A well-formed id that names nothing is still the resource's 404. (``/v1/local-model``'s
``qmatrix_id`` is only looked up in memory, among the tenant's published models, and stays a bounded string.)
"""

from __future__ import annotations

import itertools
import sys
import unicodedata
from functools import lru_cache
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, FailFast, Field

from app.schemas.patterns import SchemaPattern

from privacy import DELTA_MAX, DELTA_MIN, EPSILON_MAX, EPSILON_MIN
from qmatrix import Identifier as _Identifier
from qmatrix import identifier_problem
from qmatrix.identifiers import REFUSED_CATEGORIES  # the categories the check refuses: one list, read by both

__all__ = ["Delta", "Epsilon", "EpsilonValue", "Identifier", "Name", "QMatrixNames", "WholeNumber", "identifier_pattern",
           "name_pattern"]


def _char_class(codes: list[int]) -> str:
    """A regex character-class body for sorted code points: BMP ones escaped (``\\u`` and four hex digits, which
    Python, ECMA-262 and Rust read alike), astral ones written as themselves (Python has no ``\\u{…}``, ECMA-262 no
    ``\\U``)."""
    def char(code: int) -> str:
        return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)

    ranges: list[str] = []
    start = prev = codes[0]
    for code in [*codes[1:], -1]:
        if code == prev + 1:
            prev = code
            continue
        ranges.append(char(start) if start == prev else f"{char(start)}-{char(prev)}")
        start = prev = code
    return "".join(ranges)


@lru_cache(maxsize=1)
def _classes() -> tuple[str, str]:
    """(refused, refused or whitespace) as character-class bodies; built once, when the schema is first made."""
    refused, edge = [], []
    # Planes 4-13 hold no assigned character in any Unicode version so far (16.0): nothing there is refused.
    for code in itertools.chain(range(0xD800), range(0xE000, 0x40000), range(0xE0000, sys.maxunicode + 1)):
        ch = chr(code)
        bad = unicodedata.category(ch) in REFUSED_CATEGORIES
        if bad:
            refused.append(code)
        if bad or ch.isspace():
            edge.append(code)
    return _char_class(refused), _char_class(edge)


def identifier_pattern() -> str:
    """A student, item or Q-matrix id: not empty, no refused character, no whitespace at either end."""
    refused, edge = _classes()
    return f"^[^{edge}](?:[^{refused}]*[^{edge}])?$"


def name_pattern() -> str:
    """A concept or entity name: no refused character, at least one that is not whitespace."""
    refused, edge = _classes()
    return f"^[^{refused}]*[^{edge}][^{refused}]*$"


def _check_name(value: str) -> str:
    """A name is checked where it is given, even where it is not used (an entity list with method 'keyword')."""
    if (problem := identifier_problem(value, padded_ok=True)) is not None:
        raise ValueError(f"name {problem}")
    return value


# qmatrix's Identifier (min 1, max 256 characters, checked by check_identifier), its rule stated in the schema.
Identifier = Annotated[_Identifier, SchemaPattern(identifier_pattern)]
# A concept or entity name in a request: non-empty, bounded.
Name = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_check_name), SchemaPattern(name_pattern)]
# The lists of a Q-matrix stop at their first invalid element: a 16 MiB body of 4 million empty names otherwise made
# 4 million errors (2 GB inside pydantic, 6.7 GB and 33 s to list them) for a 422 that shows only the first 20 anyway.
# Problems of a schema-valid Q-matrix (duplicates, unknown concepts…) are still listed together (qmatrix.model).
QMatrixNames = Annotated[list[Name], FailFast()]

def _whole_number(value: object) -> object:
    """JSON Schema counts 5.0 as an integer; strict pydantic does not: a whole float is read as its int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# After an int's bounds in its Annotated (``Annotated[int, Field(ge=1), WholeNumber]``), so the schema still states
# them: a JSON number with no fractional part (5 or 5.0) is an integer, never a string or a boolean.
WholeNumber = BeforeValidator(_whole_number)

# ε of one release, within the range every mechanism and accountant is total over (privacy/ranges.py): the schema
# states the range from its constants, so a value outside it is a 422 naming the field; privacy.Epsilon is made from
# the value where it enters privacy/ (pydantic would not serialise a float subclass in the "none" union cleanly).
EpsilonValue = Annotated[float, Field(ge=EPSILON_MIN, le=EPSILON_MAX, allow_inf_nan=False)]
Epsilon = EpsilonValue | Literal["none"]
Delta = Annotated[float, Field(ge=DELTA_MIN, le=DELTA_MAX, allow_inf_nan=False)]
