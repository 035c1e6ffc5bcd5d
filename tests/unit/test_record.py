"""confine.record makes the same dataclasses as the standard decorator, cheaper.

Each case defines one class twice, with confine.record and with dataclasses,
and checks they behave alike: construction and its errors, defaults and
factories, __post_init__, repr, eq, hash, the frozen guard, and the module
functions (fields, replace, asdict, is_dataclass). The last cases build the
policy and plan of every built-in profile in two interpreters, one with
confine's records and one with the standard decorator, and compare them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from confine import record


def _both(body: str, frozen: bool = False) -> tuple[Any, Any]:
    """The class `body` defines, made by confine.record and by dataclasses."""
    made = []
    for deco in (record.dataclass, dataclasses.dataclass):
        ns: dict[str, Any] = {"field": record.field, "deco": deco}
        src = f"@deco(frozen={frozen})\n" + textwrap.dedent(body)
        exec(compile("from __future__ import annotations\n" + src, "<case>", "exec"), ns)
        made.append(ns["C"])
    return made[0], made[1]


PLAIN = """
class C:
    a: int
    b: str = "x"
    c: list[int] = field(default_factory=list)
    d: tuple[int, ...] = field(default=(), compare=False, repr=False)
"""


def _same(x: Any, y: Any) -> None:
    assert repr(x) == repr(y)
    assert dataclasses.asdict(x) == dataclasses.asdict(y)
    assert dataclasses.astuple(x) == dataclasses.astuple(y)


def test_the_decorated_class_is_a_record_not_the_standard_one():
    R, D = _both(PLAIN)
    assert "__record_eq__" in vars(R) and "__record_eq__" not in vars(D)
    assert dataclasses.is_dataclass(R) and dataclasses.is_dataclass(R(1))


@pytest.mark.parametrize("frozen", [False, True])
def test_construction_defaults_factories_repr(frozen):
    R, D = _both(PLAIN, frozen)
    for args, kw in [((1,), {}), ((1, "y"), {}), ((), {"a": 2, "c": [3]}),
                     ((1, "q", [1], (2,)), {})]:
        _same(R(*args, **kw), D(*args, **kw))
    assert R(1).c is not R(1).c                   # a fresh list per instance
    assert [f.name for f in dataclasses.fields(R)] == [f.name for f in dataclasses.fields(D)]
    assert [(f.default, f.default_factory, f.repr, f.compare, f.type) for f in dataclasses.fields(R)] \
        == [(f.default, f.default_factory, f.repr, f.compare, f.type) for f in dataclasses.fields(D)]
    assert R.b == D.b == "x" and "c" not in vars(R) and "c" not in vars(D)
    assert R.__match_args__ == D.__match_args__


@pytest.mark.parametrize("call", [lambda C: C(), lambda C: C(1, "b", [], (), 5),
                                  lambda C: C(1, a=2), lambda C: C(1, e=3)])
def test_bad_calls_fail_alike(call):
    R, D = _both(PLAIN)
    with pytest.raises(TypeError):
        call(D)
    with pytest.raises(TypeError):
        call(R)


@pytest.mark.parametrize("frozen", [False, True])
def test_eq_and_hash(frozen):
    R, D = _both(PLAIN, frozen)
    assert R(1, "x", [1], (1,)) == R(1, "x", [1], (2,))   # d is not compared
    assert R(1) != R(2) and R(1) != D(1)
    assert (R(1) == 1) is False and R(1).__eq__(1) is NotImplemented
    if frozen:
        Rt, Dt = _both("class C:\n    a: int\n    b: str = 'x'\n    d: int = field(default=0, compare=False)\n",
                       True)
        assert hash(Rt(1, "y", 5)) == hash(Dt(1, "y", 6)) == hash((1, "y"))
        assert len({Rt(1), Rt(1, d=9), Rt(2)}) == 2
        one, one_d = _both("class C:\n    a: str\n", True)
        assert hash(one("z")) == hash(one_d("z")) == hash(("z",))
    else:
        assert R.__hash__ is None and D.__hash__ is None
        with pytest.raises(TypeError):
            hash(R(1))


def test_frozen_guard():
    R, D = _both(PLAIN, True)
    for obj in (R(1), D(1)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.a = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.other = 2
        with pytest.raises(dataclasses.FrozenInstanceError):
            del obj.a
    assert R(1).a == 1


def test_replace_runs_post_init():
    body = """
class C:
    a: int
    b: int = 0

    def __post_init__(self):
        if self.a < 0:
            raise ValueError("negative")
