"""The run's record (issue 25 item 4, confine/journal/): real confined runs, started
as root with --user and as the unprivileged test account (tests/conftest.py removes
the records of a test's runs after it).

* A run refused by the name guard, the mediator (a unix socket outside the grants),
  the gateway (a name no rule allows) and Landlock (a read outside the grants) has
  each refusal in its record, Landlock's own where the kernel reports them (a run
  started as root with the kernel's audit on: the `kernel_audit` fixture); `confine
  log show` lists them, `confine log verify` passes, and copies with a byte changed,
  a line removed, two lines swapped or the last line removed fail it, each with its
  own message and status. `--log FILE` holds the same bytes.
* The agent cannot write, remove or replace a record, or read the key; the person
  can read it (and, unprivileged, the same account outside the sandbox can open it:
  the refusal inside is confine's). A grant that would reach the key, or a state
  directory inside the workdir, refuses the run.
* A flood of refusals is capped, and the cap is one "dropped" line counting them.
* The exit check's findings, the held files and the status it sets are lines too
  (without a mount namespace, where the exit check is what restores a protected file).

The gateway's refusal is a DNS query for a name no rule allows, answered by
confine's own DNS server (nothing leaves the machine; test_egress has the
controls for the gateway's verdicts).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile

import pytest
from conftest import PY, Sandbox
from test_refusals import kernel_audit  # noqa: F401 - Landlock's refusals reach audit

RUNS_AS_ROOT = "/var/lib/confine/runs"


def _base(sb: Sandbox) -> str:
    return RUNS_AS_ROOT if sb.mode == "root" else os.path.join(
        sb.pw.pw_dir, ".local", "state", "confine", "runs")


def _records(sb: Sandbox) -> list[str]:
    """The records of runs in this sandbox's workdir, oldest first (other tests and
    other checkouts run confine at the same time: never --last here)."""
    base, wd, out = _base(sb), os.path.realpath(sb.workdir), []
    for n in os.listdir(base):
        p = os.path.join(base, n)
        try:
            with open(p, "rb") as f:
                start = json.loads(f.readline())
        except (OSError, ValueError):
            continue
        if start.get("workdir") == wd:
            out.append((os.stat(p).st_mtime_ns, p))
    return [p for _, p in sorted(out)]


@pytest.fixture
def unix_server():
    d = tempfile.mkdtemp(prefix="confine-sock-", dir="/tmp")
    os.chmod(d, 0o755)
    path = os.path.join(d, "app.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(8)
    yield path
    srv.close()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def outside_file(test_user):
    """A file the agent's account may read, outside every grant: Landlock refuses it."""
    d = tempfile.mkdtemp(prefix="confine-rec-", dir="/tmp")
    os.chmod(d, 0o755)
    p = os.path.join(d, "notes.txt")
    with open(p, "w") as f:
        f.write("outside\n")
    os.chmod(p, 0o644)
    yield p
    shutil.rmtree(d, ignore_errors=True)


ATTEMPTS = r"""
import json, os, socket, sys
R = {}
def run(name, fn):
    try:
        fn()
        R[name] = "ok"
    except OSError as e:
        R[name] = e.errno
    except Exception as e:
        R[name] = type(e).__name__
run("guard", lambda: os.symlink("x", ".envrc"))
run("ordinary", lambda: os.symlink("x", "envrc"))
run("unix", lambda: socket.socket(socket.AF_UNIX).connect(sys.argv[1]))
run("landlock", lambda: open(sys.argv[2]).read())
run("dns", lambda: socket.getaddrinfo("other.test", 443))
print(json.dumps(R))
"""


def _show(sb: Sandbox, path: str) -> list[dict]:
    p = sb.confine("log", "show", "--json", path)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()]


def _copy(sb: Sandbox, lines: list[bytes], where: str, name: str) -> str:
    p = os.path.join(where, name)
    with open(p, "wb") as f:
        f.write(b"".join(lines))
    os.chown(p, sb.pw.pw_uid, sb.pw.pw_gid)
    return p


