"""State roots in the exports: an agent's state directory (~/.claude, ~/.codex,
`filesystem.state_roots:`) is writable as a whole in every exported artefact,
and the names in it that run later stay read-only where the target can say so
(AppArmor deny rules, systemd ReadOnlyPaths=, SELinux file contexts), the rest
named in a comment. The exporting machine never has the directory (exports load
profiles into a throw-away home), so each check also proves the export does not
depend on the host."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from confine.export import apparmor, k8s, selinux, source

from .conftest import REPO, need
from .test_apparmor import HOME, TMP, W, evaluate, parse
from .test_systemd import analyze, make_unit

CLAUDE_WRITABLE = ("projects/p/s.jsonl", "history.jsonl", "todos/t.json", "statsig/x",
                   "plugins/store/p.json", "shell-snapshots/s", "new-in-next-release")
CLAUDE_PROTECTED = ("settings.json", "settings.local.json", "hooks", "hooks/pre.sh",
                    "commands/c.md", "agents/a.md", "skills/s/SKILL.md", "CLAUDE.md",
                    "plugins/installed_plugins.json", "plugins/cache/p/x.js", "statusline.sh",
                    "local/claude", "bin/tool", ".envrc", "x/.git/hooks/post-checkout")


def test_the_helper_gives_the_state_roots(policies):
    cc = policies["claude-code"]
    assert "~/.claude" in [g.template for g in source.writes(cc)]
    assert "~/.claude" not in [g.template for g in cc.write]    # only through writes()
    (root,) = source.state_roots(cc)
    assert root.spot == source.Spot("home", "/.claude")
    assert "/settings*.json" in root.own and "/hooks/" in root.own
    assert ".envrc" in root.patterns                              # the workdir's too
    (codex,) = source.state_roots(policies["codex"])
    assert codex.spot == source.Spot("home", "/.codex") and "/config.toml" in codex.own
    assert source.state_roots(policies["default"]) == ()


@pytest.mark.parametrize("name,root,writable,protected", [
    ("claude-code", ".claude", CLAUDE_WRITABLE, CLAUDE_PROTECTED),
    ("codex", ".codex", ("sessions/2026/x.jsonl", "history.jsonl", "log/codex-tui.log"),
     ("config.toml", "profile.config.toml", "AGENTS.md", "prompts/p.md", "rules/r",
      "hooks.json", "plugins/p/x", "notify.sh")),
])
def test_apparmor_state_root(policies, name, root, writable, protected):
    text = apparmor.agent_profile(policies[name])
    need("apparmor_parser")
    r = parse(text, include_dir=REPO / "apparmor")
    assert r.returncode == 0, r.stderr
    base = f"{HOME}/{root}"
    allowed = [f"{base}/{p}" for p in writable] + [f"{W}/src/x.py", f"{TMP}/x"]
    # the root itself: listed, never renamed away (and a prepared one put in its place)
    denied = [f"{base}/{p}" for p in protected] + [base, f"{HOME}/notes.txt"]
    got = evaluate(text, [(p, "w") for p in allowed + denied])
    wrong = ([f"{p}: denied" for p, g in zip(allowed, got, strict=False) if not g]
             + [f"{p}: allowed" for p, g in zip(denied, got[len(allowed):], strict=True) if g])
    assert not wrong, wrong
    assert all(evaluate(text, [(f"{base}/{p}", "r") for p in protected] + [(base + "/", "r")]))
    if name == "claude-code":  # stricter than confine exec here, and says so
        assert "  # Not created here (make them before the run): plugins/" in text.splitlines()


def test_systemd_state_root(tmp_path, policies, workdir, confine_bin):
    text = make_unit(policies["claude-code"], workdir, confine_bin, ["/usr/bin/true"])
    lines = text.splitlines()
    home = [x for x in lines if x.startswith("BindPaths=-") and x.endswith("/.claude")]
    assert len(home) == 1, "the state root is bound writable into the empty home"
    base = home[0][len("BindPaths=-"):]
    for rel in ("hooks", "commands", "agents", "skills", "CLAUDE.md", "local", "plugins/cache",
                "bin", "scripts", ".envrc"):
        assert f"ReadOnlyPaths=-{base}/{rel}" in lines, rel
    globs = [x for x in lines if x.startswith("# In ~/.claude (a state root), protected by "
                                              "confine only")]
    assert len(globs) == 1
    listed = globs[0].split(": ", 1)[1].split(", ")
    assert {"/settings*.json", "/plugins/*.json", "/*.sh"} <= set(listed)
    unit = tmp_path / "agent-test.service"
    unit.write_text(text)
    r = analyze("verify", str(unit))
    assert r.returncode == 0, r.stdout + r.stderr


def test_selinux_state_root(tmp_path, policies):
    fc = selinux.plain_fc(policies["claude-code"]).replace("HOME_DIR", "/home/agent")
    (tmp_path / "file_contexts").write_text(fc)
    tool = need("selabel_lookup")

    def label(path: str) -> str:
        r = subprocess.run([tool, "-b", "file", "-k", path, "-f", str(tmp_path / "file_contexts")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.split(":")[-2]

    base = "/home/agent/.claude"
    rw = [p for p in [base] + [f"{base}/{p}" for p in CLAUDE_WRITABLE]
          if label(p) != "confine_agent_home_rw_t"]
    assert not rw, f"not writable: {rw}"
    named = [p for p in CLAUDE_PROTECTED if not p.startswith((".", "x/"))]
    ro = [p for p in named if label(f"{base}/{p}") != "confine_agent_home_t"]
    assert not ro, f"not read-only: {ro}"
    note = [x for x in fc.splitlines() if x.startswith("# ~/.claude, a state root")]
    assert len(note) == 1 and ".envrc" in note[0] and "new ones" in note[0]


def test_k8s_state_root(policies):
    text = k8s.manifest(policies["claude-code"], name="agent", image="x", argv=[],
                        workdir="/workspace", uid=1000, seccomp_profile="p.json")
    pod = next(yaml.safe_load_all(text))
    mounts = {m["mountPath"]: m["subPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/home/agent/.claude"] == "home/.claude"
    assert "# ~/.claude (a state root) is writable as a whole here" in text
    assert "/settings*.json" in text


def test_a_profiles_read_only_entry_in_a_state_root_stays_read_only(tmp_path):
    """As confine exec makes it a pattern of the root (stateroots.resolve), the
    exports protect it, though the exporting machine has no ~/.claude."""
    prof = tmp_path / "mine.yaml"
    prof.write_text("extends: claude-code\nfilesystem:\n  read_only:\n"
                    "    - ~/.claude/keybindings.json\n")
    policy = source.load_policy(str(prof))
    (root,) = source.state_roots(policy)
    assert "/keybindings.json/" in root.own
    base = f"{HOME}/.claude"
    got = evaluate(apparmor.agent_profile(policy),
                   [(f"{base}/keybindings.json", "w"), (f"{base}/keybindings.json.bak", "w")])
    assert got == [False, True]