"""
    for frozen in (False, True):
        R, D = _both(body, frozen)
        for C in (R, D):
            x = dataclasses.replace(C(1), b=2)
            assert (x.a, x.b) == (1, 2)
            with pytest.raises(ValueError):
                C(-1)
            with pytest.raises(ValueError):
                dataclasses.replace(C(1), a=-1)


def test_own_methods_are_kept():
    body = """
class C:
    a: int

    def __repr__(self):
        return "mine"

    def __eq__(self, other):
        return True
"""
    R, D = _both(body, True)
    assert repr(R(1)) == repr(D(1)) == "mine"
    assert R(1) == R(2) and D(1) == D(2)
    assert hash(R(1)) == hash(D(1)) == hash((1,))         # frozen: a hash from the fields


def test_recursive_repr():
    R, D = _both("class C:\n    a: object = None\n")
    r, d = R(), D()
    r.a, d.a = r, d
    assert repr(r) == repr(d)


@pytest.mark.parametrize("body, exc", [
    ("class C:\n    a: int = 0\n    b: int\n", TypeError),          # default before non-default
    ("class C:\n    a: list = []\n", ValueError),                    # mutable default
    ("class C:\n    a: ClassVar[int] = 0\n", TypeError),             # not supported: refused
    ("class C:\n    a: InitVar[int] = 0\n", TypeError),
    ("class C:\n    a: int = field(default=0, init=False)\n", TypeError),
])
def test_what_it_cannot_make_is_refused(body, exc):
    record.dataclass(type("X", (), {}))   # the control: the decorator works on a bare class
    ns: dict[str, Any] = {"field": record.field, "deco": record.dataclass}
    with pytest.raises(exc):
        exec(compile("from __future__ import annotations\n@deco\n" + body, "<case>", "exec"), ns)


def test_frozen_and_plain_do_not_mix():
    base = record.dataclass(frozen=True)(type("B", (), {"__annotations__": {"a": "int"}}))
    with pytest.raises(TypeError):
        record.dataclass(type("S", (base,), {"__annotations__": {"b": "int"}}))
    sub = record.dataclass(frozen=True)(type("S", (base,), {"__annotations__": {"b": "int"},
                                                            "b": 0}))
    assert [f.name for f in dataclasses.fields(sub)] == ["a", "b"] and sub(1).b == 0


# The policy and plan of every built-in profile, with records and with the standard decorator.
_BUILD = r"""
import dataclasses, json, sys
stdlib = sys.argv[1] == "stdlib"
if stdlib:                                # every record below is made by dataclasses (typing)
    import types
    stub = types.ModuleType("confine.record")
    import typing
    stub.dataclass, stub.field = dataclasses.dataclass, dataclasses.field
    stub.NamedTuple = typing.NamedTuple
    sys.modules["confine.record"] = stub
from confine.plan import HostFacts, compile
from confine.plan.identity import Identity
from confine.policy import load
from confine.policy.model import Policy
wd, home, tmp = sys.argv[2:5]
assert ("__record_eq__" in vars(Policy)) is not stdlib
out = {}
hosts = {"full": HostFacts(landlock_abi=7, seccomp_filter=True, seccomp_user_notif=True,
                           namespaces=True, apparmor=True, selinux=False),
         "abi3": HostFacts(landlock_abi=3, seccomp_filter=True, seccomp_user_notif=True,
                           namespaces=False, apparmor=False, selinux=False)}
for name in load.builtin_names():
    pol = load.load(name, workdir=wd, home=home, tmp=tmp)
    out[name] = {"policy": repr(pol), "policy_dict": repr(dataclasses.asdict(pol)),
                 "policy_hash": hash(pol)}
    for hname, host in hosts.items():
        for root in (False, True):
            ident = Identity(uid=1234, gid=1234, user="agent", home=home, switch=root,
                             started_as_root=root)
            plan = compile(pol, ["true"], ident, host, parent_env={"PATH": "/usr/bin"})
            key = f"plan {hname} root={root}"
            out[name][key] = repr(plan)
            out[name][key + " dict"] = repr(dataclasses.asdict(plan))
            out[name][key + " eq"] = plan == dataclasses.replace(plan)
print(json.dumps(out))
"""


def test_every_builtin_profile_gives_the_same_policy_and_plan(tmp_path):
    dirs = [str(tmp_path / n) for n in ("wd", "home", "tmp")]
    for d in dirs:
        os.mkdir(d)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    got = {}
    for how in ("record", "stdlib"):
        r = subprocess.run([sys.executable, "-c", _BUILD, how, *dirs], capture_output=True,
                           text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        got[how] = json.loads(r.stdout)
    assert set(got["record"]) >= {"default", "strict", "claude-code", "codex"}
    assert got["record"] == got["stdlib"]
