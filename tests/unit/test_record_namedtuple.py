"""confine.record.NamedTuple makes the same classes as typing.NamedTuple, cheaper.

Each case defines one class twice, with confine.record's base and with typing's,
and checks they behave alike: construction and its errors, defaults, repr, eq,
hash, order, the namedtuple methods (_make, _replace, _asdict), pickling,
copying, pattern matching, no instance attributes, and the definitions each
refuses. The mediation wire (tests/unit/test_mediation_wire.py) runs on these.
"""
from __future__ import annotations

import copy
import pickle
import textwrap
import typing
from typing import Any

import pytest

from confine import record


def _both(body: str) -> tuple[Any, Any]:
    made = []
    for base in (record.NamedTuple, typing.NamedTuple):
        ns: dict[str, Any] = {"Base": base}
        exec(compile("from __future__ import annotations\n" + textwrap.dedent(body),
                     "<case>", "exec"), ns)
        made.append(ns["C"])
    return made[0], made[1]


PLAIN = """
class C(Base):
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()
"""
DOC = '''
class C(Base):
    """What C is."""
    a: bytes

    def twice(self) -> bytes:
        return self.a * 2

    def __repr__(self) -> str:
        return "own"
'''
ONE = """
class C(Base):
    only: int
"""
NONE = """
class C(Base):
    pass
"""


def _outcome(f: Any) -> Any:
    try:
        return ("ok", f())
    except Exception as e:  # the same exception type and message, or the same value
        return (type(e).__name__, str(e).replace("typing.", ""))


def _alike(R: Any, T: Any, f: Any) -> None:
    r, t = _outcome(lambda: f(R)), _outcome(lambda: f(T))
    if r[0] == t[0] == "ok" and type(r[1]) is R:     # instances: both classes are named C
        assert type(t[1]) is T and repr(r[1]) == repr(t[1]) and tuple(r[1]) == tuple(t[1])
    else:
        assert r == t


CALLS = [
    lambda C: C(1), lambda C: C(1, "y"), lambda C: C(a=2, c=(3,)), lambda C: C(1, "q", (1,)),
    lambda C: C(), lambda C: C(1, "b", (), 5), lambda C: C(1, a=2), lambda C: C(1, e=3),
    lambda C: C._make([1, "z", ()]), lambda C: C._make([1]), lambda C: C(1)._replace(b="w"),
    lambda C: C(1)._replace(z=1), lambda C: C(1)._asdict(), lambda C: C._fields,
    lambda C: C._field_defaults, lambda C: C.__match_args__, lambda C: C.__doc__,
    lambda C: C.a.__doc__, lambda C: repr(C(1, "s")), lambda C: C(1) == (1, "x", ()),
    lambda C: hash(C(1)) == hash((1, "x", ())), lambda C: C(1) < C(2), lambda C: C(1)[1],
    lambda C: len(C(1)), lambda C: list(C(1)), lambda C: type(C), lambda C: len(C.__mro__),
    lambda C: isinstance(C(1), tuple), lambda C: C(1).__getnewargs__(),
    lambda C: copy.copy(C(1)) == C(1), lambda C: copy.deepcopy(C(1, "d", (1,))),
    lambda C: setattr(C(1), "a", 2), lambda C: setattr(C(1), "other", 2),
    lambda C: hasattr(C(1), "__dict__"), lambda C: C.__slots__, lambda C: C.__new__.__name__,
]


@pytest.mark.parametrize("call", CALLS)
def test_plain_class_alike(call: Any) -> None:
    _alike(*_both(PLAIN), call)


def test_docstring_methods_and_own_repr_kept() -> None:
    R, T = _both(DOC)
    for f in (lambda C: C.__doc__, lambda C: C(b"x").twice(), lambda C: repr(C(b"x")),
              lambda C: C._fields):
        _alike(R, T, f)


@pytest.mark.parametrize("body", [ONE, NONE])
def test_one_and_no_field(body: str) -> None:
    R, T = _both(body)
    args = (1,) if body is ONE else ()
    for f in (lambda C: C(*args), lambda C: repr(C(*args)), lambda C: C.__doc__,
              lambda C: C._make(args), lambda C: C(*args, *args), lambda C: C._fields):
        _alike(R, T, f)


def test_match_statement() -> None:
    R, T = _both(PLAIN)
    code = ("def f(v):\n"
            "    match v:\n"
            "        case C(1, b):\n"
            "            return ('pos', b)\n"
            "        case C(a=a, c=()):\n"
            "            return ('kw', a)\n")
    for C in (R, T):
        ns: dict[str, Any] = {"C": C}
        exec(code, ns)
        assert ns["f"](C(1, "m")) == ("pos", "m") and ns["f"](C(5)) == ("kw", 5)


class Pickled(record.NamedTuple):
    a: int
    b: str = "p"


class PickledT(typing.NamedTuple):
    a: int
    b: str = "p"


def test_pickle_round_trip() -> None:
    for C in (Pickled, PickledT):
        for proto in range(pickle.HIGHEST_PROTOCOL + 1):
            v = C(3)
            back = pickle.loads(pickle.dumps(v, proto))
            assert back == v and type(back) is C


@pytest.mark.parametrize("body", [
    "class C(Base):\n    a: int = 1\n    b: int\n",          # a non-default after a default
    "class C(Base):\n    _a: int\n",                           # underscore field
    "class C(Base):\n    a: int\n    def _make(self): pass\n",  # a namedtuple method
    "class C(Base):\n    a: int\n    def __new__(cls): pass\n",
    "class C(Base):\n    a: int\n    __slots__ = ('x',)\n",
])
def test_refused_alike(body: str) -> None:
    outcomes = []
    for base in (record.NamedTuple, typing.NamedTuple):
        outcomes.append(_outcome(lambda base=base: exec(compile(
            "from __future__ import annotations\n" + body, "<case>", "exec"), {"Base": base})))
    assert outcomes[0] == outcomes[1] and outcomes[0][0] != "ok"


def test_subclass_of_a_record_tuple() -> None:
    R, T = _both(PLAIN)
    for C in (R, T):
        class Sub(C):                      # type: ignore[misc, valid-type]
            def more(self) -> int:
                return self.a + 1
        assert Sub(1).more() == 2 and Sub(1) == C(1) and Sub._fields == ("a", "b", "c")


def test_the_class_is_made_by_record_not_typing() -> None:
    R, T = _both(PLAIN)
    assert R.__new__ is not T.__new__
    assert "Base" not in [k.__name__ for k in R.__mro__]
