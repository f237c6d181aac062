"""providers.parsing: the documented repair rule, one test per rule."""

from __future__ import annotations

import json
import random

import pytest

from providers.errors import EntityParseError
from providers.parsing import parse_mastery

CONCEPTS = ("fractions", "negatives")


def _rules(parsed) -> list[str]:
    return [r.rule for r in parsed.repairs]


# --- 1. find the JSON ----------------------------------------------------------------------


def test_plain_json_needs_no_repair():
    # Execute
    parsed = parse_mastery('{"fractions": 0.2, "negatives": 0.9}', CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.2, "negatives": 0.9}
    assert parsed.missing == [] and parsed.repairs == []


def test_already_decoded_dict_is_accepted():
    parsed = parse_mastery({"fractions": 0.2, "negatives": 0.9}, CONCEPTS)

    assert parsed.mastery == {"fractions": 0.2, "negatives": 0.9} and parsed.repairs == []


@pytest.mark.parametrize(
    "raw",
    [
        'Sure! Here is my estimate: {"fractions": 0.3, "negatives": 0.7} Hope that helps.',
        '```json\n{"fractions": 0.3, "negatives": 0.7}\n```',
        'Answer:\n```\n{"fractions": 0.3, "negatives": 0.7}\n```\nDone.',
    ],
    ids=["prose", "json-fence", "bare-fence-with-prose"],
)
def test_json_inside_prose_or_code_fence_is_extracted(raw):
    # Execute
    parsed = parse_mastery(raw, CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.3, "negatives": 0.7}
    assert _rules(parsed) == ["extracted_json"]


def test_object_nested_under_single_key_is_unwrapped():
    # Execute
    parsed = parse_mastery('{"mastery": {"fractions": 0.3, "negatives": 0.7}}', CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.3, "negatives": 0.7}
    assert _rules(parsed) == ["unwrapped"]


def test_fenced_and_wrapped_records_both_repairs():
    # Execute
    parsed = parse_mastery('```json\n{"result": {"fractions": 0.3, "negatives": 0.7}}\n```', CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.3, "negatives": 0.7}
    assert _rules(parsed) == ["extracted_json", "unwrapped"]


@pytest.mark.parametrize("raw", ["I cannot estimate this student.", "{not json at all}", "", "```json\n{oops\n```"])
def test_text_without_parsable_object_raises(raw):
    with pytest.raises(EntityParseError, match="no parsable JSON object"):
        parse_mastery(raw, CONCEPTS)


@pytest.mark.parametrize("raw", ["[0.3, 0.7]", '[{"fractions": 0.3, "negatives": 0.7}]', "0.5", '"0.5"'])
def test_json_that_is_not_an_object_raises(raw):
    with pytest.raises(EntityParseError, match="not an object"):
        parse_mastery(raw, CONCEPTS)


# --- 2. match keys -------------------------------------------------------------------------


def test_key_matched_ignoring_case_and_whitespace_is_normalised():
    # Execute
    parsed = parse_mastery('{" Fractions ": 0.3, "NEGATIVES": 0.7}', CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.3, "negatives": 0.7}
    assert [(r.rule, r.concept) for r in parsed.repairs] == [
        ("key_normalised", "fractions"),
        ("key_normalised", "negatives"),
    ]


def test_keys_for_concepts_not_asked_about_are_dropped():
    # Execute
    parsed = parse_mastery('{"fractions": 0.3, "negatives": 0.7, "geometry": 0.5, "note": "x"}', CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.3, "negatives": 0.7}
    assert _rules(parsed) == ["extra_key", "extra_key"]


# --- 3. read values ------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [('"0.4"', 0.4), ('" 0.65 "', 0.65), ('"1"', 1.0), ('"0"', 0.0)])
def test_numeric_string_is_read_as_number(value, expected):
    # Execute
    parsed = parse_mastery(f'{{"fractions": {value}, "negatives": 0.5}}', CONCEPTS)

    # Assert
    assert parsed.mastery["fractions"] == pytest.approx(expected)
    assert [(r.rule, r.concept) for r in parsed.repairs] == [("numeric_string", "fractions")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("8", 0.08), ("25", 0.25), ('"85%"', 0.85), ("100", 1.0), ('"100%"', 1.0), ('"0.5%"', 0.005), ("1.5", 0.015)],
)
def test_percentages_are_divided_by_100(value, expected):
    # Execute
    parsed = parse_mastery(f'{{"fractions": {value}, "negatives": 0.5}}', CONCEPTS)

    # Assert
    assert parsed.mastery["fractions"] == pytest.approx(expected)
    assert [(r.rule, r.concept) for r in parsed.repairs] == [("percent", "fractions")]


def test_percent_written_as_numeric_string_is_read():
    # Execute: both numeric_string and percent apply; the value must be 0.85
    parsed = parse_mastery('{"fractions": "85", "negatives": 0.5}', CONCEPTS)

    # Assert
    assert parsed.mastery["fractions"] == pytest.approx(0.85)
    assert "percent" in _rules(parsed)


