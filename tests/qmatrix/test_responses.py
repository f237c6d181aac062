"""Response validation and the long-format responses CSV loader."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from qmatrix import (
    Response,
    group_by_student,
    load_responses_csv,
    load_responses_wide_csv,
    read_responses_csv,
    score_of,
)


@pytest.mark.parametrize(("correct", "score"), [(True, 1.0), (False, 0.0), (0.0, 0.0), (0.25, 0.25), (1.0, 1.0)])
def test_correct_accepts_bool_or_unit_score(correct, score):
    # Execute
    r = Response(item_id="i1", correct=correct)

    # Assert
    assert r.score == score


def test_bool_correct_stays_bool():
    assert Response(item_id="i1", correct=True).correct is True


@pytest.mark.parametrize("bad", [1.5, -0.1, float("nan"), float("inf")])
def test_correct_outside_unit_interval_is_rejected(bad):
    with pytest.raises(ValidationError, match=r"score must be a boolean or a number in \[0, 1\]"):
        Response(item_id="i1", correct=bad)


def test_empty_item_id_is_rejected():
    with pytest.raises(ValidationError):
        Response(item_id="", correct=True)


def test_unknown_field_is_rejected():
    with pytest.raises(ValidationError):
        Response(item_id="i1", correct=True, student_id="s1")


@pytest.mark.parametrize(("value", "expected"), [(True, 1.0), (False, 0.0), (0.4, 0.4)])
def test_score_of(value, expected):
    assert score_of(value) == expected


def test_group_by_student_keeps_first_seen_order():
    # Prepare
    rows = [("b", Response(item_id="i1", correct=True)), ("a", Response(item_id="i1", correct=False)),
            ("b", Response(item_id="i2", correct=0.5))]

    # Execute
    grouped = group_by_student(rows)

    # Assert
    assert [s.student_id for s in grouped] == ["b", "a"]
    assert grouped[0].item_ids() == ["i1", "i2"]


def test_load_csv_with_student_id_column_groups_by_student(tmp_path):
    # Prepare
    path = tmp_path / "resp.csv"
    path.write_text("student_id,item_id,correct\ns1,i1,1\ns2,i1,0\ns1,i2,0.5\ns2,i2,true\n")

    # Execute
    students = load_responses_csv(path)

    # Assert
    assert [s.student_id for s in students] == ["s1", "s2"]
    assert [(r.item_id, r.correct) for r in students[0].responses] == [("i1", True), ("i2", 0.5)]
    assert [(r.item_id, r.correct) for r in students[1].responses] == [("i1", False), ("i2", True)]


def test_load_csv_without_student_id_column_is_one_student_named_by_stem(tmp_path):
    # Prepare
    path = tmp_path / "alice.csv"
    path.write_text("item_id,correct\ni1,1\ni2,FALSE\ni3,0.75\n")

    # Execute
    students = load_responses_csv(path)

    # Assert
    assert len(students) == 1
    assert students[0].student_id == "alice"
    assert [r.score for r in students[0].responses] == [1.0, 0.0, 0.75]


def test_load_csv_without_student_id_column_uses_given_student_id(tmp_path):
    # Prepare
    path = tmp_path / "resp.csv"
    path.write_text("item_id,correct\ni1,1\n")

    # Execute
    students = load_responses_csv(path, student_id="bob")

    # Assert
    assert [s.student_id for s in students] == ["bob"]


def test_load_csv_reads_answer_column(tmp_path):
    # Prepare
    path = tmp_path / "resp.csv"
    path.write_text('item_id,correct,answer\ni1,0,"7/8, I think"\ni2,1,\n')

    # Execute
    (student,) = load_responses_csv(path)

    # Assert
    assert [r.answer for r in student.responses] == ["7/8, I think", None]


@pytest.mark.parametrize("bad", ["1.5", "-0.1", "yes", "", "nan"])
def test_load_csv_bad_value_names_file_line_and_column(tmp_path, bad):
    # Prepare
    path = tmp_path / "resp.csv"
    path.write_text(f"student_id,item_id,correct\ns1,i1,1\ns1,i2,{bad}\n")

    # Execute
    with pytest.raises(ValueError) as err:
        load_responses_csv(path)

    # Assert
    assert "resp.csv, line 3, column 'correct'" in str(err.value)
    assert repr(bad) in str(err.value)


def test_load_csv_missing_column_is_named(tmp_path):
    # Prepare
    path = tmp_path / "resp.csv"
    path.write_text("student_id,item_id\ns1,i1\n")

    # Execute / Assert
    with pytest.raises(ValueError, match="missing column"):
        load_responses_csv(path)


def test_load_csv_empty_item_id_names_item_id_column(tmp_path):
    # Prepare
    path = tmp_path / "resp.csv"
    path.write_text("student_id,item_id,correct\ns1,,1\n")

    # Execute
    with pytest.raises(ValueError) as err:
        load_responses_csv(path)

    # Assert
    assert "line 2, column 'item_id'" in str(err.value)


def test_wide_csv_reads_one_row_per_student_and_skips_empty_cells(tmp_path):
    # Prepare
    path = tmp_path / "wide.csv"
    path.write_text("student_id,i1,i2,i3\ns1,1,,0.5\ns2,,,\ns3,false,true,0\n")

    # Execute
    students = load_responses_wide_csv(path)

    # Assert: s2 answered nothing and is left out
    assert [s.student_id for s in students] == ["s1", "s3"]
    assert [(r.item_id, r.score) for r in students[0].responses] == [("i1", 1.0), ("i3", 0.5)]
    assert [r.score for r in students[1].responses] == [0.0, 1.0, 0.0]


def test_read_responses_csv_tells_long_from_wide_by_the_header(tmp_path):
    long, wide = tmp_path / "long.csv", tmp_path / "wide.csv"
    long.write_text("student_id,item_id,correct\ns1,i1,1\ns1,i2,0\n")
    wide.write_text("student_id,i1,i2\ns1,1,0\n")
    assert read_responses_csv(long) == read_responses_csv(wide)


@pytest.mark.parametrize("text, message", [
    ("id,i1\ns1,1\n", "starts with 'student_id'"),
    ("student_id,i1,i1\ns1,1,0\n", "unique"),
    ("student_id,i1,i2\ns1,1\n", "line 2: expected a student id and 2 cells"),
    ("student_id,i1\ns1,2\n", "line 2, column 'i1': '2'"),
])
def test_wide_csv_errors_name_the_place(tmp_path, text, message):
    path = tmp_path / "wide.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_responses_wide_csv(path)


def test_written_responses_read_back_unchanged(tmp_path):
    from qmatrix import StudentResponses, write_responses_csv

    students = [StudentResponses(student_id="s1", responses=(Response(item_id="i1", correct=True),
                                                             Response(item_id="i2", correct=0.25, answer="3/4"))),
                StudentResponses(student_id="s2", responses=(Response(item_id="i1", correct=False),))]
    write_responses_csv(tmp_path / "out.csv", students)
    assert load_responses_csv(tmp_path / "out.csv") == students


def test_a_byte_order_mark_does_not_rename_the_student_id_column(tmp_path):
    # Prepare: a spreadsheet's UTF-8 export, BOM first
    path = tmp_path / "resp.csv"
    path.write_bytes("\ufeffstudent_id,item_id,correct\ns1,i1,1\ns2,i1,0\n".encode())
    wide = tmp_path / "wide.csv"
    wide.write_bytes("\ufeffstudent_id,i1,i2\ns1,1,0\ns2,0,\n".encode())

    # Execute / Assert: two students each, not one named after the file
    assert [s.student_id for s in read_responses_csv(path)] == ["s1", "s2"]
    assert [s.student_id for s in read_responses_csv(wide)] == ["s1", "s2"]


def test_an_empty_student_id_in_a_student_id_column_is_refused(tmp_path):
    path = tmp_path / "resp.csv"
    path.write_text("student_id,item_id,correct\ns1,i1,1\n ,i2,0\n")
    with pytest.raises(ValueError, match="resp.csv, line 3, column 'student_id': not a valid student id"):
        read_responses_csv(path)


@pytest.mark.parametrize("bad", ["s" * 257, "vic\u200btim"])
@pytest.mark.parametrize("form", ["long", "wide"])
def test_a_student_id_that_is_no_identifier_is_refused_without_quoting_it(tmp_path, bad, form):
    # Prepare: ids are personal data, and a refusal may be kept (a job's error, a log line)
    path = tmp_path / "resp.csv"
    path.write_text(f"student_id,item_id,correct\ns1,i1,1\n{bad},i1,0\n" if form == "long"
                    else f"student_id,i1\ns1,1\n{bad},0\n", encoding="utf-8")

    # Execute
    with pytest.raises(ValueError) as err:
        read_responses_csv(path)

    # Assert: the line is named, the id is not
    assert "line 3, column 'student_id': not a valid student id" in str(err.value)
    assert bad not in str(err.value) and "sss" not in str(err.value)


def test_a_wide_csv_refuses_a_student_on_a_second_row(tmp_path):
    # Prepare: the wide form is one row per student; a repeat would count one student as two
    path = tmp_path / "wide.csv"
    path.write_text("student_id,i1,i2\ns1,1,0\ns2,0,1\ns1,1,1\n")

    # Execute / Assert
    with pytest.raises(ValueError, match=r"wide.csv, line 4: the student of line 2 again; a wide CSV has one row per "
                                         r"student"):
        load_responses_wide_csv(path)


def test_a_long_csv_merges_a_student_spread_over_rows(tmp_path):
    path = tmp_path / "resp.csv"
    path.write_text("student_id,item_id,correct\ns1,i1,1\ns2,i1,0\ns1,i2,1\n")
    assert [(s.student_id, s.item_ids()) for s in read_responses_csv(path)] == [("s1", ["i1", "i2"]), ("s2", ["i1"])]


@pytest.mark.parametrize("where", ["header", "row"])
@pytest.mark.parametrize("form", ["long", "wide"])
def test_a_field_past_the_csv_modules_limit_is_a_value_error(tmp_path, where, form):
    # Prepare: one cell over csv.field_size_limit() (131,072 characters): csv.Error, not a ValueError, before
    huge = "x" * 131_073
    header = "student_id,item_id,correct" if form == "long" else "student_id,i1"
    row = "s1,i1,1" if form == "long" else "s1,1"
    path = tmp_path / "resp.csv"
    path.write_text(f"{header},{huge}\n{row}\n" if where == "header" else f"{header}\n{row}{huge}\n")

    # Execute / Assert
    with pytest.raises(ValueError, match="resp.csv: not a readable CSV: field larger than field limit"):
        read_responses_csv(path)
