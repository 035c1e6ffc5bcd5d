"""The agent's own home (issue 11, items 4 and 6).

Before: HOME inside was the user's real home, unreadable but for the profile's
grants, so every shell began with `bash: ~/.bashrc: Permission denied`, pip
warned that its cache was unwritable, npm kept no cache and no logs, history was
lost, and `tmux` inside went looking for the user's own server. Codex's default
interface could not create ~/.codex/app-server-control/ nor connect to its
socket there. Now HOME (and XDG_*) is a persistent home of the agent's own per
(profile, workdir), made by confine; the user's rc files, caches and tool state
stay out of reach. Every attempt is a real confined run, started as root (agent =
the test account) and as the test account itself; most with all layers and with
Landlock alone (no mount namespace), each denial beside a control.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import uuid

import pytest

try:  # tests/ as a package or as a plain directory
    from .conftest import PY, make_sdist, pty_run
except ImportError:
    from conftest import PY, make_sdist, pty_run

pytestmark = pytest.mark.usefixtures("confine_bin")

DENIED = {"EACCES", "EPERM", "EXDEV", "EROFS"}


def _layers(sandbox, layers):
    return sandbox if layers == "all" else sandbox.without_namespaces()


def home_of(sb, *opts) -> str:
    """The agent home a run would use, as --dry-run says (it makes nothing)."""
    p = sb.confine("exec", "-w", sb.workdir, *sb.opts, *opts, "--dry-run", "--json", "--", "true")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["agent_home"]


@pytest.fixture
def homes(test_user):
    """Removes the agent homes a test made (they live in the test account's real
    home, which outlives the test)."""
    made: list[str] = []
    yield made
    for h in made:
        shutil.rmtree(h, ignore_errors=True)


def _home(sb, homes, *opts) -> str:
    h = home_of(sb, *opts)
    homes.append(h)
    return h


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_interactive_bash_starts_with_nothing_on_stderr(sandbox, planted_home, homes, layers):
    sb = _layers(sandbox, layers)
    h = _home(sb, homes)
    assert not os.path.exists(h), "--dry-run made the agent home"
    for argv in (["bash", "-i", "-c", "true"], ["bash", "-l", "-i", "-c", "true"]):
        status, out = pty_run(sb.exec_cmd(argv), timeout=60)
        if layers == "landlock":     # confine's own notice that the namespaces were given up
            out = b"".join(ln for ln in out.splitlines(True) if not ln.startswith(b"confine: "))
        assert (status, out) == (0, b""), (argv, out.decode(errors="replace"))
    # without a terminal too
    p = sb.run(["bash", "-c", "echo $HOME; . ~/.bashrc; . ~/.profile; echo sourced"])
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stderr.splitlines() if not ln.startswith("confine: ")] == [], p.stderr
    assert p.stdout.split() == [h, "sourced"]
    # control: the user's real ~/.bashrc is there and stays unreadable inside
    assert os.path.isfile(os.path.join(planted_home, ".bashrc"))
    p = sb.run(["cat", os.path.join(planted_home, ".bashrc")])
    assert p.returncode != 0 and "Permission denied" in p.stderr, p


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_shell_history_persists_between_runs(sandbox, homes, layers):
    sb = _layers(sandbox, layers)
    h = _home(sb, homes)
    marker = f"hist-{uuid.uuid4().hex[:12]}"
    status, out = pty_run(sb.exec_cmd(["bash", "-i"]),
                          [(b"$ ", f"echo {marker}\n".encode()), (marker.encode(), b"exit\n")],
                          timeout=60)
    assert status == 0, out
    assert marker in open(os.path.join(h, ".bash_history")).read()
    # the second run's shell has it in its history
    status, out = pty_run(sb.exec_cmd(["bash", "-i"]),
                          [(b"$ ", b"history\n"), (b"history", b"exit\n")], timeout=60)
    assert status == 0 and f"echo {marker}".encode() in out, out


def _wheels(h: str) -> dict[str, int]:
    out = {}
    for dirpath, _, filenames in os.walk(os.path.join(h, ".cache", "pip", "wheels")):
        for n in filenames:
            if n.endswith(".whl"):
                out[n] = os.stat(os.path.join(dirpath, n)).st_ino
    return out


def test_second_pip_install_uses_the_first_ones_cache(sandbox, homes, test_user):
    sb = sandbox
    h = _home(sb, homes)
    wh = make_sdist(os.path.join(sb.workdir, "in"), test_user)
    cmd = [PY, "-m", "pip", "install", "--no-index", "--find-links", wh,
           "--no-build-isolation", "--disable-pip-version-check", "confdemo"]
    p = sb.run(cmd + ["--target", "t1"], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cache" not in p.stderr.lower(), p.stderr      # no "cache is not writable" warning
    first = _wheels(h)
    assert list(first) == ["confdemo-1.0-py3-none-any.whl"], first
    p = sb.run(cmd + ["--target", "t2"], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Using cached confdemo-1.0-py3-none-any.whl" in p.stdout, p.stdout
    assert _wheels(h) == first                              # the same file: not built again
    assert os.path.isfile(os.path.join(sb.workdir, "t2", "confdemo.py"))
    # the user's own pip cache is not the agent's
    real = os.path.join(test_user.pw_dir, ".cache", "pip")
    assert not os.path.exists(os.path.join(real, "wheels", "confdemo")), real


@pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed here")
def test_npm_keeps_its_cache_and_logs_in_the_agent_home(sandbox, homes, test_user):
    sb = sandbox
    h = _home(sb, homes)
    pkg = os.path.join(sb.workdir, "pkg")
    os.makedirs(pkg)
    with open(os.path.join(pkg, "package.json"), "w") as f:
        json.dump({"name": "confdemo", "version": "1.0.0", "main": "index.js"}, f)
    with open(os.path.join(pkg, "index.js"), "w") as f:
        f.write("module.exports = 1\n")
    with open(os.path.join(sb.workdir, "package.json"), "w") as f:
        json.dump({"name": "proj", "version": "1.0.0"}, f)
    for dirpath, dirnames, filenames in os.walk(sb.workdir):
        for n in dirnames + filenames:
            os.lchown(os.path.join(dirpath, n), test_user.pw_uid, test_user.pw_gid)
    p = sb.run(["sh", "-c", "cd pkg && npm pack --pack-destination .. >/dev/null && cd .. && "
                "npm install --offline --no-audit --no-fund ./confdemo-1.0.0.tgz"], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "EACCES" not in p.stderr and "EROFS" not in p.stderr, p.stderr
    content = os.path.join(h, ".npm", "_cacache", "content-v2")
    assert any(files for _, _, files in os.walk(content)), "npm cached nothing"
    assert os.listdir(os.path.join(h, ".npm", "_logs")), "npm wrote no log"
    # the second run sees the first one's cache
    p = sb.run(["npm", "cache", "verify"], timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Content verified: 0 " not in p.stdout and "Content verified:" in p.stdout, p.stdout
    assert not os.path.exists(os.path.join(test_user.pw_dir, ".npm", "_cacache"))


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed here")
@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_tmux_inside_has_its_own_server(sandbox, homes, test_user, layers):
    sb = _layers(sandbox, layers)
    _home(sb, homes)
    label = f"confine-test-{uuid.uuid4().hex[:8]}"
    user_tmux = sb._as(test_user) + ["env", "-i", f"HOME={test_user.pw_dir}",
                                     "PATH=/usr/bin:/bin", "tmux", "-L", label]
    subprocess.run(user_tmux + ["new", "-d", "-s", "users-own", "sleep 300"], check=True,
                   timeout=30)
    try:
        ls = subprocess.run(user_tmux + ["ls"], capture_output=True, text=True, timeout=30)
        assert "users-own" in ls.stdout, ls         # control: the user's server is there
        sock = f"/tmp/tmux-{test_user.pw_uid}/{label}"
        assert stat.S_ISSOCK(os.stat(sock).st_mode)
        script = (f"tmux new -d -s agents 'sleep 60' && tmux ls; echo TMUX=${{TMUX-unset}}; "
                  f"tmux -L {label} ls; echo by-name=$?; tmux -S {sock} ls; echo by-path=$?; "
                  f"ln -s {sock} ~/users.sock && tmux -S ~/users.sock ls; echo by-link=$?")
        p = sb.run(["sh", "-c", script], "--env", f"TMUX={sock},1,0", timeout=60)
        out = p.stdout
        if layers == "all":
            assert "agents:" in out, (out, p.stderr)      # its own server works
        else:
            # without a mount namespace no new pseudo-terminal can be opened
            # (mount_namespace.private_pts: only the agent's own is granted): tmux's
            # server cannot start its pane (README "Without user namespaces")
            assert "agents:" not in out, out
        assert "users-own" not in out, out
        assert "TMUX=unset" in out, out                    # the user's TMUX never passes
        assert "by-name=1" in out and "by-path=1" in out and "by-link=1" in out, (out, p.stderr)
        assert "no server running" in p.stderr or "error connecting" in p.stderr, p.stderr
    finally:
        subprocess.run(user_tmux + ["kill-server"], timeout=30)


BODY_REACH = r'''
H, REAL = P["home"], P["real"]
def real(rel):
    return os.path.join(REAL, rel)
attempt("read_real_bashrc", lambda: read_file(real(".bashrc")))
attempt("append_real_bashrc", lambda: opened(real(".bashrc"), os.O_WRONLY | os.O_APPEND))
attempt("new_in_real_pip_cache", lambda: opened(real(".cache/pip/x"), os.O_WRONLY | os.O_CREAT))
attempt("new_in_real_npm", lambda: opened(real(".npm/x"), os.O_WRONLY | os.O_CREAT))
attempt("read_real_pip_cache", lambda: [os.listdir(real(".cache/pip"))] and None)
def via_symlink():
    os.symlink(real(".bashrc"), os.path.join(H, "evil-link"))
    opened(os.path.join(H, "evil-link"), os.O_WRONLY | os.O_APPEND)
attempt("write_through_symlink", via_symlink)
attempt("hardlink_real_bashrc", lambda: os.link(real(".bashrc"), os.path.join(H, "hl")))
attempt("rename_real_bashrc_in", lambda: os.rename(real(".bashrc"), os.path.join(H, "mv")))
def rename_over():
    with open(os.path.join(H, "payload"), "w") as f:
        f.write("echo pwned\n")
    os.rename(os.path.join(H, "payload"), real(".bashrc"))
attempt("rename_over_real_bashrc", rename_over)
attempt("parent_of_home", lambda: opened(os.path.join(os.path.dirname(H), "x"),
                                         os.O_WRONLY | os.O_CREAT))
attempt("quarantine", lambda: opened(real(".local/state/confine/quarantine/x"),
                                     os.O_WRONLY | os.O_CREAT))
attempt("dotdot_out", lambda: opened(os.path.join(H, "..", "..", "x"), os.O_WRONLY | os.O_CREAT))
# controls inside: the agent home is the agent's
def own():
    with open(os.path.join(H, "own.txt"), "w") as f:
        f.write("x")
    os.link(os.path.join(H, "own.txt"), os.path.join(H, "own2.txt"))
    os.rename(os.path.join(H, "own2.txt"), os.path.join(H, ".cache", "own3.txt"))
attempt("own_files", own)
attempt("own_bashrc", lambda: opened(os.path.join(H, ".bashrc"), os.O_WRONLY | os.O_APPEND))
'''


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_user_files_out_of_reach_through_the_agent_home(sandbox, planted_home, homes,
                                                        test_user, layers):
    sb = _layers(sandbox, layers)
    h = _home(sb, homes)
    for d in (".cache/pip", ".npm", ".local/state/confine/quarantine"):
        p = os.path.join(planted_home, d)
        os.makedirs(p, exist_ok=True)
        for q in (p, os.path.dirname(p)):
            os.lchown(q, test_user.pw_uid, test_user.pw_gid)
    before = open(os.path.join(planted_home, ".bashrc"), "rb").read()
    p, r = sb.probe(BODY_REACH, {"home": h, "real": planted_home})
    assert r is not None, p.stderr
    assert r["own_files"] == "ok" and r["own_bashrc"] == "ok", r   # controls
    for name, v in r.items():
        if not name.startswith("own"):
            assert v in DENIED, (name, v)
    assert open(os.path.join(planted_home, ".bashrc"), "rb").read() == before
    for n in ("x",):
        assert not os.path.exists(os.path.join(planted_home, ".cache/pip", n))
        assert not os.path.exists(os.path.join(planted_home, ".npm", n))
    # control: outside, the same identity may write the same files
    _, o = sb.outside_probe(r'''
attempt("append_real_bashrc", lambda: opened(os.path.join(P["real"], ".bashrc"),
                                             os.O_WRONLY | os.O_APPEND))
attempt("pip_cache", lambda: [os.listdir(os.path.join(P["real"], ".cache/pip"))] and None)
''', {"real": planted_home})
    assert o == {"append_real_bashrc": "ok", "pip_cache": "ok"}, o


def test_home_made_private_and_owned_by_the_agent(sandbox, homes, test_user):
    h = _home(sandbox, homes)
    p = sandbox.run(["true"])
    assert p.returncode == 0, p.stderr
    for d in (h, os.path.dirname(h), os.path.dirname(os.path.dirname(h))):
        st = os.lstat(d)
        assert stat.S_ISDIR(st.st_mode) and st.st_uid == test_user.pw_uid, d
        assert stat.S_IMODE(st.st_mode) & 0o022 == 0, (d, oct(st.st_mode))
    assert stat.S_IMODE(os.lstat(h).st_mode) == 0o700
    for n in (".bashrc", ".profile"):
        st = os.lstat(os.path.join(h, n))
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == test_user.pw_uid
    # a different workdir or profile gets a different home
    assert home_of(sandbox, "-p", "strict") != h
    p = sandbox.run(["true"], "--dry-run")
    assert f"home:     {h} " in p.stdout, p.stdout


@pytest.mark.parametrize("how", ["symlink", "world_writable", "other_owner", "parent_symlink"])
def test_suspicious_home_refused(sandbox, homes, test_user, outside_dir, how):
    if how == "other_owner" and sandbox.mode == "user":
        pytest.skip("only root can give the test account a directory of another owner")
    h = _home(sandbox, homes)
    parent = os.path.dirname(h)
    os.makedirs(parent, exist_ok=True)
    target = os.path.join(outside_dir, "elsewhere")
    os.mkdir(target)
    os.chown(target, test_user.pw_uid, test_user.pw_gid)
    moved = None
    if how == "symlink":
        os.symlink(target, h)
    elif how == "parent_symlink":
        moved = parent + ".real"
        os.rename(parent, moved)
        os.symlink(target, parent)
    else:
        os.mkdir(h)
        os.chmod(h, 0o777 if how == "world_writable" else 0o700)
        os.chown(h, 0 if how == "other_owner" else test_user.pw_uid, test_user.pw_gid)
    try:
        p = sandbox.run(["true"])
        assert p.returncode == 125, (p.returncode, p.stderr)
        assert "agent home" in p.stderr and "refusing to run" in p.stderr, p.stderr
        assert {"symlink": "is a symbolic link", "parent_symlink": "is a symbolic link",
                "world_writable": "writable by other users",
                "other_owner": "owned by uid 0"}[how] in p.stderr, p.stderr
        assert os.listdir(target) == [], "confine wrote through the planted path"
    finally:
        if moved:
            os.unlink(parent)
            os.rename(moved, parent)
        elif os.path.islink(h):
            os.unlink(h)
        else:
            shutil.rmtree(h)
    # control: once the path is clean, the same run works
    p = sandbox.run(["true"])
    assert p.returncode == 0, p.stderr


AGENT_FILES = {
    ".claude/settings.json": '{"hooks": {}}\n',
    ".claude/projects/old/s.jsonl": "{}\n",
    ".claude.json": "{}\n",
    ".codex/config.toml": "model = 'x'\n",
    ".codex/auth.json": "{}\n",
}


@pytest.fixture
def agent_files(test_user):
    home = test_user.pw_dir
    for t in (".claude", ".codex", ".claude.json"):
        p = os.path.join(home, t)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
    for rel, text in AGENT_FILES.items():
        p = os.path.join(home, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        if rel.endswith("auth.json"):
            os.chmod(p, 0o600)          # as Codex makes it (a login: logins: in the profile)
    for t in (".claude", ".codex", ".claude.json"):
        top = os.path.join(home, t)
        os.lchown(top, test_user.pw_uid, test_user.pw_gid)
        for dirpath, dirnames, filenames in os.walk(top):
            for n in dirnames + filenames:
                os.lchown(os.path.join(dirpath, n), test_user.pw_uid, test_user.pw_gid)
    yield home
    for t in (".claude", ".codex", ".claude.json"):
        p = os.path.join(home, t)
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)


BODY_GRANTS = r'''
H = os.environ["HOME"]
def p(rel):
    return os.path.join(H, rel)
if P["profile"] == "claude-code":
    attempt("transcript", lambda: opened(p(".claude/projects/old/new.jsonl"),
                                         os.O_WRONLY | os.O_CREAT))
    attempt("claude_json", lambda: opened(p(".claude.json"), os.O_WRONLY | os.O_APPEND))
    attempt("todos", lambda: (os.makedirs(p(".claude/todos"), exist_ok=True),
                              opened(p(".claude/todos/t.json"), os.O_WRONLY | os.O_CREAT))[-1])
    attempt("deny:settings", lambda: opened(p(".claude/settings.json"), os.O_WRONLY | os.O_APPEND))
    # a state root (policy/stateroots.py): a protected name is refused (a mkdir of it
    # would be held, outside ~/.claude)
    attempt("deny:hooks", lambda: os.symlink("/tmp", p(".claude/hooks")))
    attempt("newstate", lambda: opened(p(".claude/new-in-a-later-release.json"),
                                       os.O_WRONLY | os.O_CREAT))
else:
    attempt("auth", lambda: opened(p(".codex/auth.json"), os.O_WRONLY | os.O_APPEND))
    attempt("sessions", lambda: (os.makedirs(p(".codex/sessions"), exist_ok=True),
                                 opened(p(".codex/sessions/s.jsonl"),
                                        os.O_WRONLY | os.O_CREAT))[-1])
    attempt("deny:config", lambda: opened(p(".codex/config.toml"), os.O_WRONLY | os.O_APPEND))
    attempt("deny:rules", lambda: os.symlink("/tmp", p(".codex/rules")))
    attempt("newstate", lambda: opened(p(".codex/state_9.sqlite"), os.O_WRONLY | os.O_CREAT))
attempt("gitconfig", lambda: read_file(p(".gitconfig")))
'''


@pytest.mark.parametrize("layers", ["all", "landlock"])
@pytest.mark.parametrize("profile", ["claude-code", "codex"])
def test_agent_profile_grants_work_through_the_agent_home(sandbox, planted_home, agent_files,
                                                          homes, profile, layers):
    sb = _layers(sandbox, layers)
    h = _home(sb, homes, "-p", profile)
    no_login = profile == "codex" and layers == "landlock"
    if no_login:
        # a login file (~/.codex/auth.json, logins:) is given as a placeholder copy bound
        # over it; without a mount namespace that cannot be: refused by name, not shown
        p = sb.run(["true"], "-p", profile)
        assert p.returncode == 125 and "needs a mount namespace" in p.stderr, p.stderr
        os.unlink(os.path.join(agent_files, ".codex/auth.json"))
    p, r = sb.probe(BODY_GRANTS, {"profile": profile}, "-p", profile)
    assert r is not None, p.stderr
    for name, v in r.items():
        if name.startswith("deny:"):
            assert v in DENIED, (name, v)
        elif not (no_login and name == "auth"):
            assert v == "ok", (name, v, p.stderr)
    top = ".claude" if profile == "claude-code" else ".codex"
    assert os.readlink(os.path.join(h, top)) == os.path.join(agent_files, top)
    assert open(os.path.join(agent_files, ".codex/config.toml")).read() \
        == AGENT_FILES[".codex/config.toml"]
    assert not os.path.lexists(os.path.join(agent_files, top, "hooks" if top == ".claude"
                                            else "rules"))
    if profile == "claude-code":
        assert os.path.isfile(os.path.join(agent_files, ".claude/projects/old/new.jsonl"))
        assert open(os.path.join(agent_files, ".claude/settings.json")).read() \
            == AGENT_FILES[".claude/settings.json"]
    else:
        assert os.path.isfile(os.path.join(agent_files, ".codex/sessions/s.jsonl"))


BODY_CODEX_SOCKET = r'''
import time
H = os.environ["HOME"]
C = os.environ.get("CODEX_HOME") or os.path.join(H, ".codex")     # as codex finds it
R["codex_home"] = C
d = os.path.join(C, "app-server-control")
path = os.path.join(d, "app-server-control.sock")
def serve():
    os.makedirs(d, exist_ok=True)           # what codex does: create the dir if missing
    if os.path.lexists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    pid = os.fork()
    if pid == 0:                            # a second process connects, as the TUI does
        try:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(path)
            c.sendall(b"ready?")
            os._exit(0 if c.recv(16) == b"ready" else 3)
        except OSError as e:
            os._exit(e.errno or 4)
    conn, _ = srv.accept()
    if conn.recv(16) != b"ready?":
        return "bad request"
    conn.sendall(b"ready")
    _, st = os.waitpid(pid, 0)
    return "ok" if st == 0 else "client:%d" % os.waitstatus_to_exitcode(st)
attempt("app_server", serve)
def elsewhere():                            # control: the real HOME beside ~/.codex stays closed
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(os.path.dirname(os.path.realpath(C)), "other.sock"))
attempt("deny:other_socket", elsewhere)
'''


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_codex_app_server_socket(sandbox, agent_files, homes, layers):
    sb = _layers(sandbox, layers)
    _home(sb, homes, "-p", "codex")
    if layers == "landlock":
        # no mount namespace: a login file would refuse the run (see above)
        os.unlink(os.path.join(agent_files, ".codex/auth.json"))
    p, r = sb.probe(BODY_CODEX_SOCKET, {}, "-p", "codex")
    assert r is not None, p.stderr
    assert r["app_server"] == "ok", (r, p.stderr)
    assert r["codex_home"] == os.path.join(agent_files, ".codex")
    assert r["deny:other_socket"] in DENIED, r
    assert not os.path.exists(os.path.join(agent_files, "other.sock"))


def test_links_put_back_and_planted_symlinks_never_followed(sandbox, planted_home, homes,
                                                           test_user, outside_dir):
    """What the agent leaves in its home between runs cannot turn confine's own
    preparation (which runs unconfined, as the agent's uid) against the user: a
    symlink planted where confine makes a directory is replaced, not followed; a
    file put where a grant's link belongs is moved aside and the link comes back."""
    gitdir = os.path.join(planted_home, ".config", "git")
    os.makedirs(gitdir, exist_ok=True)
    made_cfg = not os.path.exists(os.path.join(gitdir, "config"))
    if made_cfg:
        with open(os.path.join(gitdir, "config"), "w") as f:
            f.write("[color]\n\tui = auto\n")
    for p in (os.path.dirname(gitdir), gitdir, os.path.join(gitdir, "config")):
        os.lchown(p, test_user.pw_uid, test_user.pw_gid)
    try:
        h = _home(sandbox, homes)
        script = (f"rm -rf ~/.config && ln -s {outside_dir} ~/.config && "
                  "rm ~/.gitconfig && echo '[user]' > ~/.gitconfig && echo planted")
        p = sandbox.run(["sh", "-c", script])
        assert p.stdout.strip() == "planted", p.stderr          # control: its own home
        assert os.readlink(os.path.join(h, ".config")) == outside_dir
        p = sandbox.run(["sh", "-c", "cat ~/.config/git/config ~/.gitconfig"])
        assert p.returncode == 0, p.stderr
        assert "ui = auto" in p.stdout and "Confine Test" in p.stdout, p.stdout
        assert os.listdir(outside_dir) == [], "confine followed the planted symlink"
        assert not os.path.islink(os.path.join(h, ".config"))
        assert os.readlink(os.path.join(h, ".gitconfig")) == os.path.join(planted_home,
                                                                          ".gitconfig")
        with open(os.path.join(h, ".gitconfig.confine-displaced")) as f:
            assert f.read() == "[user]\n"
    finally:
        if made_cfg:
            os.unlink(os.path.join(gitdir, "config"))


def test_odd_workdir_name_and_concurrent_runs(sandbox, homes, test_user):
    """A workdir name with spaces, a newline, non-ASCII and 200 more characters gives
    a plain, bounded home name; two runs starting at once on the same home both work
    (one of them makes it, the other finds it made)."""
    odd = os.path.join(sandbox.workdir, "we ird\nname-\u00fc-" + "x" * 200)
    os.mkdir(odd)
    os.chown(odd, test_user.pw_uid, test_user.pw_gid)
    import copy
    sb = copy.copy(sandbox)
    sb.workdir = odd
    h = _home(sb, homes)
    name = os.path.basename(h)
    assert len(name) < 100 and name.isascii() and "\n" not in name and " " not in name, name
    procs = [sb.popen(["sh", "-c", "echo x >> ~/.bash_history && cat ~/.bashrc >/dev/null "
                       "&& echo $HOME"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      text=True) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == h, (out, err)
    assert open(os.path.join(h, ".bash_history")).read() == "x\nx\nx\n"


def test_xdg_state_home_honoured_and_never_in_the_workdir(user_sandbox, homes, outside_dir):
    """Started by the account itself, its own XDG_STATE_HOME places the home; one
    that would put the home in the workdir is refused (control: elsewhere, it works)."""
    sb = user_sandbox
    inside = os.path.join(sb.workdir, "state")
    p = sb.run(["true"], env_extra=[f"XDG_STATE_HOME={inside}"])
    assert p.returncode == 125 and "overlaps the workdir" in p.stderr, p.stderr
    assert not os.path.exists(inside)
    p = sb.run(["sh", "-c", "echo $HOME"], env_extra=[f"XDG_STATE_HOME={outside_dir}"])
    assert p.returncode == 0, p.stderr
    homes.append(p.stdout.strip())
    assert p.stdout.strip().startswith(os.path.join(outside_dir, "confine", "homes") + "/")
    p = sb.run(["true"], env_extra=["XDG_STATE_HOME=/etc/x"])
    assert p.returncode == 125 and "system directory" in p.stderr, p.stderr


BODY_OWN_SOCKET = r'''
H = os.environ["HOME"]
def serve(path):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    conn, _ = srv.accept()
    c.sendall(b"x")
    return "ok" if conn.recv(1) == b"x" else "bad"
attempt("own_agent_socket", lambda: serve(os.path.join(H, ".gnupg", "S.gpg-agent")))
def via_link():
    os.symlink(P["outside"], os.path.join(H, "outside.sock"))
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(os.path.join(H, "outside.sock"))
attempt("deny:link_to_outside_socket", via_link)
'''


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_servers_in_the_agent_home_reachable_links_out_of_it_not(sandbox, homes, test_user,
                                                                 outside_dir, layers):
    """A per-user server the agent starts with its socket in its home (gpg-agent's
    ~/.gnupg) can be reached; a link in the home to a socket outside cannot (the
    mediation judges the resolved path). Control: the outside socket accepts the
    same identity outside."""
    import socket
    sb = _layers(sandbox, layers)
    _home(sb, homes)
    path = os.path.join(outside_dir, "srv.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chown(path, test_user.pw_uid, test_user.pw_gid)
    srv.listen(8)
    try:
        p, r = sb.probe(BODY_OWN_SOCKET, {"outside": path})
        assert r is not None, p.stderr
        assert r["own_agent_socket"] == "ok", (r, p.stderr)
        assert r["deny:link_to_outside_socket"] in DENIED, r
        _, o = sb.outside_probe(r'''
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
attempt("connect", lambda: c.connect(P["outside"]))
''', {"outside": path})
        assert o == {"connect": "ok"}, o
    finally:
        srv.close()


def test_no_agent_home_keeps_the_accounts_home(sandbox, homes):
    h = _home(sandbox, homes)
    p = sandbox.run(["sh", "-c", "echo $HOME ${XDG_CACHE_HOME-unset} $TMUX_TMPDIR $TMPDIR"],
                    "--no-agent-home")
    assert p.returncode == 0, p.stderr
    home, xdg, tmux, tmp = p.stdout.split()
    assert (home, xdg) == (sandbox.agent.pw_dir, "unset")
    assert tmux == tmp and tmp.startswith("/tmp/confine-")   # tmux inside: its own server
    assert not os.path.exists(h)


def test_claude_json_saved_like_claude_code_reaches_the_real_file(sandbox, agent_files, homes):
    """Claude Code saves ~/.claude.json by resolving a link one hop, writing a
    temporary file beside the target and renaming it; where that fails it writes in
    place (with a refusal). The agent home holds a copy of its own (filesystem.copied):
    the atomic save works there, and the real file gets it at exit."""
    _home(sandbox, homes, "-p", "claude-code")
    code = r'''
import os, json
p = os.path.expanduser("~/.claude.json")
target = os.path.join(os.path.dirname(p), os.readlink(p)) if os.path.islink(p) else p
data = json.dumps({"numStartups": 2})
try:
    tmp = target + ".tmp.1"
    with open(tmp, "w") as f:
        f.write(data)
    os.rename(tmp, target)
    how = "atomic"
except OSError:
    with open(target, "w") as f:
        f.write(data)
    how = "in place"
print(json.dumps({"how": how, "islink": os.path.islink(p)}))
'''
    p, r = sandbox.py(code, "-p", "claude-code")
    assert r == {"how": "atomic", "islink": False}, (r, p.stderr)
    assert p.returncode == 0 and "denied" not in p.stderr, p.stderr
    with open(os.path.join(agent_files, ".claude.json")) as f:
        assert json.load(f) == {"numStartups": 2}


def test_home_of_a_vanished_workdir_is_removed(sandbox, homes, test_user):
    """An agent framework's temporary workdirs would leave one home each: the next
    run removes the homes whose workdir is gone (control: one whose workdir is there
    stays)."""
    import copy
    boxes = []
    for n in ("gone", "kept"):
        d = os.path.join(sandbox.workdir, n)
        os.mkdir(d)
        os.chown(d, test_user.pw_uid, test_user.pw_gid)
        sb = copy.copy(sandbox)
        sb.workdir = d
        boxes.append((sb, _home(sb, homes)))
    for sb, _ in boxes:
        assert sb.run(["true"]).returncode == 0
    os.rmdir(boxes[0][0].workdir)
    p = sandbox.run(["true"])
    assert p.returncode == 0, p.stderr
    homes.append(home_of(sandbox))
    assert not os.path.exists(boxes[0][1]) and os.path.isdir(boxes[1][1])


def test_home_the_agent_vandalised_still_runs_and_is_never_written_through(
        sandbox, planted_home, homes):
    """The agent takes permissions away in its home and points its rc files at the
    user's: the next run still starts (confine only says what it could not make) and
    confine writes nothing through those links."""
    h = _home(sandbox, homes)
    real = os.path.join(planted_home, ".bashrc")
    before = open(real, "rb").read()
    p = sandbox.run(["sh", "-c", f"chmod 000 ~/.cache ~/.config && rm ~/.bashrc ~/.profile && "
                                 f"ln -s {real} ~/.bashrc && ln -s {real} ~/.profile && echo done"])
    assert p.stdout.strip() == "done", p.stderr
    p = sandbox.run(["sh", "-c", "echo $HOME"])
    assert p.returncode == 0 and p.stdout.strip() == h, p.stderr
    assert open(real, "rb").read() == before
    assert os.readlink(os.path.join(h, ".bashrc")) == real      # left as the agent made it
    p = sandbox.run(["cat", os.path.expanduser(os.path.join(h, ".bashrc"))])
    assert p.returncode != 0 and "Permission denied" in p.stderr  # and it reaches nothing


def test_no_place_for_a_home_gives_a_fresh_one_for_the_run(user_sandbox):
    """An account whose HOME cannot hold one (HOME=/nonexistent, as on CI systems)
    gets a fresh agent home in the run's TMPDIR, said on stderr, never its own HOME;
    a suspicious home stays refused (test_suspicious_home_refused)."""
    sb = user_sandbox
    p = sb.run(["sh", "-c", "echo $HOME $TMPDIR; test -f ~/.bashrc && echo rc; "
                            "echo x > ~/f && echo wrote"], env_extra=["HOME=/nonexistent"])
    assert p.returncode == 0, p.stderr
    home, tmp, *rest = p.stdout.split()
    assert home.startswith("/tmp/confine-home-") and rest == ["rc", "wrote"], p.stdout
    assert "HOME is a fresh one" in p.stderr and "/nonexistent" in p.stderr, p.stderr
    assert not os.path.exists(home) and not os.path.exists(tmp), "left behind"


def test_account_without_a_home_gets_a_fresh_one(root_sandbox):
    """Started as root for an account whose home does not exist (nobody's
    /nonexistent): a fresh home for the run, removed afterwards."""
    sb = root_sandbox
    os.chmod(sb.workdir, 0o777)
    p = sb.run(["sh", "-c", "echo $HOME; echo x > ~/f && id -un"], "--user", "nobody")
    assert p.returncode == 0, p.stderr
    home, user = p.stdout.split()
    assert home.startswith("/tmp/confine-home-") and user == "nobody", p.stdout
    assert not os.path.exists(home)


def test_refusal_through_the_agent_homes_link_names_the_granted_path(sandbox, homes, test_user):
    """A write refused through the agent home's link to a read grant is named by the
    granted path (where a grant could work), never by the link in confine's own state
    (where none can). Control: the same write outside confine works."""
    d = os.path.join(test_user.pw_dir, f".confine-tool-{uuid.uuid4().hex[:8]}")
    os.mkdir(d)
    os.chown(d, test_user.pw_uid, test_user.pw_gid)
    prof = sandbox.workdir + "-tool.yaml"
    with open(prof, "w") as f:
        f.write(f"extends: default\nfilesystem:\n  read: ['{d}']\n")
    os.chmod(prof, 0o644)
    try:
        h = _home(sandbox, homes, "-p", prof)
        rel = os.path.basename(d)
        p = sandbox.run(["sh", "-c", f'echo x > "$HOME/{rel}/new"; echo "status $?"'], "-p", prof)
        assert "status 0" not in p.stdout, p.stdout + p.stderr
        assert not os.path.exists(os.path.join(d, "new"))
        line = next((ln for ln in p.stderr.splitlines() if "denied:" in ln), "")
        assert f"create {d}/new" in line, p.stderr
        said = [ln for ln in p.stderr.splitlines() if ln.startswith("confine:")]
        assert not any(h in ln or "/confine/homes/" in ln for ln in said), p.stderr
        assert sandbox.outside(["sh", "-c", f'echo x > "{d}/new"']).returncode == 0
    finally:
        os.unlink(prof)
        shutil.rmtree(d, ignore_errors=True)
