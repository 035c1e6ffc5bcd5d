"""The name guard at run time against a reference judgment, on random names.

A seeded generator builds paths from the pieces that broke or could break the
broker's idea of where a name is: control characters, ` (deleted)` suffixes,
components long enough to pass PATH_MAX, case and Unicode variants of
protected names, symlinked directories (swapped in for a real directory just
before the call). The agent makes every directory and file with *at calls
relative to a descriptor, so the kernel never needs the whole path. The
reference is the guard's own judgment of the final path, worked out here from
the names the test chose (the true position, no descriptor involved): the run
must refuse exactly where it refuses, and never create what it refuses.
"""
from __future__ import annotations

import os
import random

import pytest

from confine import protect
from confine.protect.guard import Guard

SEED = int(os.environ.get("CONFINE_GUARD_SEED", "1010"))
CASES = 160

DIRS = ["a", "sub", "x (deleted)", " (deleted)", "d\n(deleted)", "\x1b[2Jesc", "tab\there",
        "ünï", "l" * 200, "m" * 250, ".git", ".claude", "hooks", ".Git", ".CLAUDE", "node_modules",
        "dir (deleted) (deleted)", "\x01\x7f"]
FINALS = [".envrc", ".ENVRC", ".EnvRc", ".mcp.json", ".MCP.JSON", "plain", "x (deleted)",
          ".envrc (deleted)", "settings.json", "ſettings.json", "tasks.json", "pre-commit",
          "pre-commit.sample", "config", ".env\u200crc", ".\u212a", "main.py", ".bashrc",
          ".gitmodules", "\n", "commands"]

BODY = r'''
O = os.O_WRONLY | os.O_CREAT | os.O_EXCL
top = os.open(".", os.O_PATH | os.O_DIRECTORY)
def enc(s):
    return s.encode("utf-8", "surrogateescape")
for i, case in enumerate(P["cases"]):
    base = "case%03d" % i
    os.mkdir(base, dir_fd=top)
    d = os.open(base, os.O_PATH | os.O_DIRECTORY, dir_fd=top)
    steps = []
    try:
        for comp, link in case["dirs"]:
            if link:
                # A real directory at the name, then a symlink swapped in for it
                # (RENAME_EXCHANGE): the call goes where the link leads.
                os.mkdir(enc(comp + ".real"), dir_fd=d)
                os.mkdir(enc(comp + ".ln"), dir_fd=d)
                os.symlink(enc(comp + ".real"), b"swap", dir_fd=d)
                if libc.renameat2(d, enc(comp + ".ln"), d, b"swap", 2) != 0:
                    raise OSError(ctypes.get_errno(), "renameat2")
                comp = comp + ".ln"
            else:
                try:
                    os.mkdir(enc(comp), dir_fd=d)
                    steps.append("ok")
                except OSError as e:
                    steps.append(en(e.errno))
                    raise
            n = os.open(enc(comp), os.O_PATH | os.O_DIRECTORY, dir_fd=d)
            os.close(d)
            d = n
        try:
            os.close(os.open(enc(case["final"]), O, 0o644, dir_fd=d))
            steps.append("ok")
        except OSError as e:
            steps.append(en(e.errno))
    except OSError:
        pass
    finally:
        os.close(d)
    R[str(i)] = steps
'''


def _cases(rng: random.Random) -> list[dict]:
    out = []
    for _ in range(CASES):
        dirs = []
        depth = rng.choice([0, 1, 1, 2, 3, 5, 25])
        for _ in range(depth):
            # the deep ones mostly long: past PATH_MAX, where no path reads back
            comp = rng.choice(DIRS) if depth < 25 or rng.random() < 0.25 else "l" * 200
            link = comp not in (".git", ".Git", "hooks", ".claude", ".CLAUDE") and rng.random() < 0.15
            dirs.append((comp, link))
        out.append({"dirs": dirs, "final": rng.choice(FINALS)})
    return out


def _expected(g: Guard, workdir: str, i: int, case: dict) -> list[str]:
    """The reference: each step judged at its true path. A new protected file
    or directory is held (protect/held.py): the call works, the name does not
    exist afterwards, so the next step (an O_PATH open of it) ends the case."""
    path = [f"case{i:03d}"]
    steps = []
    for comp, link in case["dirs"]:
        if link:
            path.append(comp + ".real")          # where the symlink leads
            continue
        path.append(comp)
        full = os.path.join(workdir, *path)
        if g.create(full, "dir") is not None:
            return steps + (["ok"] if g.hold_at(g.rel(full), "dir") else ["EACCES"])
        steps.append("ok")
    path.append(case["final"])
    full = os.path.join(workdir, *path)
    steps.append("EACCES" if g.create(full, "file") is not None
                 and not g.hold_at(g.rel(full), "file") else "ok")
    return steps


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_random_names_get_the_reference_verdict(sandbox, layers):
    box = sandbox if layers == "all" else sandbox.without_namespaces()
    rng = random.Random(SEED)
    cases = _cases(rng)
    p, r = box.probe(BODY, {"cases": cases}, timeout=120)
    assert r is not None, p.stderr[-3000:]
    g = Guard(box.workdir, protect.compile_patterns(None))
    g.held = "(the run's held area)"        # judged as the run judges: holding on
    wrong = {}
    for i, case in enumerate(cases):
        want = _expected(g, box.workdir, i, case)
        if r[str(i)] != want:
            wrong[i] = (case, want, r[str(i)])
    assert not wrong, f"seed {SEED}: {list(wrong.items())[:5]}"
    refused = sum(1 for i in range(len(cases)) if r[str(i)][-1] == "EACCES")
    assert 0 < refused < len(cases), refused            # both verdicts were exercised
    # Nothing refused exists: walk the tree by descriptor (paths pass PATH_MAX).
    made = []

    def walk(fd: int, rel: list[str]) -> None:
        for e in os.scandir(fd):
            here = rel + [e.name]
            if e.is_symlink():
                continue
            kind = "dir" if e.is_dir(follow_symlinks=False) else "file"
            if kind == "dir":
                sub = os.open(e.name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
                try:
                    walk(sub, here)
                finally:
                    os.close(sub)
            made.append((here, kind))
    top = os.open(box.workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(top, [])
    finally:
        os.close(top)
    bad = [m for m, kind in made if g.create(os.path.join(box.workdir, *m), kind) is not None]
    assert not bad, bad[:5]