def test_record_lists_the_run_and_verify_catches_each_edit(sandbox, unix_server, outside_file,
                                                           request):
    sb = sandbox
    kernel = False
    if sb.mode == "root":
        try:
            request.getfixturevalue("kernel_audit")
            kernel = True
        except pytest.skip.Exception:
            pass        # the record then says Landlock's refusals were not seen (below)
    ctl = sb.outside([PY, "-c", ATTEMPTS, unix_server, outside_file])
    ctl_r = json.loads(ctl.stdout.splitlines()[-1])
    assert ctl_r["unix"] == "ok" and ctl_r["landlock"] == "ok", ctl.stderr   # the controls
    os.unlink(os.path.join(sb.workdir, ".envrc"))
    os.unlink(os.path.join(sb.workdir, "envrc"))
    logdir = tempfile.mkdtemp(prefix="confine-log-", dir="/tmp")
    os.chown(logdir, sb.pw.pw_uid, sb.pw.pw_gid)
    log = os.path.join(logdir, "run.log")
    p = sb.run([PY, "-c", ATTEMPTS, unix_server, outside_file], "--allow-host", "allowed.test",
               "--log", log)
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["guard"] == 13 and r["ordinary"] == "ok", (r, p.stderr)
    assert r["unix"] != "ok" and r["landlock"] == 13 and r["dns"] != "ok", (r, p.stderr)
    (path,) = _records(sb)
    st = os.stat(path)
    assert st.st_mode & 0o777 == 0o600
    assert st.st_uid == (sb.pw.pw_uid if sb.mode == "user" else 0)
    assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
    recs = _show(sb, path)
    run = recs[0]["run"]
    assert [x["seq"] for x in recs] == list(range(len(recs)))
    assert recs[0]["event"] == "start" and recs[-1]["event"] == "end"
    layers = [x.get("layer") for x in recs if x["event"] == "refusal"]
    assert "name guard" in layers and "mediation" in layers, recs
    assert any(x["event"] == "dns" and x.get("name") == "other.test"
               and x.get("decision") == "deny" for x in recs), recs
    if kernel:
        assert any(x.get("layer") == "landlock" and outside_file in str(x.get("what"))
                   for x in recs), recs
    else:
        assert any(x["event"] == "notice" and "landlock" in x["what"] for x in recs), recs
    assert any(x["event"] == "exit_check" and x["what"] == "summary" for x in recs)
    assert [x for x in recs if x["event"] == "status"][0]["status"] == 0
    human = sb.confine("log", "show", run)
    assert human.returncode == 0, human.stderr
    assert "denied [name guard]" in human.stdout and "other.test" in human.stdout
    assert sb.confine("log", "path", run).stdout.strip() == path
    ok = sb.confine("log", "verify", run)
    assert ok.returncode == 0 and "ok:" in ok.stdout, ok.stderr
    # --log FILE: the same bytes, verified the same way
    with open(path, "rb") as a, open(log, "rb") as b:
        assert a.read() == b.read()
    assert sb.confine("log", "verify", log).returncode == 0
    shutil.rmtree(logdir)
    # copies, edited: each fails with its own line and status
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    assert len(lines) >= 7
    k = 3
    byte = bytearray(lines[k])
    i = byte.index(b'"event"') + 2
    byte[i] ^= 0x01
    d = tempfile.mkdtemp(prefix="confine-rec-", dir="/tmp")
    os.chown(d, sb.pw.pw_uid, sb.pw.pw_gid)
    try:
        cases = {
            "byte": (lines[:k] + [bytes(byte)] + lines[k + 1:], 1, f"line {k + 1}: edited"),
            "removed": (lines[:k] + lines[k + 1:], 1, f"line {k + 1}: 1 line(s) removed"),
            "swapped": (lines[:k] + [lines[k + 1], lines[k]] + lines[k + 2:], 1,
                        f"line {k + 1}: out of order"),
            "last": (lines[:-1], 2, f"line {len(lines) - 1}: not closed"),
        }
        for name, (content, code, msg) in cases.items():
            c = _copy(sb, content, d, name)
            v = sb.confine("log", "verify", c)
            assert v.returncode == code and msg in v.stderr, (name, v.returncode, v.stderr)
            assert len(v.stderr.strip().splitlines()) == 1, v.stderr
        same = sb.confine("log", "verify", _copy(sb, lines, d, "same"))   # the control
        assert same.returncode == 0, same.stderr
        js = json.loads(sb.confine("log", "verify", "--json", os.path.join(d, "swapped")).stdout)
        assert js["result"] == "reordered" and js["line"] == k + 1
    finally:
        shutil.rmtree(d, ignore_errors=True)


WRITE_RECORD = r"""
import json, os, sys
rec, key = sys.argv[1], sys.argv[2]
R = {}
def run(name, fn):
    try:
        fn()
        R[name] = "ok"
    except OSError as e:
        R[name] = e.errno
run("append", lambda: open(rec, "a").close())
run("list", lambda: os.listdir(os.path.dirname(rec)))
run("unlink", lambda: os.unlink(rec))
open("forged.jsonl", "w").close()
run("replace", lambda: os.rename("forged.jsonl", rec))
run("key", lambda: open(key, "rb").read())
run("new", lambda: open(os.path.join(os.path.dirname(rec), "20990101-000000-1.jsonl"), "x").close())
print(json.dumps(R))
"""


