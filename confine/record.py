"""`dataclass`, `field` and `NamedTuple` for confine's own records, cheaper to define.

The standard decorator compiles five or six functions per class (an exec each)
and calls inspect.signature for a class without a docstring: for the ~50
records a `confine exec` imports that was a fifth of its start. Here the
methods that read the fields (repr, eq, hash, the frozen guard) are shared
functions driven by per-class name tuples, and `__init__` is compiled on first
construction, so a class that is only imported costs no compile at all.

The result is a dataclass to the standard library: `__dataclass_fields__`
holds real `dataclasses.Field` objects, so `dataclasses.fields`, `replace`,
`asdict` and `is_dataclass` work unchanged, and instances compare, hash and
print as the standard decorator's would (tests/unit/test_record.py checks both
side by side). Only what confine uses is supported: `frozen`, field defaults,
`field(default=, default_factory=, repr=, compare=, hash=)` and
`__post_init__`; anything else (ClassVar, InitVar, KW_ONLY, other options) is
refused at definition, and a Python whose dataclasses module lacks what this
relies on gets the standard decorator.

`NamedTuple` likewise: `class C(NamedTuple)` gives the class typing.NamedTuple
would (tests/unit/test_record_namedtuple.py), without a ForwardRef compiled per
annotation and with `__new__` compiled on first construction.
"""
from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from dataclasses import MISSING, Field, FrozenInstanceError, field
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, TypeVar

__all__ = ["dataclass", "field", "NamedTuple"]

T = TypeVar("T")

_FIELD = getattr(dataclasses, "_FIELD", None)
_FIELDS = getattr(dataclasses, "_FIELDS", "__dataclass_fields__")
_PARAMS = getattr(dataclasses, "_PARAMS", "__dataclass_params__")
try:
    from _collections import _tuplegetter  # what collections.namedtuple uses
except ImportError:                                 # pragma: no cover - other Pythons
    def _tuplegetter(index: int, doc: str) -> Any:
        return property(itemgetter(index), doc=doc)
_HAS_FACTORY = object()            # a factory field's default in the generated __init__
_UNSUPPORTED = ("ClassVar", "InitVar", "KW_ONLY")


class _Params:
    """What dataclasses reads from __dataclass_params__ (a subclass's frozen check)."""
    __slots__ = ("init", "repr", "eq", "order", "unsafe_hash", "frozen", "match_args",
                 "kw_only", "slots", "weakref_slot")

    def __init__(self, frozen: bool) -> None:
        self.init = self.repr = self.eq = self.match_args = True
        self.order = self.unsafe_hash = self.kw_only = self.slots = self.weakref_slot = False
        self.frozen = frozen

    def __repr__(self) -> str:
        return f"_DataclassParams(init=True,repr=True,eq=True,order=False,unsafe_hash=False,frozen={self.frozen})"