@pytest.mark.parametrize("value", ["1", "1.0", "0", "0.0"])
def test_unit_interval_bounds_are_kept_without_repair(value):
    # Execute
    parsed = parse_mastery(f'{{"fractions": {value}, "negatives": 0.5}}', CONCEPTS)

    # Assert
    assert parsed.mastery["fractions"] == float(value)
    assert parsed.repairs == []


@pytest.mark.parametrize(
    "value",
    ["-0.2", "150", "100.5", "NaN", "Infinity", "-Infinity", "true", "false", "null", '"high"', "[0.5]",
     '{"v": 0.5}', '"-5%"', '""'],
)
def test_unusable_value_is_missing_never_invented(value):
    # Execute
    parsed = parse_mastery(f'{{"fractions": {value}, "negatives": 0.5}}', CONCEPTS)

    # Assert
    assert "fractions" not in parsed.mastery
    assert parsed.missing == ["fractions"]
    assert [(r.rule, r.concept) for r in parsed.repairs] == [("unusable_value", "fractions")]


def test_percent_string_above_100_is_unusable():
    # Execute
    parsed = parse_mastery('{"fractions": "150%", "negatives": 0.5}', CONCEPTS)

    # Assert
    assert parsed.missing == ["fractions"]
    assert _rules(parsed) == ["unusable_value"]


def test_huge_integer_is_unusable_not_a_crash():
    # Execute
    parsed = parse_mastery('{"fractions": 1' + "0" * 400 + ', "negatives": 0.5}', CONCEPTS)

    # Assert
    assert parsed.missing == ["fractions"] and parsed.mastery == {"negatives": 0.5}


# --- 4. missing concepts stay missing ------------------------------------------------------


def test_missing_concept_is_listed_and_not_filled():
    # Execute
    parsed = parse_mastery('{"fractions": 0.3}', CONCEPTS)

    # Assert
    assert parsed.mastery == {"fractions": 0.3}
    assert parsed.missing == ["negatives"]
    assert [(r.rule, r.concept) for r in parsed.repairs] == [("missing", "negatives")]


def test_missing_keeps_requested_concept_order():
    # Prepare
    concepts = ("a", "b", "c", "d")

    # Execute
    parsed = parse_mastery('{"c": 0.1, "a": "high"}', concepts)

    # Assert
    assert parsed.mastery == {"c": 0.1}
    assert parsed.missing == ["a", "b", "d"]


# --- 5. nothing usable ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", ["{}", '{"fractions": "high", "negatives": -1}', '{"geometry": 0.5, "algebra": 0.4}', '{"x": {}}']
)
def test_no_usable_value_raises_entity_parse_error(raw):
    with pytest.raises(EntityParseError, match="no usable mastery value"):
        parse_mastery(raw, CONCEPTS)


def test_parse_error_excerpt_is_bounded():
    # Execute
    with pytest.raises(EntityParseError) as err:
        parse_mastery("nothing here " * 100, CONCEPTS)

    # Assert
    assert 0 < len(err.value.raw_excerpt) <= 200


# --- repairs are counted -------------------------------------------------------------------


def test_one_repair_per_application():
    # Prepare: prose + wrapper + case key + extra key + numeric string + percent + unusable + missing
    concepts = ("a", "b", "c", "d", "e", "f")
    raw = 'Result: {"out": {"A": 0.5, "b": "0.4", "c": 30, "d": "high", "e": "40%", "z": 1}} end'

    # Execute
    parsed = parse_mastery(raw, concepts)

    # Assert
    assert parsed.mastery == pytest.approx({"a": 0.5, "b": 0.4, "c": 0.3, "e": 0.4})
    assert parsed.missing == ["d", "f"]
    assert sorted((r.rule, r.concept) for r in parsed.repairs) == sorted(
        [
            ("extracted_json", None),
            ("unwrapped", None),
            ("key_normalised", "a"),
            ("extra_key", None),
            ("numeric_string", "b"),
            ("percent", "c"),
            ("unusable_value", "d"),
            ("percent", "e"),
            ("missing", "f"),
        ]
    )


# --- property-style: in-range values pass through untouched ---------------------------------


def test_random_in_range_dicts_are_returned_unchanged_without_repairs():
    rng = random.Random(20240601)
    for _ in range(300):
        # Prepare
        n = rng.randint(1, 8)
        concepts = [f"concept {k}" for k in range(n)]
        values = {c: rng.choice([0.0, 1.0, rng.random(), round(rng.random(), 2)]) for c in concepts}

        # Execute
        from_text = parse_mastery(json.dumps(values), concepts)
        from_dict = parse_mastery(dict(values), concepts)

        # Assert
        for parsed in (from_text, from_dict):
            assert parsed.mastery == values
            assert parsed.missing == []
            assert parsed.repairs == []


def test_bounded_grammar_compiles_for_awkward_concept_names():
    from llama_cpp import LlamaGrammar

    from providers.llamacpp_embedded import bounded_mastery_grammar

    names = ['Borrow from "whole" part', "back\\slash", "Écrire 3/4 − 1/2", "a:b,c{d}"]
    grammar = bounded_mastery_grammar(names)
    assert grammar.count('ws ":" ws value') == len(names)
    LlamaGrammar.from_string(grammar, verbose=False)  # raises on a malformed grammar