def test_the_agent_cannot_write_or_replace_the_record(sandbox):
    sb = sandbox
    first = sb.run(["true"])
    assert first.returncode == 0, first.stderr
    (path,) = _records(sb)
    key = os.path.join(os.path.dirname(os.path.dirname(path)), "keys", "record.key")
    with open(path, "rb") as f:
        before = f.read()
    p = sb.run([PY, "-c", WRITE_RECORD, path, key])
    r = json.loads(p.stdout.splitlines()[-1])
    assert all(v != "ok" for v in r.values()), (r, p.stderr)
    with open(path, "rb") as f:
        assert f.read() == before
    ok = sb.confine("log", "verify", path)               # the person reads it
    assert ok.returncode == 0, ok.stderr
    # a read grant over the state directory: the key is carved out of it (a built-in
    # secret, policy/secrets.py), so the run goes on and the key stays unreadable
    state = os.path.dirname(os.path.dirname(os.path.dirname(path)))
    got = sb.run(["sh", "-c", f"cat {path} >/dev/null && echo GRANTED; cat {key} && echo READ"],
                 "--read", state)
    assert got.returncode != 125 and "READ" not in got.stdout, (got.stdout, got.stderr)
    if sb.mode == "user":       # root's records are root's: the agent's uid reads none
        assert "GRANTED" in got.stdout, got.stderr
    # a state directory in the workdir: refused, one line
    for opts, env in ((("--no-agent-home",), (f"XDG_STATE_HOME={sb.workdir}/state",)),):
        if env and sb.mode == "root":
            continue            # root's records are in /var/lib/confine, whatever the env
        bad = sb.run(["true"], *opts, env_extra=env)
        assert bad.returncode == 125 and "the run's record: the record" in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    if sb.mode == "user":
        # the same account outside the sandbox can: the refusals inside are confine's
        c = sb.outside([PY, "-c", "import os,sys; open(sys.argv[1], 'a').close(); "
                        "os.listdir(os.path.dirname(sys.argv[1])); open(sys.argv[2], 'rb').read()",
                        path, key])
        assert c.returncode == 0, c.stderr


FLOOD = r"""
import os
n = 0
for i in range(400):
    try:
        os.symlink("x", ".envrc")
    except OSError:
        n += 1
print(n)
"""


def test_a_flood_of_refusals_is_capped_and_counted(sandbox):
    sb = sandbox
    p = sb.run([PY, "-c", FLOOD], env_extra=["CONFINE_RECORD_LINES=50"])
    assert p.stdout.strip() == "400", p.stderr
    (path,) = _records(sb)
    recs = _show(sb, path)
    refusals = [x for x in recs if x["event"] == "refusal"]
    (dropped,) = [x for x in recs if x["event"] == "dropped"]
    assert len(recs) < 60 and len(refusals) < 50, len(recs)
    assert dropped["by_event"]["refusal"] + len(refusals) == 400, dropped
    # what comes after the agent still fits: the exit check and the status
    # (the undo keeper's closing line may come between them)
    assert [x["event"] for x in recs if x["event"] != "undo"][-4:] == [
        "exit_check", "status", "dropped", "end"]
    ok = sb.confine("log", "verify", path)
    assert ok.returncode == 0, ok.stderr
    bad = sb.run(["true"], env_extra=["CONFINE_RECORD_LINES=many"])     # bad input: one line
    assert bad.returncode == 125 and "CONFINE_RECORD_LINES" in bad.stderr, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_the_exit_check_and_the_held_files_are_in_the_record(sandbox):
    """Without a mount namespace the exit check is what puts a protected file back:
    its finding, the held file and the status it sets are lines of the record."""
    sb = sandbox.without_namespaces()
    with open(os.path.join(sb.workdir, ".envrc"), "w") as f:
        f.write("mine\n")
    os.chown(os.path.join(sb.workdir, ".envrc"), sb.pw.pw_uid, sb.pw.pw_gid)
    p = sb.run(["sh", "-c", "mv .envrc envrc.bak && printf '{}' > .mcp.json"])
    assert p.returncode == 123, p.stderr
    with open(os.path.join(sb.workdir, ".envrc")) as f:          # put back by the check
        assert f.read() == "mine\n"
    assert not os.path.exists(os.path.join(sb.workdir, ".mcp.json"))   # held instead
    (path,) = _records(sb)
    recs = _show(sb, path)
    found = [x for x in recs if x["event"] == "exit_check" and x["what"] != "summary"]
    assert [(x["what"], x["path"], x["action"]) for x in found] == \
        [("deleted", ".envrc", "restored")], recs
    (kept,) = [x for x in recs if x["event"] == "held" and x.get("paths") is not None]
    assert kept["paths"] == [".mcp.json"] and kept["files"] == 1, kept
    (status,) = [x for x in recs if x["event"] == "status"]
    assert (status["status"], status["agent_status"]) == (123, 0), status
    human = sb.confine("log", "show", path).stdout
    assert "deleted .envrc: restored" in human and "kept at exit" in human, human
