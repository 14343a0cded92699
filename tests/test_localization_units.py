"""Lexical units on real code: texts, types, character spans and lines."""

import pytest
from pinpoint.localization.units import UNIT_TYPES, lexical_units
from pinpoint_lab.localization.corpora import condefects, humanevalfix


def test_units_of_a_real_humaneval_program_have_types_spans_and_lines():
    program = humanevalfix()[0]  # has_close_elements, bug on line 8: `distance = elem - elem2`
    units = lexical_units(program.code)
    assert all(program.code[u.start : u.end] == u.text for u in units)
    assert all(u.type in UNIT_TYPES for u in units)
    line8 = [(u.text, u.type) for u in units if u.line == 8]
    assert line8 == [("distance", "identifier"), ("=", "operator"), ("elem", "identifier"), ("-", "operator"),
                     ("elem2", "identifier")]
    kinds = {(u.text, u.type) for u in units}
    assert {("def", "keyword"), ("for", "keyword"), ("in", "keyword"), ("(", "punctuation"), ("->", "punctuation"),
            ("True", "boolean"), ("!=", "operator"), ("<", "operator")} <= kinds
    # source order, no overlaps
    assert all(a.end <= b.start for a, b in zip(units, units[1:], strict=False))


def test_strings_are_one_unit_unless_they_interpolate():
    code = 'name = "plain string"\nmsg = f"hi {name!r} and {1 + 2}"\nx = None  # note\ny = 1.5\n'
    units = lexical_units(code)
    texts = [(u.text, u.type, u.line) for u in units]
    assert ('"plain string"', "string", 1) in texts
    assert ("name", "identifier", 2) in texts and ("+", "operator", 2) in texts and ("1", "integer", 2) in texts
    assert ("None", "none", 3) in texts and ("# note", "comment", 3) in texts and ("1.5", "float", 4) in texts


def test_character_offsets_survive_non_ascii_source():
    program = next(p for p in condefects() if any(ord(ch) > 127 for ch in p.code))
    units = lexical_units(program.code)
    assert all(program.code[u.start : u.end] == u.text for u in units)
    lines = program.code.splitlines()
    assert all(u.text.split("\n")[0] in lines[u.line - 1] for u in units)


def test_unknown_language_is_a_clear_error():
    with pytest.raises(ValueError, match="no lexer for language 'cobol'"):
        lexical_units("x", "cobol")
