"""A student's rows in a kept upload (``app.services.students._rows_of``, read by export and erasure): an upload the
CSV reader cannot read is "unreadable" (None), never an exception out of the student's export or erasure."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.services.students import _rows_of


@pytest.mark.parametrize("text", [
    "student_id,item_id,correct\ns1,i1," + "1" * 131_073 + "\n",  # a field past csv's limit: csv.Error before
    "student_id,item_id,correct\ns1,i1,1\n,i2,0\n",  # an empty student id
    "student_id,i1\ns1,1\ns1,0\n",  # a student on two rows of the wide form
])
def test_an_upload_the_reader_refuses_is_unreadable(tmp_path: Path, text: str) -> None:
    path = tmp_path / "upload.csv"
    path.write_text(text)
    assert _rows_of(path, "s1") is None


def test_a_byte_order_mark_does_not_hide_the_students_rows(tmp_path: Path) -> None:
    path = tmp_path / "upload.csv"
    path.write_bytes("\ufeffstudent_id,item_id,correct\ns1,i1,1\ns2,i1,0\ns1,i2,1\n".encode())
    assert (_rows_of(path, "s1"), _rows_of(path, "s3")) == (2, 0)
