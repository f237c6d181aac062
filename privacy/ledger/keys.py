"""The student a charge is made for, as the ledger knows them: :class:`StudentKey`."""

from __future__ import annotations

__all__ = ["StudentKey"]


class StudentKey(str):
    """A student as every store keeps them: the keyed hash of (tenant, student id), never the id itself.

    Made once, where the hash is computed (``app.pseudonyms.Pseudonyms.key``), or from a stored key read back; the
    ledger charges only a ``StudentKey``, so a raw id cannot be charged by mistake. A ``str`` (immutable; it binds,
    compares and serialises as its text), so the stores, cache tags and responses that hold the key need no change.
    """

    __slots__ = ()

    def __new__(cls, value: str) -> StudentKey:
        if type(value) is cls:
            return value  # type: ignore[return-value]
        if not isinstance(value, str) or not value:
            raise ValueError(f"a student key is a non-empty string, got {value!r}")
        return super().__new__(cls, value)