def _key(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields' values as a tuple, as dataclasses compares and hashes them."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return lambda obj: ()


@reprlib.recursive_repr()
def _repr(self: Any) -> str:
    cls = self.__class__
    return str(cls.__qualname__) + "(" + ", ".join(
        f"{n}={getattr(self, n)!r}" for n in cls.__record_repr__) + ")"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is self.__class__:
        key = self.__class__.__record_eq__
        return key(self) == key(other)
    return NotImplemented


def _hash(self: Any) -> int:
    return hash(self.__class__.__record_hash__(self))


def _init_source(cls: type, fields: list[Field[Any]], frozen: bool,
                 ns: dict[str, Any]) -> str:
    params, body = [], []
    for f in fields:
        n = f.name
        if f.default is not MISSING:
            ns[f"__r_dflt_{n}"] = f.default
            params.append(f"{n}=__r_dflt_{n}")
            value = n
        elif f.default_factory is not MISSING:
            ns[f"__r_fact_{n}"] = f.default_factory
            params.append(f"{n}=__r_has_factory")
            value = f"__r_fact_{n}() if {n} is __r_has_factory else {n}"
        else:
            params.append(n)
            value = n
        body.append(f"  __r_setattr(self, {n!r}, {value})" if frozen else f"  self.{n} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    return (f"def __init__(self, {', '.join(params)}) -> None:\n" + "\n".join(body or ["  pass"])
            + "\n")


def _lazy_init(cls: Any, fields: list[Field[Any]], frozen: bool) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        ns: dict[str, Any] = {"__r_has_factory": _HAS_FACTORY, "__r_setattr": object.__setattr__,
                              "__builtins__": __builtins__}
        exec(_init_source(cls, fields, frozen, ns), ns)  # noqa: S102 - our own field names
        real = ns["__init__"]
        real.__qualname__ = f"{cls.__qualname__}.__init__"
        cls.__init__ = real
        real(self, *args, **kwargs)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    return __init__


def _frozen_guard(cls: Any, names: frozenset[str]) -> tuple[Callable[..., None], Callable[..., None]]:
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return __setattr__, __delattr__


def _unsupported(ann: Any) -> bool:
    if isinstance(ann, str):
        return ann.split("[", 1)[0].rsplit(".", 1)[-1].strip() in _UNSUPPORTED
    return getattr(getattr(ann, "__origin__", ann), "_name", None) in _UNSUPPORTED \
        or type(ann).__name__ in ("InitVar", "_KW_ONLY_TYPE")


def _process(cls: Any, frozen: bool) -> Any:
    fields: dict[str, Field[Any]] = {}
    for b in cls.__mro__[-1:0:-1]:
        base = getattr(b, _FIELDS, None)
        if base:
            if getattr(getattr(b, _PARAMS, None), "frozen", frozen) != frozen:
                raise TypeError("cannot inherit frozen dataclass from a non-frozen one"
                                if frozen else
                                "cannot inherit non-frozen dataclass from a frozen one")
            fields.update(base)
    own_ann = cls.__dict__.get("__annotations__")
    if own_ann is None:                   # annotations made on first access (3.14)
        own_ann = getattr(cls, "__annotations__", {})
    for name, ann in own_ann.items():
        if _unsupported(ann):
            raise TypeError(f"{cls.__qualname__}.{name}: confine.record does not support {ann!r}")
        default = cls.__dict__.get(name, MISSING)
        if isinstance(default, Field):
            f = default
            if f.init is not True or getattr(f, "kw_only", MISSING) not in (MISSING, False):
                raise TypeError(f"{cls.__qualname__}.{name}: confine.record supports only "
                                "default, default_factory, repr, compare and hash")
            if f.default is MISSING:
                delattr(cls, name)
            else:
                setattr(cls, name, f.default)
        else:
            f = field(default=default)
        if f.default is not MISSING and f.default.__class__.__hash__ is None:
            raise ValueError(f"mutable default {type(f.default)} for field {name} is not "
                             "allowed: use default_factory")
        f.name, f.type = name, ann
        f._field_type = _FIELD  # type: ignore[attr-defined]
        if hasattr(f, "kw_only"):
            f.kw_only = False
        fields[name] = f
    for name, value in cls.__dict__.items():
        if isinstance(value, Field) and name not in fields:
            raise TypeError(f"{name!r} is a field but has no type annotation")
    listed = list(fields.values())
    seen_default = False
    for f in listed:
        if f.default is MISSING and f.default_factory is MISSING:
            if seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        else:
            seen_default = True
    setattr(cls, _FIELDS, fields)
    setattr(cls, _PARAMS, _Params(frozen))
    own = cls.__dict__
    if "__init__" not in own:
        cls.__init__ = _lazy_init(cls, listed, frozen)
    cls.__record_repr__ = tuple(f.name for f in listed if f.repr)
    if "__repr__" not in own:
        cls.__repr__ = _repr
    compared = tuple(f.name for f in listed if f.compare)
    cls.__record_eq__ = _key(compared)
    if "__eq__" not in own:
        cls.__eq__ = _eq
    class_hash = own.get("__hash__", MISSING)
    explicit_hash = not (class_hash is MISSING or (class_hash is None and "__eq__" in own))
    if not explicit_hash:
        if frozen:
            cls.__record_hash__ = _key(tuple(
                f.name for f in listed if (f.compare if f.hash is None else f.hash)))
            cls.__hash__ = _hash
        else:
            cls.__hash__ = None
    if frozen:
        if "__setattr__" in own or "__delattr__" in own:
            raise TypeError(f"cannot overwrite __setattr__/__delattr__ in {cls.__name__}")
        cls.__setattr__, cls.__delattr__ = _frozen_guard(
            cls, frozenset(fields))
    if "__match_args__" not in own:
        cls.__match_args__ = tuple(fields)  # type: ignore[misc]
    if getattr(cls, "__doc__", None) is None:
        cls.__doc__ = cls.__name__ + "(" + ", ".join(
            f"{f.name}: {f.type}" for f in listed) + ")"
    return cls


def _lazy_new(fields: tuple[str, ...], defaults: tuple[Any, ...],
              owner: list[Any]) -> Callable[..., Any]:
    """`__new__` as collections.namedtuple compiles it, compiled on first use."""
    def __new__(_cls: Any, *args: Any, **kwargs: Any) -> Any:
        cls = owner[0]
        arg_list = ", ".join(fields) + ("," if len(fields) == 1 else "")
        real = eval(f"lambda _cls, {arg_list}: _tuple_new(_cls, ({arg_list}))",  # noqa: S307
                    {"_tuple_new": tuple.__new__, "__builtins__": {}})
        real.__name__, real.__qualname__ = "__new__", f"{cls.__name__}.__new__"
        real.__doc__ = f"Create new instance of {cls.__name__}({arg_list})"
        if defaults:
            real.__defaults__ = defaults
        cls.__new__ = staticmethod(real)
        return real(_cls, *args, **kwargs)
    return __new__


class _TupleMethods(tuple):  # type: ignore[type-arg]
    """What collections.namedtuple makes for each class, shared: they read `_fields`."""
    _fields: tuple[str, ...]

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        result = tuple.__new__(cls, iterable)
        if len(result) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(result)}")
        return result

    def _replace(self, /, **kwds: Any) -> Any:
        result = self._make(map(kwds.pop, self._fields, self))
        if kwds:
            raise ValueError(f"Got unexpected field names: {list(kwds)!r}")
        return result

    def __repr__(self) -> str:
        return self.__class__.__name__ + "(" + ", ".join(
            f"{n}={v!r}" for n, v in zip(self._fields, self, strict=False)) + ")"

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(self._fields, self, strict=False))

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)


