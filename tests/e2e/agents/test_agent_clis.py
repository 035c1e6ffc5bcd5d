"""Claude Code and Codex do one complete tool-using turn under their own profiles (issue 22).

The real CLIs (pinned in scripts/test-deps-agents.sh) talk to the mock model
(mock_model.py) through confine's egress gateway: the model asks for a shell command that
writes proof.txt in the workdir, the CLI runs it inside the sandbox, the model gets the
result and finishes. Threat answered: a profile that blocks its own agent teaches people
to run it unconfined; so each turn must end with exit 0, the file written and no refusal
of anything but the CLIs' own hosts, which do not resolve here. Cases: a fresh HOME (no
~/.claude, ~/.codex, nothing prepared) and one the CLI used once outside; confine
started as root with --user and as the account itself. The control: the same turn
outside the sandbox (the "used" case) writes the file too.
"""
from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import time

import pytest
from conftest import Sandbox, make_workdir

from .conftest import MODEL, in_netns

# (the profile and confine's options, the CLI's arguments for one non-interactive turn,
# its environment)
CLAUDE = (["-p", "claude-code"],
          ["claude", "-p", "Run the command.", "--allowedTools", "Bash"],
          [f"ANTHROPIC_BASE_URL=http://{MODEL}", "ANTHROPIC_API_KEY=sk-confine-test"])
CODEX = (["-p", "codex", "--env", "MOCK_KEY"],
         ["codex", "exec", "--skip-git-repo-check", "-s", "danger-full-access", "-m", "mock-model",
          "-c", "model_provider=mock",
          "-c", f'model_providers.mock={{name="mock", base_url="http://{MODEL}/v1", '
                'wire_api="responses", env_key="MOCK_KEY"}',
          "Run the command."],
         ["MOCK_KEY=sk-confine-test"])
CLIS = {"claude": CLAUDE, "codex": CODEX}
# the hosts each CLI tries besides the model; they do not resolve in the test's network
OWN_HOSTS = {"claude": ("api.anthropic.com", "statsig.anthropic.com", "statsig.com"),
             "codex": ("ab.chatgpt.com", "api.openai.com", "chatgpt.com")}


def _fresh_home(pw: pwd.struct_passwd) -> None:
    """The account's home emptied: no agent state, no confine agent home."""
    for n in os.listdir(pw.pw_dir):
        p = os.path.join(pw.pw_dir, n)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


@pytest.fixture(params=["root", "user"])
def agent_sandbox(request, confine_bin, agent_clis, agent_user):
    wd = make_workdir(agent_user)
    opts = ("--user", agent_user.pw_name) if request.param == "root" else ()
    sb = Sandbox(request.param, agent_user, wd, opts=opts)
    yield sb
    shutil.rmtree(wd, ignore_errors=True)


def _argv(bindir: str, cli: str) -> list[str]:
    args = list(CLIS[cli][1])
    return [os.path.join(bindir, args[0]), *args[1:]]


def _refusals(log: str) -> list[dict]:
    if not os.path.exists(log):
        return [{"event": "refusal", "note": f"confine wrote no {log}"}]
    with open(log) as f:
        return [e for e in map(json.loads, f) if e.get("event") == "refusal"]


def _not_own_host(cli: str, ev: dict) -> bool:
    text = json.dumps(ev)
    return not (ev.get("layer") == "gateway" and any(h in text for h in OWN_HOSTS[cli])
                and MODEL.split(":")[0] not in text)


