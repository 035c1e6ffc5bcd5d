"""The exporters' one reading of an fnmatch character class (export/source.py
`bracket`): the SELinux file-context regex of a component matches exactly the
names fnmatch matches, classes, negations, a "]" member and an unclosed "[" included."""
from __future__ import annotations

import fnmatch
import re

import pytest

from confine.export import selinux, source

NAMES = ["^", "\\", "a", "b", "x", "]", "[", "!", "ab", "[abc", "ax", "bx", "]x", "!x", "-", ".envrc", "hooks"]


@pytest.mark.parametrize("comp", ["[ab]", "[!a]", "[]]", "[!]]x", "[abc", "x[", "[a-c]x",
                                  ".env*", "?x", "[!ab]x", "[^a]", "[a^]", "[\\]"])
def test_file_context_regex_matches_what_fnmatch_matches(comp):
    rx = re.compile(selinux._fc_glob(comp))
    for name in NAMES:
        assert bool(rx.fullmatch(name)) == fnmatch.fnmatchcase(name, comp), (comp, name)


def test_bracket_reads_a_class_as_fnmatch_does():
    assert source.bracket("[ab]x", 0) == ("ab", False, 4)
    assert source.bracket("[!]]", 0) == ("]", True, 4)
    assert source.bracket("[]a]", 0) == ("]a", False, 4)
    assert source.bracket("[abc", 0) is None            # no "]": a literal "["
