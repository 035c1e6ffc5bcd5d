"""AppArmor: every generated profile compiles with apparmor_parser, and
AppArmor's own glob matcher confirms it allows what the Policy grants and
denies secrets, protected workdir files and raw devices."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from confine.export import apparmor, source
from confine.policy.patterns import DEFAULT_PATTERNS

from .conftest import BUILTIN, REPO, need

ABI3 = "/etc/apparmor.d/abi/3.0"
ABI4 = "/etc/apparmor.d/abi/4.0"
W, TMP, HOME = "/srv/confine/proj", "/tmp/confine-abc123", "/home/alice"


def parse(path_or_text, *, include_dir, extra=()):
    text = path_or_text
    return subprocess.run(["apparmor_parser", "-Q", "-K", "-T", "-M", ABI3, "--warn=all",
                           "--Werror", "--warn=no-cache", "-I", str(include_dir), *extra],
                          input=text, capture_output=True, text=True)


@pytest.fixture(scope="module")
def parser():
    return need("apparmor_parser")


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("workdir", [None, "/srv/agents/one"])
def test_agent_profile_compiles(parser, policies, name, workdir):
    text = apparmor.agent_profile(policies[name], workdir=workdir)
    r = parse(text, include_dir=REPO / "apparmor")
    assert r.returncode == 0, r.stderr


def test_shipped_files_compile(parser):
    for f in ("confine-default",):
        r = parse((REPO / "apparmor" / f).read_text(), include_dir=REPO / "apparmor")
        assert r.returncode == 0, r.stderr


def test_what_export_writes_to_a_directory_compiles_here(parser, tmp_path):
    """`confine export apparmor -o DIR/` on this host (Debian 12: AppArmor 3) gives files
    that all compile with the host's own parser and includes, as `apparmor_parser -r`
    would load them after a copy to /etc/apparmor.d (issue 23 item 7)."""
    from click.testing import CliRunner

    from confine.cli.export import export
    r = CliRunner().invoke(export, ["apparmor", "-p", "default", "-o", f"{tmp_path}/"])
    assert r.exit_code == 0, r.output
    profiles = [p for p in tmp_path.iterdir() if p.is_file()]
    assert [p.name for p in profiles if p.name == "confine-default"], profiles
    for p in profiles:
        r = subprocess.run(["apparmor_parser", "-Q", "-K", "-T", "-I", str(tmp_path),
                            "-I", "/etc/apparmor.d", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, (p.name, r.stderr)


def test_a_broken_profile_is_rejected(parser, policies):
    """The compile check is not vacuous."""
    text = apparmor.agent_profile(policies["default"]).replace("deny capability,", "deny capabilty,")
    assert parse(text, include_dir=REPO / "apparmor").returncode != 0


def test_launcher_profile(parser):
    """userns needs AppArmor 4's parser; with AppArmor 3 (Debian 12) the rest of
    the profile is compiled and the two AppArmor-4 lines are checked by eye."""
    text = (REPO / "apparmor" / "confine").read_text()
    assert "abi <abi/4.0>," in text.splitlines()
    assert "  userns," in text.splitlines()
    assert "flags=(unconfined)" in text
    if os.path.exists(ABI4):
        r = subprocess.run(["apparmor_parser", "-Q", "-K", "-T", "-M", ABI4, "-I",
                            str(REPO / "apparmor")], input=text, capture_output=True, text=True)
    else:
        r = parse(text.replace("abi <abi/4.0>,", "abi <abi/3.0>,").replace("  userns,\n", ""),
                  include_dir=REPO / "apparmor")
    assert r.returncode == 0, r.stderr


# --- what the profile allows ---------------------------------------------------------------

RULE = re.compile(r"^\s*(deny\s+)?(owner\s+)?(/\S*|@\{\S+)\s+([mrwlkix]+),\s*$")
# Sample values; @{HOME} is "@{HOMEDIRS}/*/ /root/" in tunables/home.
VARS = {"@{CONFINE_WORKDIR}": [W], "@{CONFINE_TMP}": [TMP], "@{HOME}": ["/home/*", "/root"],
        "@{PROC}": ["/proc"], "@{pid}": ["[0-9]*"]}


def rules(text):
    """(deny?, glob, perms) for each file rule, one per variable value."""
    out = []
    for line in text.splitlines():
        m = RULE.match(line)
        if not m:
            continue
        pats = [m.group(3)]
        for k, values in VARS.items():
            pats = [p.replace(k, v) for p in pats for v in values] if k in pats[0] else pats
        out += [(bool(m.group(1)), p.replace("//", "/"), set(m.group(4))) for p in pats]
    return out


def evaluate(text, queries):
    """queries: [(path, perm)] -> [allowed?]: an allow rule with the permission
    matches and no deny rule with it does (AppArmor: deny wins)."""
    py = need("/usr/bin/python3")
    rs = rules(text)
    paths = sorted({p for p, _ in queries})
    req = json.dumps({"patterns": [p for _, p, _ in rs], "paths": paths})
    r = subprocess.run([py, str(REPO / "tests" / "export" / "aa_match.py")], input=req,
                       capture_output=True, text=True)
    if "No module named 'apparmor'" in r.stderr:
        need("/usr/lib/python3/dist-packages/apparmor/aare.py")
    assert r.returncode == 0, r.stderr
    matrix = json.loads(r.stdout)
    col = {p: i for i, p in enumerate(paths)}
    out = []
    for path, perm in queries:
        hits = [(deny, perms) for (deny, _, perms), row in zip(rs, matrix) if row[col[path]]]
        out.append(any(not d and perm in ps for d, ps in hits)
                   and not any(d and perm in ps for d, ps in hits))
    return out


def sample(s: source.Spot) -> str:
    base = {"workdir": W, "tmp": TMP, "home": HOME, None: ""}[s.root]
    return (base + s.rest).replace("*", "rsa")


@pytest.mark.parametrize("name", BUILTIN)
def test_profile_allows_the_policy_and_nothing_it_denies(policies, name):
    policy = policies[name]
    text = apparmor.agent_profile(policy)
    expect = []
    for kind, perms in (("read", "rx"), ("write", "rwx"), ("devices", "rw")):
        for g in getattr(policy, kind):
            s = source.spot(g.template)
            p = sample(s)
            for perm in perms:
                expect.append(((p + "/child", perm), True))
                if not (s.root in ("workdir", "tmp") and not s.rest):
                    expect.append(((p, perm), True))
    for root in (W, TMP):  # the directory itself: listed, not removed or renamed
        expect += [((root + "/", "r"), True), ((root + "/", "w"), False)]
    for s in source.deny_spots(policy):
        for p in (sample(s), sample(s) + "/child"):
            for perm in "rwxm":
                expect.append(((p, perm), False))
    for p in ("/etc/shadow", "/dev/sda", "/dev/nvme0n1", "/dev/mem", "/proc/sys/kernel/x",
              "/sys/kernel/x"):
        expect.append(((p, "w"), False))
    for p in (HOME + "/notes.txt", "/var/log/syslog", "/root/.bashrc", "/srv/other/x"):
        for perm in "rw":
            expect.append(((p, perm), False))
    for p in ("/usr/bin/git", "/etc/passwd"):
        expect.append(((p, "w"), False))
    got = evaluate(text, [q for q, _ in expect])
    wrong = [f"{path} {perm}: {'allowed' if g else 'denied'}"
             for ((path, perm), want), g in zip(expect, got) if g != want]
    assert not wrong, wrong


def test_protected_workdir_paths_are_read_only(policies):
    text = apparmor.agent_profile(policies["default"])
    denied, allowed = [], []
    for entry in DEFAULT_PATTERNS:
        e = entry.rstrip("/")
        for base in (W, W + "/sub/dir"):
            denied.append(f"{base}/{e}")
            if entry.endswith("/"):
                denied += [f"{base}/{e}/", f"{base}/{e}/x", f"{base}/{e}/a/b"]
    # Renaming a prepared directory onto .git or .claude, or a ".git" file
    # ("gitdir: elsewhere"), would plant hooks without writing a protected path.
    denied += [f"{W}/.git", f"{W}/.git/", f"{W}/.claude/", f"{W}/x/.git", f"{W}/x/.claude/"]
    # Submodule and worktree git directories.
    denied += [f"{W}/.git/modules/sub/hooks/post-checkout", f"{W}/.git/modules/sub/config",
               f"{W}/.git/modules/a/modules/b/config", f"{W}/x/.git/worktrees/wt/config.worktree",
               f"{W}/.git/modules/a/worktrees/wt/config", f"{W}/.git/modules/",
               f"{W}/.git/modules/sub/", f"{W}/.git/worktrees/wt/", f"{W}/.git/modules/a/modules/b/"]
    allowed += [f"{W}/src/main.py", f"{W}/.git/objects/ab/cdef", f"{W}/.git/index",
                f"{W}/.git/refs/heads/main", f"{W}/.git/refs/heads/config",
                f"{W}/.git/modules/sub/index", f"{W}/.git/modules/sub/objects/",
                f"{W}/.claude/notes.md", f"{W}/.gitignore",
                f"{W}/profile", f"{W}/docs/.vscode.md", f"{W}/a.git/hooks/x", f"{TMP}/x"]
    got = evaluate(text, [(p, "w") for p in denied + allowed])
    wrong = [p for p, g in zip(denied, got) if g] + [p for p, g in zip(allowed, got[len(denied):]) if not g]
    assert not wrong, f"wrong decision for writes to: {wrong}"
    reads = evaluate(text, [(p, "r") for p in denied])
    assert all(reads), "protected files stay readable"


def test_kernel_interfaces_denied(policies):
    text = apparmor.agent_profile(policies["default"])
    for line in ("deny capability,", "deny mount,", "deny umount,", "deny pivot_root,",
                 "deny ptrace (trace) peer=unconfined,", "deny network inet raw,",
                 "deny network packet,"):
        assert f"  {line}" in text.splitlines()
    assert "network inet stream," not in text  # the default profile grants no TCP port
    assert "network inet stream," in apparmor.agent_profile(policies["claude-code"])


def test_workdir_variable_or_pinned(policies):
    shared = apparmor.agent_profile(policies["default"])
    assert "include <tunables/confine>" in shared and "@{CONFINE_WORKDIR}=" not in shared
    pinned = apparmor.agent_profile(policies["default"], workdir="/srv/agents/one")
    assert "@{CONFINE_WORKDIR}=/srv/agents/one" in pinned
    assert "include <tunables/confine>" not in pinned