@pytest.mark.parametrize("cli,home", [
    ("claude", "fresh"),
    ("claude", "used"),
    ("codex", "fresh"),
    ("codex", "used"),
])
def test_one_tool_using_turn(agent_sandbox, agent_clis, model, cli, home):
    sb = agent_sandbox
    opts, _, env = CLIS[cli]
    argv = _argv(agent_clis, cli)
    _fresh_home(sb.agent)
    proof = os.path.join(sb.workdir, "proof.txt")
    if home == "used":
        # the control: the same turn outside, which also leaves the CLI's state in HOME
        model.clear()
        out = subprocess.run(in_netns(sb.outside_cmd(argv, env_extra=env)), capture_output=True,
                             text=True, timeout=120, cwd=sb.workdir, stdin=subprocess.DEVNULL)
        assert out.returncode == 0 and os.path.exists(proof), out.stdout + out.stderr
        os.unlink(proof)
    logdir = make_workdir(sb.agent)     # outside the workdir, writable by the launcher
    log = os.path.join(logdir, "run.jsonl")
    model.clear()
    started = time.monotonic()
    p = subprocess.run(in_netns(sb.exec_cmd(argv, *opts, "--allow-host", MODEL, "--log", log,
                                            env_extra=env)),
                       capture_output=True, text=True, timeout=120, cwd=sb.workdir,
                       stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    try:
        refusals = [e for e in _refusals(log) if _not_own_host(cli, e)]
    finally:
        shutil.rmtree(logdir, ignore_errors=True)
    said = p.stdout + p.stderr
    kinds = [r.get("kind") for r in model.requests()]
    assert p.returncode == 0, said
    assert "tool" in kinds and "final" in kinds, (kinds, said)
    assert os.path.exists(proof), (model.tool_results(), said)
    with open(proof) as f:
        assert f.read() == "ok\n", said
    assert "confine: denied" not in said, said
    assert refusals == [], (refusals, said)
    assert took < 60, took


def _pane(label: str) -> str:
    return subprocess.run(["tmux", "-L", label, "capture-pane", "-p", "-t", "s"],
                          capture_output=True, text=True, timeout=30).stdout


# What each UI draws once it is up (a trust question or its prompt).
UI_UP = {"claude": ("trust", "Claude Code", "? for shortcuts"),
         "codex": ("trust", "OpenAI Codex", "directory", "Welcome to Codex")}
def _used_claude_home(sb: Sandbox, bindir: str) -> None:
    """A HOME where the person ran Claude Code outside and finished its onboarding
    (which asks Anthropic's servers, absent here): one turn outside, then the flag its
    onboarding sets."""
    _, _, env = CLIS["claude"]
    out = subprocess.run(in_netns(sb.outside_cmd(_argv(bindir, "claude"), env_extra=env)),
                         capture_output=True, text=True, timeout=120, cwd=sb.workdir,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout + out.stderr
    path = os.path.join(sb.agent.pw_dir, ".claude.json")
    with open(path) as f:
        conf = json.load(f)
    conf["hasCompletedOnboarding"] = True
    with open(path, "w") as f:
        json.dump(conf, f)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed here")
@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_ui_starts_in_a_pty(agent_sandbox, agent_clis, model, cli):
    """The interactive UI starts in a terminal (a tmux pane) under its profile, stays
    up, and no confine text is drawn into its screen."""
    sb = agent_sandbox
    opts, _, env = CLIS[cli]
    _fresh_home(sb.agent)
    if cli == "claude":
        _used_claude_home(sb, agent_clis)
    argv = [os.path.join(agent_clis, cli)]
    cmd = shlex.join(in_netns(sb.exec_cmd(argv, *opts, "--allow-host", MODEL,
                                          env_extra=[*env, "TERM=xterm-256color"])))
    label = f"confine-ui-{os.getpid()}-{sb.mode}-{cli}"
    tmux = ["tmux", "-L", label]
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-s", "s", "-x", "160",
                    "-y", "45", "-c", sb.workdir, cmd], check=True, timeout=30)
    try:
        subprocess.run([*tmux, "set-option", "-t", "s", "remain-on-exit", "on"],
                       check=True, timeout=30)
        end, screen = time.monotonic() + 60, ""
        while time.monotonic() < end:
            screen = _pane(label)
            if any(w in screen for w in UI_UP[cli]):
                break
            time.sleep(0.2)
        time.sleep(2.0)     # what it does right after its first screen (hosts, state)
        screen = _pane(label)
        dead = subprocess.run([*tmux, "display-message", "-p", "-t", "s", "#{pane_dead}"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
        assert dead == "0", f"the UI ended:\n{screen}"
        assert any(w in screen for w in UI_UP[cli]), screen
        assert "confine:" not in screen, screen
    finally:
        # the pane's process is confine itself: a SIGHUP from kill-server alone left it
        # waiting on an agent that ignores SIGHUP (Codex's UI)
        pid = subprocess.run([*tmux, "display-message", "-p", "-t", "s", "#{pane_pid}"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        if pid.isdigit():
            try:
                os.kill(int(pid), signal.SIGTERM)
            except ProcessLookupError:
                pass
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
