"""YAML profile -> validated, immutable Policy.

Errors name the file, the line and the key, and suggest the nearest valid key,
because a profile typo that silently drops a rule is a security bug.
"""
from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..errors import ProfileError
from ..paths import is_under
from ..record import dataclass
from . import approvals, copied, fields, privatetmp, realpaths, runlater, secrets, ssh_agent, stateroots, workdir_mode
from . import credentials as _creds
from . import logins as _logins
from .model import Env, Limits, Network, PathGrant, Policy, Scope, Seccomp
from .patterns import DEFAULT_PATTERNS, compile_patterns

# section -> key -> kind.  Kinds: "str", "paths", "ports", "names", "envset", "bool".
SCHEMA: dict[str, object] = {
    "description": "str",
    "extends": "str",
    "filesystem": {"read": "paths", "write": "paths", "devices": "paths", "deny": "paths",
                   "read_only": "paths", "state": "paths",
                   "state_roots": "stateroots", "private_tmp": "tmpnames",
                   "copied": "copied"},
    "network": {"connect_tcp": "ports", "bind_tcp": "ports", "allow": "hosts",
                "deny": "denyhosts", "include": "hostsets", "allowed_ips": "nets",
                "default": "netdefault", "upstream_ca": "paths"},
    "env": {"pass": "envnames", "set": "envset"},
    "seccomp": {"deny": "names", "unsafe_allow": "names"},
    "scope": {"signals": "bool", "abstract_unix": "bool"},
    "unix_sockets": {"allow": "paths"},
    "protected": "patterns",
    "approvals": "approvals",
    workdir_mode.KEY: "workdirmode",
    "credentials": "credentials",
    "logins": "logins",
    "limits": {"processes": "count", "memory": "size", "open_files": "count",
               "file_size": "size", "tmp_size": "size", "shm_size": "size"},
    "ssh_agent": ssh_agent.SCHEMA,
}

# Patterns for YAML values only, as strings: re compiles them on first use (a built-in
# profile is read parsed and never needs them).
_SIZE = r"^([0-9]+)\s*([KMGT]?)(i?B)?$"
_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# Far above any host: a typo with an extra digit is an error, not "unlimited".
_MAX_COUNT = 1 << 30
_MAX_SIZE = 1 << 60

_VAR = re.compile(r"\{([^{}]*)\}")
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*\*?$"
_SYSCALL = r"^[a-z0-9_:]+$"


# PyYAML, imported by the first profile parsed from YAML: a built-in profile whose
# file is the text policy/_shipped.py was made from is read from there, and importing
# PyYAML (its regexes included) was a tenth of a start.
yaml: Any = None
# libyaml's parser when PyYAML has it (20x faster: profiles are read on every
# run); the same nodes and marks either way.
_LOADER: Any = None


def _yaml() -> Any:
    global yaml, _LOADER
    if yaml is None:
        import yaml as y  # type: ignore[import-untyped]
        _LOADER = getattr(y, "CSafeLoader", y.SafeLoader)
        yaml = y
    return yaml


def _construct(node: Any) -> Any:
    # A fresh constructor (no reader: cheap) per scalar: one would remember every node.
    return yaml.constructor.SafeConstructor().construct_object(node)


@dataclass(frozen=True)
class Item:
    """A value with the place it was written, for error messages and --dry-run."""
    value: object
    where: str


@functools.cache
def builtin_dir() -> Path:
    # confine.profiles is a plain package (pyproject's package-dir): the directory beside
    # confine/policy, found without importlib.resources (and the zipfile it imports)
    installed = Path(__file__).resolve().parents[1] / "profiles"
    if (installed / "__init__.py").is_file():
        return installed
    return Path(__file__).resolve().parents[2] / "profiles"   # running from a source checkout


def user_dirs() -> list[Path]:
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return [Path(xdg) / "confine" / "profiles", Path("/etc/confine/profiles")]


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml") if not p.stem.startswith("_"))