_SHARED = ("_make", "_replace", "__repr__", "_asdict", "__getnewargs__")
_PROHIBITED = frozenset({"__new__", "__init__", "__slots__", "__getnewargs__", "_fields",
                         "_field_defaults", "_make", "_replace", "_asdict", "_source"})


class _NamedTupleMeta(type):
    """`class C(NamedTuple)` made as typing makes it (a plain tuple subclass with
    the same fields, methods, defaults and errors) without its per-class costs,
    140 us a class for the 21 the exec path defines: a ForwardRef compiled for
    each annotation (kept as written here) and an eval of `__new__` (on first
    use here). tests/unit/test_record.py compares the two."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any]) -> Any:
        if not bases:                                   # NamedTuple itself
            return super().__new__(mcls, name, bases, ns)
        if bases != (NamedTuple,):
            raise TypeError("confine.record.NamedTuple: no other base")
        annotations = ns.get("__annotations__", {})
        fields = tuple(sys.intern(n) for n in annotations)
        defaults: dict[str, Any] = {}
        for n in fields:
            if n.startswith("_"):
                raise ValueError(f"Field names cannot start with an underscore: {n!r}")
            if n in ns:
                defaults[n] = ns[n]
            elif defaults:
                raise TypeError(f"Non-default namedtuple field {n} cannot follow default field"
                                f"{'s' if len(defaults) > 1 else ''} {', '.join(defaults)}")
        body = {k: v for k, v in ns.items() if k not in fields and k != "__annotations__"}
        for key in body:
            if key in _PROHIBITED:
                raise AttributeError("Cannot overwrite NamedTuple attribute " + key)
        if body.get("__doc__") is None:
            body["__doc__"] = f"{name}({', '.join(fields)}{',' if len(fields) == 1 else ''})"
        for key in _SHARED:
            body.setdefault(key, _TupleMethods.__dict__[key])
        owner: list[Any] = []
        body.update(__slots__=(), _fields=fields, _field_defaults=defaults,
                    __match_args__=fields, __new__=_lazy_new(fields, tuple(defaults.values()),
                                                             owner))
        for i, n in enumerate(fields):
            body[n] = _tuplegetter(i, sys.intern(f"Alias for field number {i}"))
        cls = type(name, (tuple,), body)
        cls.__annotations__ = annotations
        owner.append(cls)
        return cls


if TYPE_CHECKING:                  # type checkers know the standard decorator's fields
    from dataclasses import dataclass
    from typing import NamedTuple
else:
    class NamedTuple(metaclass=_NamedTupleMeta):
        """`class C(NamedTuple)`, as typing.NamedTuple's (see _NamedTupleMeta)."""

    def dataclass(cls=None, /, *, frozen=False):
        """`@dataclass` or `@dataclass(frozen=True)`, as the standard library's."""
        def wrap(c):
            if _FIELD is None:            # a dataclasses without what this relies on
                return dataclasses.dataclass(frozen=frozen)(c)
            return _process(c, frozen)
        return wrap if cls is None else wrap(cls)
