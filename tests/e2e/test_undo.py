"""Nothing in the workdir lost for good (issue 25 item 3, confine/undo/).

Real runs, as root with `--user` (the agent is the test account) and as the
unprivileged test account itself, each with a state directory of the test's
own (a private /var/lib/confine as root, XDG_STATE_HOME unprivileged), so
`--last` is this test's run and no other run on the machine is touched.

* `rm -rf src` (100 files in nested directories, modes, mtimes, a symlink,
  an executable) is undone byte for byte, modes and times included; the
  control is that src really was gone before `confine undo --last`; a file
  made and removed during the run is not kept;
* `mv a b` over an existing b, `> file`, and a `git checkout -- .` that
  rewrites changed files are undone by run id; a file the person changed
  after the run is not overwritten without --force (said), and is with it;
* a tiny CONFINE_KEEP_BYTES: what did not fit is said in one line at exit;
* the undo area cannot be read, written or removed from inside a later run;
  the control is the same attempt by the person outside, which works;
* approvals (the profile's `approvals: deletions: {ask_above: 20}`) through a
  scripted --approver: denied, the
  rm -rf of 100 files deletes nothing; allowed, all go and come back with
  `confine undo`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import tempfile

import pytest
from conftest import PY

GIT_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_COUNT": "1",
           "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*"}


@pytest.fixture
def own_state(sandbox):
    """The sandbox with a state directory of the test's own; the undo store's path."""
    d = tempfile.mkdtemp(prefix="confine-undo-state-")
    if sandbox.mode == "root":
        os.makedirs("/var/lib/confine", mode=0o755, exist_ok=True)
        sandbox.wrap = ["unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
                        'mount --bind "$0" /var/lib/confine && exec "$@"', d]
        store = os.path.join(d, "undo")
    else:
        os.chown(d, sandbox.pw.pw_uid, sandbox.pw.pw_gid)
        sandbox.env = sandbox.env + [f"XDG_STATE_HOME={d}"]
        store = os.path.join(d, "confine", "undo")
    yield sandbox, store
    shutil.rmtree(d, ignore_errors=True)


def _own(sb, path: str) -> None:
    os.chown(path, sb.agent.pw_uid, sb.agent.pw_gid, follow_symlinks=False)


def _tree(sb, top: str) -> None:
    """100 files below top: nested directories, modes, distinct old mtimes,
    an executable, a symlink."""
    n = 0
    for d in ("", "a", "a/b", "a/b/c", "d"):
        os.makedirs(os.path.join(top, d), exist_ok=True)
    for i in range(99):
        d = ("", "a", "a/b", "a/b/c", "d")[i % 5]
        p = os.path.join(top, d, f"f{i}.txt")
        with open(p, "wb") as f:
            f.write(os.urandom(i * 37) + f"file {i}\n".encode())
        os.chmod(p, (0o600, 0o640, 0o644, 0o444)[i % 4])
        os.utime(p, ns=(1_600_000_000_000_000_000 + i * 7, 1_500_000_000_000_000_000 + i * 1000))
        n += 1
    exe = os.path.join(top, "a", "run.sh")
    with open(exe, "w") as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(exe, 0o755)
    os.symlink("../d/f4.txt", os.path.join(top, "a", "link"))
    for root, dirs, files in os.walk(top):
        _own(sb, root)
        for x in dirs + files:
            _own(sb, os.path.join(root, x))
    for d, mode in (("a/b/c", 0o700), ("d", 0o750), ("a/b", 0o755), ("a", 0o755), ("", 0o755)):
        os.chmod(os.path.join(top, d), mode)
        os.utime(os.path.join(top, d), ns=(1_400_000_000_000_000_000, 1_400_000_000_000_000_000))


def _state(top: str) -> dict:
    """Every entry below top: kind, mode, mtime, and content or target."""
    out = {}
    for root, dirs, files in os.walk(top):
        for x in [""] + dirs + files:
            p = os.path.join(root, x) if x else root
            st = os.lstat(p)
            rel = os.path.relpath(p, top)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, f.read(),
                                st.st_uid)
    return out


def _runs(sb) -> list:
    p = sb.confine("runs", "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _last(sb) -> str:
    return _runs(sb)[-1]["run"]


def test_rm_rf_src_is_undone_byte_for_byte(own_state):
    sb, store = own_state
    src = os.path.join(sb.workdir, "src")
    _tree(sb, src)
    before = _state(src)
    assert sum(1 for v in before.values() if v[0] != "dir") == 101
    p = sb.run(["sh", "-c", "rm -rf src && echo new > new.txt && rm new.txt"])
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(src)           # control: it really went
    assert "undo:" not in p.stderr, p.stderr        # kept is not said; not kept would be
    listed = _runs(sb)
    run = listed[-1]["run"]
    assert sum(1 for e in listed[0]["paths"] if e["kind"] != "dir" and e["kept"]) == 101
    assert [r["run"] for r in listed] == [run]
    paths = {e["path"] for e in listed[0]["paths"]}
    assert "new.txt" not in paths                   # made during the run: not kept
    assert "src/a/run.sh" in paths and "src/a/link" in paths
    q = sb.confine("undo", "--last")
    assert q.returncode == 0, q.stdout + q.stderr
    assert "101 put back" in q.stdout, q.stdout
    assert _state(src) == before
    # a second undo finds everything as kept
    q = sb.confine("undo", run)
    assert q.returncode == 0 and "0 put back" in q.stdout and "101 already" in q.stdout, q.stdout


def test_overwrites_are_undone_and_later_changes_kept(own_state):
    sb, store = own_state
    wd = sb.workdir
    files = {"a": b"old a\n", "b": b"old b\n", "t": b"truncate me\n", "w": b"keep me\n",
             "g1.txt": b"committed 1\n", "g2.txt": b"committed 2\n"}
    for n, data in files.items():
        with open(os.path.join(wd, n), "wb") as f:
            f.write(data)
    git = ["git", "-C", wd]
    subprocess.run(git + ["init", "-q"], check=True, env=GIT_ENV)
    subprocess.run(git + ["add", "g1.txt", "g2.txt"], check=True, env=GIT_ENV)
    subprocess.run(git + ["commit", "-qm", "c"], check=True, env=GIT_ENV)
    # the person's edits, not committed: `git checkout -- .` throws them away
    for n in ("g1.txt", "g2.txt"):
        with open(os.path.join(wd, n), "wb") as f:
            f.write(b"edited " + n.encode() + b"\n")
    subprocess.run(["chown", "-R", f"{sb.agent.pw_uid}:{sb.agent.pw_gid}", wd], check=True)
    before = _state(wd)
    p = sb.run(["sh", "-c", "mv a b && : > t && printf more >> w && git checkout -q -- ."],
               env_extra=["GIT_CONFIG_NOSYSTEM=1"])
    assert p.returncode == 0, p.stderr
    with open(os.path.join(wd, "g1.txt"), "rb") as f:
        assert f.read() == b"committed 1\n"         # control: the edits really went
    assert os.path.getsize(os.path.join(wd, "t")) == 0 and not os.path.exists(
        os.path.join(wd, "a"))
    run = _last(sb)
    ops = {e["path"]: e["op"] for e in _runs(sb)[0]["paths"]}
    assert ops["b"] == "rename-over" and ops["a"] == "rename-away" and ops["t"] == "truncate"
    assert ops["w"] == "write" and ops["g1.txt"] in ("unlink", "rename-over")
    # the person changes b after the run: not overwritten without --force
    with open(os.path.join(wd, "b"), "ab") as f:
        f.write(b"mine\n")
    os.utime(os.path.join(wd, "b"))
    q = sb.confine("undo", run)
    assert q.returncode == 1, q.stdout + q.stderr
    assert "skipped b: changed after the run (--force puts it back over it)" in q.stdout, q.stdout
    with open(os.path.join(wd, "b"), "rb") as f:
        assert f.read().endswith(b"mine\n")
    after = _state(wd)
    for n in ("a", "t", "w", "g1.txt", "g2.txt"):
        assert after[n] == before[n], n
    q = sb.confine("undo", run, "b", "--force")
    assert q.returncode == 0, q.stdout + q.stderr
    assert _state(wd)["b"] == before["b"]


def test_what_did_not_fit_is_said(own_state):
    sb, store = own_state
    d = os.path.join(sb.workdir, "many")
    os.mkdir(d)
    for i in range(20):
        with open(os.path.join(d, f"f{i}"), "wb") as f:
            f.write(os.urandom(4096))
    subprocess.run(["chown", "-R", f"{sb.agent.pw_uid}:{sb.agent.pw_gid}", d], check=True)
    logdir = tempfile.mkdtemp(prefix="confine-undo-log-")
    os.chown(logdir, sb.pw.pw_uid, sb.pw.pw_gid)
    log = os.path.join(logdir, "log.jsonl")
    try:
        p = sb.run(["rm", "-rf", "many"], "--log", log, env_extra=["CONFINE_KEEP_BYTES=10K"])
        with open(log) as f:
            events = [json.loads(x) for x in f if '"undo"' in x]
    finally:
        shutil.rmtree(logdir)
    assert p.returncode == 0, p.stderr
    # each decision is in the run's event stream: kept (a link or a copy), not kept and why
    acts = [e["action"] for e in events if e.get("kind") == "undo"]
    assert acts.count("not kept") + sum(a in ("link", "copy") for a in acts) == 20, acts
    assert all("CONFINE_KEEP_BYTES" in e["why"] for e in events if e["action"] == "not kept")
    lines = [x for x in p.stderr.splitlines() if "NOT kept" in x]
    assert len(lines) == 1, p.stderr
    m = re.search(r"undo: (\d+) change\(s\) NOT kept .*over the 10.0 KiB a run may keep", lines[0])
    assert m and 15 <= int(m.group(1)) < 20, lines
    kept = sum(1 for e in _runs(sb)[-1]["paths"] if e["kind"] == "file" and e["kept"])
    assert kept >= 1 and kept + int(m.group(1)) == 20, p.stderr     # none dropped unseen


def test_the_undo_area_is_out_of_the_agents_reach(own_state):
    sb, store = own_state
    with open(os.path.join(sb.workdir, "x"), "w") as f:
        f.write("x\n")
    _own(sb, os.path.join(sb.workdir, "x"))
    p = sb.run(["rm", "x"])
    assert p.returncode == 0, p.stderr
    run = _last(sb)
    top = os.path.join(store, run)
    inside = "/var/lib/confine/undo/" + run if sb.mode == "root" else top
    body = r'''
d = P["d"]
attempt("read", lambda: open(d + "/entries.jsonl").read() and None)
attempt("list", lambda: os.listdir(d + "/files") and None)
attempt("write", lambda: open(d + "/files/planted", "w").close())
attempt("remove", lambda: os.unlink(d + "/files/00000001"))
print(json.dumps(R))
'''
    _, r = sb.probe(body, {"d": inside})
    assert all(v in ("EACCES", "ENOENT", "EPERM", "EROFS") for v in r.values()), r
    assert os.path.exists(os.path.join(top, "files", "00000001"))
    # control: the person (who started confine) reads it outside
    who = [] if sb.mode == "root" else ["setpriv", f"--reuid={sb.pw.pw_uid}",
                                         f"--regid={sb.pw.pw_gid}", "--clear-groups"]
    c = subprocess.run(who + [PY, "-c", f"print(open({os.path.join(top, 'entries.jsonl')!r})"
                                       ".read().count('\\n'))"],
                       capture_output=True, text=True)
    assert c.returncode == 0 and int(c.stdout) >= 1, c.stderr


def _approver(answer: str) -> str:
    d = tempfile.mkdtemp(prefix="confine-undo-approver-")
    os.chmod(d, 0o755)
    p = os.path.join(d, "approve.sh")
    with open(p, "w") as f:
        f.write(f"#!/bin/sh\ncat > {d}/asked\necho '{{\"decision\": \"{answer}\"}}'\n")
    os.chmod(p, 0o755)
    os.chmod(d, 0o777)
    return p


@pytest.mark.parametrize("answer", ["deny", "once"])
def test_deletions_above_the_threshold_are_asked(own_state, answer):
    sb, store = own_state
    src = os.path.join(sb.workdir, "src")
    _tree(sb, src)
    before = _state(src)
    approver = _approver(answer)
    prof = os.path.join(os.path.dirname(approver), "p.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\napprovals:\n  deletions: {ask_above: 20}\n")
    os.chmod(prof, 0o644)
    try:
        # twice: the second rm meets the files put back after the refusal
        p = sb.run(["sh", "-c", "rm -rf src; rm -rf src"], "-p", prof, "--approver", approver)
        with open(os.path.join(os.path.dirname(approver), "asked")) as f:
            q = json.loads(f.read())
    finally:
        shutil.rmtree(os.path.dirname(approver))
    assert q["kind"] == "deletions" and q["subject"]["count"] == 21, q
    if answer == "deny":
        assert p.returncode != 0
        assert "not approved" in p.stderr and "Permission denied" in p.stderr, p.stderr
        assert _state(src) == before             # nothing is deleted
        assert _runs(sb)[-1]["deletions_refused"] is True
        return
    assert p.returncode == 0, p.stderr
    assert not os.path.exists(src)               # allowed: all of it went
    q2 = sb.confine("undo", "--last")
    assert q2.returncode == 0, q2.stdout + q2.stderr
    assert _state(src) == before


def test_a_deletion_rule_on_a_path(own_state):
    """approvals.deletions rules judge each deletion of a start file by its path: a
    rule denying src/** refuses `rm` there (the file stays, the run goes on), while a
    deletion elsewhere, decided by no rule, goes through (the control)."""
    sb, _ = own_state
    src = os.path.join(sb.workdir, "src")
    _tree(sb, src)
    other = os.path.join(sb.workdir, "notes.txt")
    with open(other, "w") as f:
        f.write("notes\n")
    _own(sb, other)
    before = _state(src)
    d = tempfile.mkdtemp(prefix="confine-undo-rule-")
    os.chmod(d, 0o755)
    prof = os.path.join(d, "p.yaml")
    with open(prof, "w") as f:
        f.write("extends: default\napprovals:\n  deletions:\n    rules:\n"
                "      - match: 'src/**'\n        decision: deny\n"
                "        examples: {match: [src/a.txt], no_match: [notes.txt]}\n")
    os.chmod(prof, 0o644)
    try:
        p = sb.run(["sh", "-c", "rm -f src/*.txt; rm notes.txt; echo GONE"], "-p", prof)
    finally:
        shutil.rmtree(d)
    assert "GONE" in p.stdout, p.stderr
    assert "refused by approvals.deletions" in p.stderr, p.stderr
    assert _state(src) == before                 # nothing under src/ deleted
    assert not os.path.exists(other)             # the control went