def find_profile(ref: str, relative_to: Path | None = None) -> Path:
    """A profile reference is a file path (contains '/' or ends in .yaml) or a name."""
    if "/" in ref or ref.endswith((".yaml", ".yml")):
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        try:
            st = os.stat(p)
        except FileNotFoundError:
            raise ProfileError(f"profile file {ref} does not exist") from None
        except OSError as e:
            raise ProfileError(f"cannot read profile {ref}: {e.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"profile file {ref} is not a regular file")
        return p
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", ref):
        raise ProfileError(f"invalid profile name {ref!r}")
    for d in user_dirs() + [builtin_dir()]:
        p = d / f"{ref}.yaml"
        if p.is_file():
            return p
    import difflib  # only for this message: not on every start
    known = builtin_names()
    near = difflib.get_close_matches(ref, known, n=1)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise ProfileError(f"unknown profile {ref!r}{hint}; built-in profiles: {', '.join(known)}")


class _Parser:
    def __init__(self, path: Path):
        self.path = path
        self.label = path.name if path.parent == builtin_dir() else str(path)
        # every error of the file, not just the first: each key, and each list entry,
        # is checked on its own, and the parse goes on after a bad one
        self.errors: list[str] = []

    def where(self, node: Any) -> str:
        return f"{self.label}:{node.start_mark.line + 1}"

    def fail(self, node: Any, msg: str) -> NoReturn:
        raise ProfileError(f"{self.where(node)}: {msg}")

    def parse(self) -> dict[str, Any]:
        try:
            text = self.path.read_text()
        except OSError as e:
            raise ProfileError(f"cannot read profile {self.path}: {e.strerror}") from None
        if self.path.parent == builtin_dir():
            from . import _shipped
            data = _shipped.parsed(self.path.stem, text, Item)
            if data is not None:
                return data
        return self.parse_text(text)

    def parse_text(self, text: str) -> dict[str, Any]:
        """The profile `text` (read from self.path), parsed and checked."""
        _yaml()
        try:
            root = yaml.compose(text, Loader=_LOADER)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            problem = getattr(e, "problem", None) or str(e)
            raise ProfileError(f"{self.label}{line}: invalid YAML: {problem}") from None
        if root is None:
            return {}
        if not isinstance(root, yaml.MappingNode):
            self.fail(root, "a profile must be a mapping of sections (filesystem:, network:, ...)")
        out = self.mapping(root, SCHEMA, "")
        if self.errors:
            raise ProfileError(self.errors[0], tuple(self.errors[1:]))
        return out

    def mapping(self, node: Any, schema: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for knode, vnode in node.value:
            try:
                self._entry(out, knode, vnode, schema, prefix)
            except ProfileError as e:
                self.errors.append(str(e))
        return out

    def _entry(self, out: dict[str, Any], knode: Any, vnode: Any, schema: Mapping[str, Any],
               prefix: str) -> None:
        if not isinstance(knode, yaml.ScalarNode):
            self.fail(knode, f"{prefix or 'profile'}: keys must be plain names")
        key = knode.value
        full = f"{prefix}{key}"
        if key not in schema:
            self.fail(knode, f"unknown key {full!r}{fields.suggest(key, schema)}")
        if key in out:
            self.fail(knode, f"duplicate key {full!r}")
        kind = schema[key]
        if isinstance(kind, dict):
            if _is_null(vnode):
                out[key] = {}
                return
            if not isinstance(vnode, yaml.MappingNode):
                self.fail(vnode, f"{full!r} must be a mapping with keys {', '.join(kind)}")
            out[key] = self.mapping(vnode, kind, f"{full}.")
        else:
            out[key] = self.value(vnode, kind, full)

    def scalar(self, node: Any, full: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            self.fail(node, f"{full!r} expects a single value here")
        return _construct(node)

    def value(self, node: Any, kind: str, full: str) -> Any:
        if kind == "str":
            v = self.scalar(node, full)
            if not isinstance(v, str):
                self.fail(node, f"{full!r} must be a string")
            return Item(v, self.where(node))
        if kind == "bool":
            v = self.scalar(node, full)
            if not isinstance(v, bool):
                self.fail(node, f"{full!r} must be true or false")
            return Item(v, self.where(node))
        if kind == "approvals":
            return approvals.parse(self, node, full)
        if kind in ("count", "size"):
            return Item(self.limit(node, kind, full), self.where(node))
        if kind == "credentials":
            return _creds.parse(self, node, full, Item)
        if kind == "stateroots":
            return stateroots.parse(self, node, full, yaml=yaml, path_error=_path_error, item=Item)
        if kind == "logins":
            return _logins.parse(self, node, full, Item)
        if kind == "copied":
            return copied.parse(self, node, full, yaml=yaml, path_error=_path_error, item=Item)
        if kind == "netdefault":
            v = self.scalar(node, full)
            if v not in NETWORK_DEFAULTS:
                self.fail(node, f"{full}: {v!r} is not one of {', '.join(NETWORK_DEFAULTS)}")
            return Item(v, self.where(node))
        if kind == "workdirmode":
            v = self.scalar(node, full)
            why = workdir_mode.problem(v)
            if why is not None:
                self.fail(node, f"{full}: {why}")
            return Item(v, self.where(node))
        if kind == "envset":
            if _is_null(node):
                return {}
            if not isinstance(node, yaml.MappingNode):
                self.fail(node, f"{full!r} must be a mapping NAME: value")
            out: dict[str, Item] = {}
            for k, v in node.value:
                name = self.scalar(k, full)
                if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    self.fail(k, f"{full}: invalid environment variable name {name!r}")
                val = self.scalar(v, f"{full}.{name}")
                if isinstance(val, bool) or val is None or isinstance(val, (list, dict)):
                    self.fail(v, f"{full}.{name}: value must be a string or number")
                out[name] = Item(str(val), self.where(k))
            return out
        # list kinds
        if _is_null(node):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.fail(node, f"{full!r} must be a list")
        items: list[Item] = []
        for el in node.value:
            try:
                self._element(items, el, kind, full)
            except ProfileError as e:
                self.errors.append(str(e))
        return items

    def _element(self, items: list[Item], el: Any, kind: str, full: str) -> None:
        if (isinstance(el, yaml.MappingNode) and len(el.value) == 1
                and isinstance(el.value[0][0], yaml.ScalarNode) and _is_null(el.value[0][1])):
            # `[/usr, ?/opt]`: in a flow list YAML reads `?` as "mapping key follows"
            key = el.value[0][0].value
            self.fail(el, f"{full}: '?{key}' inside [...] is read by YAML as a mapping key, "
                          f"not an optional path; quote it ('?{key}') or write one entry "
                          f"per line (- ?{key})")
        v = self.scalar(el, full)
        if kind == "ports":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
                self.fail(el, f"{full}: {v!r} is not a TCP port (0-65535)")
        elif kind == "paths":
            why = _path_error(v)
            if why:
                self.fail(el, f"{full}: {why}")
        elif kind == "tmpnames":
            why = privatetmp.name_error(v)
            if why:
                self.fail(el, f"{full}: {why}")
        elif kind == "envnames":
            if not isinstance(v, str) or not re.match(_ENV_NAME, v):
                self.fail(el, f"{full}: {v!r} is not an environment variable name "
                              "(NAME or PREFIX_*)")
        elif kind == "patterns":
            try:
                # in context: `!.idea/` removes a default or an earlier entry
                compile_patterns(list(DEFAULT_PATTERNS) + [str(i.value) for i in items]
                                 + [v if isinstance(v, str) else str(v)])
            except ValueError as e:
                self.fail(el, f"{full}: {e}")
        elif kind == "names":
            if not isinstance(v, str) or not re.match(_SYSCALL, v):
                self.fail(el, f"{full}: {v!r} is not a syscall or group name")
        elif kind in ("hosts", "denyhosts", "hostsets", "nets"):
            why = host_entry_error(kind, v)
            if why is not None:
                self.fail(el, f"{full}: {why}")
        elif kind.startswith("ssh"):
            why = ssh_agent.element_error(kind, v)
            if why is not None:
                self.fail(el, f"{full}: {why}")
        items.append(Item(v, self.where(el)))

    def limit(self, node: Any, kind: str, full: str) -> int | None:
        """A count (4096) or a size (bytes, or 512M, 4G: powers of 1024), or
        `unlimited` (None). Anything else, zero included, is an error."""
        v = self.scalar(node, full)
        if v == "unlimited":
            return None
        unit = "a count" if kind == "count" else "a size (bytes, or with K, M, G, T: 512M, 4G)"
        if isinstance(v, bool) or v is None:
            self.fail(node, f"{full}: {v!r} is not {unit} or unlimited")
        if kind == "count":
            if not isinstance(v, int) or not 0 < v <= _MAX_COUNT:
                self.fail(node, f"{full}: {v!r} is not {unit} (1 to {_MAX_COUNT}) or unlimited")
            return v
        if isinstance(v, int):
            n = v
        else:
            m = re.match(_SIZE, str(v).strip(), re.IGNORECASE)
            if not isinstance(v, str) or m is None:
                self.fail(node, f"{full}: {v!r} is not {unit} or unlimited")
            n = int(m.group(1)) * _UNIT[m.group(2).upper()]
        if not 0 < n <= _MAX_SIZE:
            self.fail(node, f"{full}: {v!r} is not {unit} (more than 0, at most 1024P) "
                            "or unlimited")
        return n


NETWORK_DEFAULTS = ("deny", "ask")


def _path_error(v: object) -> str | None:
    """Why a profile's path entry is not one, or None."""
    if not isinstance(v, str) or not v.strip("?"):
        return f"{v!r} is not a path"
    for var in _VAR.findall(v):
        if var not in ("workdir", "home", "tmp"):
            return f"unknown variable {{{var}}} in {v!r} (known: {{workdir}}, {{home}}, {{tmp}})"
    bare = v.lstrip("?")
    if not (bare.startswith(("/", "~/", "{")) or bare == "~"):
        return f"{v!r} must be absolute or start with ~, {{workdir}}, {{home}} or {{tmp}}"
    return None


def host_entry_error(kind: str, v: object) -> str | None:
    """Why `v` is not a valid entry of network.allow/deny/include/allowed_ips (the
    gateway's own grammar gives the reason), or None."""
    if not isinstance(v, str) or not v.strip():
        return f"{v!r} is not a host entry (a name, *.suffix, an address or network, " \
               "with an optional :port)"
    from ..gateway import rules as host_rules  # a profile with host entries only
    try:
        if kind == "hosts":
            host_rules.parse_rule(v)
        elif kind == "denyhosts":
            host_rules.parse_rule(v, default_port=None)
        elif kind == "hostsets":
            host_rules.load_set(v)
        else:
            host_rules.Rules.parse(allowed_ips=[v])
    except host_rules.RuleError as e:
        return str(e)
    return None


def allow_hosts(entries: Iterable[str]) -> tuple[str, ...]:
    """--allow-host entries, validated like network.allow (one error line naming the flag)."""
    out = []
    for e in entries:
        why = host_entry_error("hosts", e)
        if why is not None:
            raise ProfileError(f"--allow-host {e}: {why}")
        out.append(e)
    return tuple(out)


def _is_null(node: Any) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        if k == "extends":
            continue
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        elif isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = out[k] + v
        else:
            out[k] = v
    return out


def read_layers(ref: str) -> tuple[dict[str, Any], list[Path]]:
    """The merged raw profile (ancestors first) and the files it came from."""
    chain: list[Path] = []
    raw: dict[str, Any] = {}
    p = find_profile(ref)
    layers = []
    while True:
        rp = p.resolve()
        if rp in chain:
            raise ProfileError(f"{p}: 'extends' forms a cycle: "
                               + " -> ".join(str(c) for c in chain + [rp]))
        chain.append(rp)
        data = _Parser(p).parse()
        layers.append(data)
        parent = data.get("extends")
        if parent is None:
            break
        try:
            p = find_profile(parent.value, relative_to=p.parent)
        except ProfileError as e:
            raise ProfileError(f"{parent.where}: extends: {e}") from None
    for data in reversed(layers):
        raw = _merge(raw, data)
    return raw, chain


def expand(template: str, vars: dict[str, str]) -> str:
    s = template
    if s == "~" or s.startswith("~/"):
        s = vars["home"] + s[1:]
    return _VAR.sub(lambda m: vars[m.group(1)], s)


def _grants(items: list[Item], vars: dict[str, str], *, must_exist: bool) -> tuple[PathGrant, ...]:
    out = []
    seen = set()
    for it in items:
        text = str(it.value)
        optional = text.startswith("?")
        template = text.lstrip("?")
        path = os.path.normpath(expand(template, vars))
        real = realpaths.realpath(path)
        if must_exist and not optional and not os.path.exists(real):
            raise ProfileError(f"{it.where}: {template} ({path}) does not exist; "
                               "prefix it with '?' if it may be missing")
        if optional and not os.path.exists(real):
            continue
        if real in seen:
            continue
        seen.add(real)
        out.append(PathGrant(path=real, template=template, source=it.where, optional=optional))
    return tuple(out)


def _deny(items: list[Item], vars: dict[str, str]) -> tuple[PathGrant, ...]:
    """Deny entries may be globs and need not exist; both the spelled and the
    resolved path are kept so a symlinked secret is carved out either way."""
    import glob as _glob
    out: dict[str, PathGrant] = {}
    for it in items:
        template = str(it.value).lstrip("?")
        path = os.path.normpath(expand(template, vars))
        paths = _glob.glob(path) if _glob.has_magic(path) else [path]
        for p in paths:
            for q in {p, realpaths.realpath(p)}:
                out.setdefault(q, PathGrant(path=q, template=template, source=it.where,
                                            optional=True))
    return tuple(out.values())


def load(ref: str, *, workdir: str, home: str, tmp: str,
         extra_read: Iterable[str] = (), extra_write: Iterable[str] = (),
         create_state: bool = False, extra_allow: Iterable[str] = (),
         layers: tuple[dict[str, Any], list[Path]] | None = None,
         extra_credentials: Iterable[str] = ()) -> Policy:
    """create_state: make the profile's missing `state:` entries (a run, not a check);
    extra_allow: --allow-host entries, added to network.allow; layers: read_layers'
    answer made by the caller (a nested run's profile, sent as text);
    extra_credentials: --credential NAME=HOST,... entries."""
    raw, chain = read_layers(ref) if layers is None else layers
    vars = {"workdir": workdir, "home": home, "tmp": tmp}
    home = realpaths.realpath(home)
    fs = raw.get("filesystem", {})
    net = raw.get("network", {})
    env = raw.get("env", {})
    sc = raw.get("seccomp", {})
    scope = raw.get("scope", {})
    lim = {k: v.value for k, v in raw.get("limits", {}).items()}
    cli_read = [Item(p, "--read") for p in extra_read]
    cli_write = [Item(p, "--write") for p in extra_write]
    for it in cli_read + cli_write:
        if not os.path.isabs(os.path.expanduser(str(it.value))):
            raise ProfileError(f"{it.where} {it.value}: path must be absolute")
    cli_read = [Item(os.path.expanduser(str(i.value)), i.where) for i in cli_read]
    cli_write = [Item(os.path.expanduser(str(i.value)), i.where) for i in cli_write]
    # A login file (logins:) is not denied here: its directory is usually a state root,
    # which a deny inside would carve (no new name there any more); the run binds the
    # placeholder copy over the real file instead, and refuses without a mount namespace.
    deny = _deny(secrets.mandatory_items(Item) + fs.get("deny", []), vars)
    read = _grants(fs.get("read", []) + cli_read, vars, must_exist=True)
    read_only = _read_only(fs.get("read_only", []), vars)
    never = runlater.never_writable(home)
    ro = [(g.path, g.source.removeprefix("built-in: ") if g.source.startswith("built-in")
           else f"read_only in {g.source}") for g in read_only]
    state = _state(fs.get("state", []), vars, never, ro, create=create_state)

    def sr_fail(where: str, msg: str) -> NoReturn:
        raise ProfileError(f"{where}: filesystem.state_roots: {msg}")
    sr_items, state_roots = stateroots.resolve(
        fs.get("state_roots", []), lambda t: expand(t, vars), realpaths.realpath,
        [(g.path, g.template, g.source.startswith("built-in")) for g in read_only],
        lambda p: runlater.refusal(p, realpaths.realpath(vars["home"]), never, ro), sr_fail)
    # inside a state root its patterns protect these (checked to cover them): a carve
    # would take from the root the right to make new names
    read_only = tuple(g for g in read_only if not any(
        is_under(g.path, b) for r in state_roots for b in (r.path, r.spelled)))
    copies = copied.resolve(fs.get("copied", []), lambda t: expand(t, vars),
                            realpaths.realpath, os.path.normpath(vars["home"]),
                            lambda where, msg: _fail_at(where, f"filesystem.copied: {msg}"))
    asked = fs.get("write", []) + cli_write + sr_items
    write = _grants([Item("{workdir}", "workdir"), Item("{tmp}", "tmp")] + asked + state,
                    vars, must_exist=True)
    _check_write(write, vars, never, ro)
    _check_not_secret(read + write, deny)
    env_set = {k: v.value for k, v in env.get("set", {}).items()}
    net_default = _network_default(net, raw.get("approvals", {}))
    return Policy(
        name=chain[0].stem,
        description=raw.get("description", Item("", "")).value,
        sources=tuple(str(c) for c in chain),
        workdir=workdir, home=home, tmp=tmp,
        read=read, write=write, read_only=read_only, state_roots=state_roots,
        private_tmp=_strs(fs.get("private_tmp", [])), copied=copies,
        devices=_grants(fs.get("devices", []), vars, must_exist=True),
        deny=deny,
        network=Network(connect_tcp=tuple(sorted({i.value for i in net.get("connect_tcp", [])})),
                        bind_tcp=tuple(sorted({i.value for i in net.get("bind_tcp", [])})),
                        allow=tuple(dict.fromkeys([str(i.value) for i in net.get("allow", [])]
                                                  + list(allow_hosts(extra_allow)))),
                        deny=_strs(net.get("deny", [])), include=_strs(net.get("include", [])),
                        allowed_ips=_strs(net.get("allowed_ips", [])),
                        default=net_default,
                        upstream_ca=_creds.upstream_ca(net.get("upstream_ca", []),
                                                       lambda t: expand(t, vars))),
        credentials=_creds.records(raw.get("credentials", []), tuple(extra_credentials)),
        logins=_logins.records(raw.get("logins", []), expand=lambda t: expand(t, vars)),
        env=Env(passthrough=tuple(dict.fromkeys(i.value for i in env.get("pass", []))),
                set=tuple(sorted(env_set.items()))),
        seccomp=Seccomp(deny=tuple(dict.fromkeys(i.value for i in sc.get("deny", []))),
                        unsafe_allow=tuple(dict.fromkeys(i.value for i in sc.get("unsafe_allow", [])))),
        protected=tuple(i.value for i in raw.get("protected", [])),
        workdir_mode=str(raw.get(workdir_mode.KEY, Item(workdir_mode.SHARED, "")).value),
        unix_sockets=_grants(raw.get("unix_sockets", {}).get("allow", []), vars,
                             must_exist=False),
        limits=Limits(**lim),
        approvals=approvals.build(raw.get("approvals", {}), net_default),
        scope=Scope(signals=scope.get("signals", Item(True, "")).value,
                    abstract_unix=scope.get("abstract_unix", Item(True, "")).value),
        ssh_agent=ssh_agent.build(raw.get("ssh_agent"),
                                  lambda t: os.path.normpath(expand(t, vars))),
    )


def _fail_at(where: str, msg: str) -> NoReturn:
    raise ProfileError(f"{where}: {msg}")


def _network_default(net: dict[str, Any], appr: dict[str, Any]) -> str:
    """network.default and approvals.network are one setting: they may not disagree."""
    said = net.get("default")
    if "network" not in appr:
        return str(said.value) if said is not None else "deny"
    spec = appr["network"]
    if said is not None and said.value != spec.default:
        raise ProfileError(f"{spec.where}: approvals.network: {spec.default} contradicts "
                           f"network.default: {said.value} ({said.where})")
    return str(spec.default)


def _strs(items: list[Item]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(i.value) for i in items))


def _read_only(items: list[Item], vars: dict[str, str]) -> tuple[PathGrant, ...]:
    """The built-in list plus the profile's `filesystem.read_only:` (globs allowed)."""
    import glob as _glob
    out: dict[str, PathGrant] = {}
    home = realpaths.realpath(vars["home"])
    for p, t, why in runlater.read_only_entries(home):
        out.setdefault(p, PathGrant(path=p, template=t, source=f"built-in: {why}",
                                    optional=True))
    for it in items:
        template = str(it.value).lstrip("?")
        path = os.path.normpath(expand(template, vars))
        for q in (_glob.glob(path) if _glob.has_magic(path) else [path]):
            for r in {q, realpaths.realpath(q)}:
                out.setdefault(r, PathGrant(path=r, template=template, source=it.where,
                                            optional=True))
    return tuple(sorted(out.values(), key=lambda g: g.path))


def _refuse(it: Item, path: str, why: str) -> NoReturn:
    raise ProfileError(f"{it.where}: {str(it.value).lstrip('?')} ({path}): not writable: {why}")


def _state(items: list[Item], vars: dict[str, str], never: list[tuple[str, str]],
           ro: list[tuple[str, str]], *, create: bool) -> list[Item]:
    """`filesystem.state:` entries -> optional write items. The agent's own state in a
    directory it may not create names in (a carved one): made empty first, a trailing
    '/' makes a directory, and only where the parent exists."""
    out = []
    for it in items:
        text = str(it.value).lstrip("?")
        path = os.path.normpath(expand(text, vars))
        for p in {path, realpaths.realpath(path)}:
            why = runlater.refusal(p, realpaths.realpath(vars["home"]), never, ro)
            if why:
                _refuse(it, p, why)
        if create and not os.path.lexists(path):
            runlater.make_state(path, directory=text.endswith("/"))
        out.append(Item("?" + text, it.where))
    return out


def _check_write(write: tuple[PathGrant, ...], vars: dict[str, str],
                 never: list[tuple[str, str]], ro: list[tuple[str, str]]) -> None:
    """Refuse a write grant that would hand over the system, $HOME, or files that run
    later (policy/runlater.py); the workdir and tmp have their own checks."""
    for g in write:
        if g.source in ("workdir", "tmp"):
            continue
        it = Item(g.template, g.source)
        spelled = os.path.normpath(expand(g.template, vars))
        for p in dict.fromkeys((g.path, spelled)):
            why = runlater.refusal(p, realpaths.realpath(vars["home"]), never, ro)
            if why:
                _refuse(it, p, why)


def _check_not_secret(grants: tuple[PathGrant, ...], deny: tuple[PathGrant, ...]) -> None:
    for g in grants:
        for d in deny:
            if is_under(g.path, d.path):
                raise ProfileError(
                    f"{g.source}: {g.template} ({g.path}) lies inside the protected secret "
                    f"{d.path} ({d.source}); secrets are never granted")
