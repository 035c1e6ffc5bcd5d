"""One list of protected paths: the AppArmor profile and the systemd unit of a
profile protect exactly `patterns.effective(policy)`, DEFAULT_PATTERNS plus
the profile's own `protected:` entries (a `!` entry removing a default), the
same list `confine exec` snapshots and guards. Each artefact is read back into
the patterns it covers, and AppArmor's own matcher confirms the denials."""
from __future__ import annotations

import re

import pytest

from confine.export import apparmor, source
from confine.policy.patterns import DEFAULT_PATTERNS, compile_patterns, effective

from .conftest import REPO
from .test_apparmor import TMP, W, evaluate, parse
from .test_systemd import analyze, make_unit

ADDED = (".tool-hooks/", "/top-only.sh", ".git/info/attributes", ".tool-*.toml")
PROFILE = ("extends: default\nprotected:\n"
           + "".join(f"  - '{p}'\n" for p in ADDED + ("!.idea/",)))


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    prof = tmp_path_factory.mktemp("profile") / "mine.yaml"
    prof.write_text(PROFILE)
    return source.load_policy(str(prof))


def test_effective_is_the_defaults_plus_the_profile(policy):
    assert policy.protected == ADDED + ("!.idea/",)
    eff = effective(policy)
    assert eff == tuple(p.text for p in compile_patterns(list(DEFAULT_PATTERNS)
                                                         + list(policy.protected)))
    assert set(eff) == (set(DEFAULT_PATTERNS) - {".idea/"}) | set(ADDED)
    assert compile_patterns(eff) == compile_patterns(list(DEFAULT_PATTERNS)
                                                     + list(policy.protected))


# --- AppArmor ----------------------------------------------------------------------------

AA_RULE = re.compile(r"^  deny (?P<q>\"?)@\{CONFINE_WORKDIR\}/(?P<any>\{,\*\*/\})?"
                     r"(?P<git>\.git/\{,modules/\*\*/,worktrees/\*/,modules/\*\*/worktrees/\*/\})?"
                     r"(?P<rel>.+?)(?P<tree>\{,/,/\*\*\})?(?P=q) wl,$")


def aa_patterns(text: str) -> set[str]:
    """The patterns the profile's protected-path rules stand for (the
    directories that hold them, denied as `{,/}`, are not patterns)."""
    out = set()
    for line in text.splitlines():
        m = AA_RULE.match(line)
        if not m or m["rel"].endswith("{,/}") or "{modules,worktrees}" in m["rel"]:
            continue
        rel = re.sub(r"\\(.)", r"\1", m["rel"])
        out.add(("" if m["any"] else "/") + (".git/" if m["git"] else "") + rel
                + ("/" if m["tree"] else ""))
    return out


def samples(text: str) -> list[str]:
    """Workdir paths a pattern protects: at the top, deeper unless anchored,
    in a submodule's git directory, and below a protected tree."""
    rel = text.strip("/").replace("*", "x")
    bases = [W] if text.startswith("/") else [W, W + "/sub/dir"]
    out = [f"{b}/{rel}" for b in bases]
    if rel.startswith(".git/"):
        out.append(f"{W}/.git/modules/sub/{rel[5:]}")
    if text.endswith("/"):
        out += [p + "/a/b" for p in out]
    return out


def test_apparmor_covers_the_defaults_and_the_profiles_own(policy, parser_tool):
    text = apparmor.agent_profile(policy)
    assert aa_patterns(text) == set(effective(policy))
    default = apparmor.agent_profile(source.load_policy("default"))
    assert aa_patterns(default) == set(DEFAULT_PATTERNS)
    r = parse(text, include_dir=REPO / "apparmor")
    assert r.returncode == 0, r.stderr

    denied = [p for e in effective(policy) for p in samples(e)]
    # directories holding an added path: renaming a prepared one onto them would plant it
    denied += [f"{W}/.git/info", f"{W}/.git/modules/sub/info", f"{W}/x/.git/info/"]
    allowed = [f"{W}/sub/top-only.sh", f"{W}/.idea/workspace.xml", f"{W}/.tool-hooksx",
               f"{W}/.git/info/exclude", f"{W}/.tool-x.tomlx", f"{W}/src/main.py", f"{TMP}/x"]
    got = evaluate(text, [(p, "w") for p in denied + allowed])
    wrong = ([p for p, g in zip(denied, got, strict=False) if g]
             + [p for p, g in zip(allowed, got[len(denied):], strict=True) if not g])
    assert not wrong, f"wrong decision for writes to: {wrong}"
    assert all(evaluate(text, [(p, "r") for p in denied])), "protected files stay readable"


@pytest.fixture(scope="module")
def parser_tool():
    from .conftest import need
    return need("apparmor_parser")


def test_apparmor_glob_translation():
    """fnmatch components become AppArmor globs for the same names; AppArmor's
    own syntax in a name stays literal."""
    g = apparmor._glob
    assert g(".tool-*.toml") == ".tool-*.toml" and g("a?[0-9]") == "a?[0-9]"
    assert g("x[!ab]") == "x[^ab]" and g("x[]a]") == "x[\\]a]" and g("x[") == "x\\["
    assert g("a{b,c}") == "a\\{b\\,c\\}" and g("q@{HOME}") == "q@\\{HOME\\}"


# --- systemd -----------------------------------------------------------------------------

def unit_patterns(text: str, workdir: str, pats) -> set[str]:
    """The patterns the unit's ReadOnlyPaths= stand for, plus those it names
    in its comment as left to confine (globs)."""
    ro = {line[len(f"ReadOnlyPaths=-{workdir}/"):] for line in text.splitlines()
          if line.startswith(f"ReadOnlyPaths=-{workdir}/")}
    out = {p.text for p in pats if "/".join((".git",) * p.git + p.comps) in ro}
    for line in text.splitlines():
        if line.startswith("# Protected by confine only"):
            out |= set(line.split(": ", 1)[1].split(", "))
    return out


def test_systemd_covers_the_defaults_and_the_profiles_own(policy, workdir, confine_bin):
    text = make_unit(policy, workdir, confine_bin, ["true"])
    pats = compile_patterns(effective(policy))
    assert unit_patterns(text, workdir, pats) == set(effective(policy))
    lines = text.splitlines()
    for rel in (".tool-hooks", "top-only.sh", ".git/info/attributes", ".envrc", ".git/hooks"):
        assert f"ReadOnlyPaths=-{workdir}/{rel}" in lines, rel
    assert f"ReadOnlyPaths=-{workdir}/.idea" not in lines    # removed by the profile
    assert "# Protected by confine only (a glob, a space or % in the name): .tool-*.toml" in lines
    default = make_unit(source.load_policy("default"), workdir, confine_bin, ["true"])
    assert unit_patterns(default, workdir, compile_patterns(None)) == set(DEFAULT_PATTERNS)


def test_systemd_unit_with_added_patterns_verifies(tmp_path, policy, workdir, confine_bin):
    unit = tmp_path / "agent-test.service"
    unit.write_text(make_unit(policy, workdir, confine_bin, ["/usr/bin/true"]))
    r = analyze("verify", str(unit))
    assert r.returncode == 0, r.stdout + r.stderr
