"""The house rules of CONTRIBUTING.md, read off the source: who may import what.

Every import counts, also those inside functions: a lazy import is still an
edge a reader has to follow.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "confine"


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache     # the source does not change during a session: parsed once
def _graph() -> dict[str, set[str]]:
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(), str(path))
        typing_only = {id(n) for blk in ast.walk(tree) if isinstance(blk, ast.If)
                       and "TYPE_CHECKING" in ast.unparse(blk.test) for n in ast.walk(blk)}
        for node in ast.walk(tree):
            if id(node) in typing_only:      # annotations only, never executed
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - node.level + 1]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                subs = [f"{stem}.{a.name}" for a in node.names]
                # `from pkg import submodule` is an edge to the submodule only
                targets = subs if all(t in mods for t in subs) else [stem] + subs
            for t in targets:
                if t in mods and t != mod:
                    graph[mod].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    out, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            # a package importing its own submodules (re-exports) is not a circle
            if n.startswith(m + ".") or m.startswith(n + "."):
                continue
            if state.get(n) == 1:
                out.append(stack[stack.index(n):] + [n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return out


def _under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def _edges(graph, src_pkg):
    return {(m, t) for m, ts in graph.items() if _under(m, src_pkg) for t in ts}


def test_no_import_circles():
    assert _cycles(_graph()) == []


def test_policy_imports_no_runtime():
    bad = {(m, t) for m, t in _edges(_graph(), "confine.policy")
           if not any(_under(t, ok) for ok in ("confine.policy", "confine.errors",
                                               "confine.paths", "confine.gateway.rules",
                                               "confine.record",
                                               "confine.credentials.binding"))}
    assert bad == set()


def test_kernel_imports_nothing_of_confine_above_it():
    bad = {(m, t) for m, t in _edges(_graph(), "confine.kernel")
           if not any(_under(t, ok) for ok in ("confine.kernel", "confine.errors",
                                               "confine.paths", "confine.record"))}
    assert bad == set()


def test_exporters_read_only_the_policy():
    allowed = ("confine.export", "confine.policy", "confine.errors", "confine.paths",
               "confine.kernel.seccomp", "confine.record")
    bad = {(m, t) for m, t in _edges(_graph(), "confine.export")
           if not any(_under(t, ok) for ok in allowed)}
    assert bad == set()


def test_plan_never_launches():
    bad = {(m, t) for m, t in _edges(_graph(), "confine.plan")
           if any(_under(t, no) for no in ("confine.runtime", "confine.cli", "confine.probe",
                                           "confine.mediation", "confine.api"))}
    assert bad == set()


def test_nothing_imports_the_cli():
    g = _graph()
    bad = {(m, t) for m, ts in g.items() for t in ts
           if _under(t, "confine.cli") and not _under(m, "confine.cli")}
    assert bad == set()


def test_gateway_is_self_contained():
    # the gateway core reads no policy, plan or runtime: the wiring hands it Rules
    # and its asker (the run's approval engine, as a callable: it never imports it)
    allowed = ("confine.gateway", "confine.errors", "confine.kernel.sysfs", "confine.record")
    bad = {(m, t) for m, t in _edges(_graph(), "confine.gateway")
           if not any(_under(t, ok) for ok in allowed)}
    assert bad == set()


def test_approval_engine_is_below_the_runtime():
    # the engine decides; the runtime wires it to the gateway and the mediator
    allowed = ("confine.approval", "confine.policy", "confine.errors", "confine.record",
               "confine.gateway.rules", "confine.gateway.approve")
    bad = {(m, t) for m, t in _edges(_graph(), "confine.approval")
           if not any(_under(t, ok) for ok in allowed)}
    assert bad == set()


def test_journal_is_below_the_runtime():
    # the record's format, store and writer: the runtime and the CLI call in, never back
    allowed = ("confine.journal", "confine.errors", "confine.paths",
               "confine.record")
    bad = {(m, t) for m, t in _edges(_graph(), "confine.journal")
           if not any(_under(t, ok) for ok in allowed)}
    assert bad == set()


def test_credentials_are_called_in():
    # the credential sources, the ssh-agent proxy: the runtime and the gateway's wiring
    # call them, never the other way round (credentials/__init__.py); the approval
    # engine is reached from one place (credentials/use.py `Judge`); of the gateway,
    # the swap reuses only the pure parsers (the gateway calls in through its
    # `credentials=` hook, never an import)
    allowed = ("confine.credentials", "confine.policy", "confine.errors", "confine.paths",
               "confine.kernel", "confine.record", "confine.gateway.rules",
               "confine.gateway.http1", "confine.approval")
    bad = {(m, t) for m, t in _edges(_graph(), "confine.credentials")
           if not any(_under(t, ok) for ok in allowed)}
    assert bad == set()


def test_undo_calls_out_only():
    # confine/undo/: the store, the keeper, the restore. The broker calls in (client
    # only: it runs in the agent's domain), the runtime and the cli call in; undo
    # itself never reaches up into mediation, runtime, plan or policy.
    g = _graph()
    allowed = ("confine.undo", "confine.errors", "confine.paths", "confine.record",
               "confine.kernel", "confine.protect.keep", "confine.protect.held",
               "confine.protect.revert", "confine.digest")
    bad = {(m, t) for m, t in _edges(g, "confine.undo")
           if not any(_under(t, ok) for ok in allowed)}
    assert bad == set()
    callers = {(m, t) for m, ts in g.items() for t in ts if _under(t, "confine.undo")
               and not _under(m, "confine.undo")
               and not any(_under(m, ok) for ok in ("confine.runtime", "confine.cli"))
               and not (_under(m, "confine.mediation") and t == "confine.undo.client")}
    assert callers == set()
