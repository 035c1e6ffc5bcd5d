"""network.default: ask: the question goes to a scripted approver, or to a terminal (a real
pseudo-terminal), and only an explicit allow allows. Each refusal has its allowed control
beside it; the gateway and DNS server are real, on loopback, over the fake upstream."""
from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from confine.approval import Engine
from confine.approval.approvers import TtyApprover
from confine.approval.network import Asker, make_asker
from confine.approval.profile import ProfileWriter, insert_allow
from confine.errors import ConfineError
from confine.gateway import DNSServer, Gateway, Limits, Pins, Resolver, Rules
from confine.gateway import dnswire as w
from confine.gateway.approve import Answer, Question
from confine.policy.approvals import Approvals

from .test_dns import ask as dns_query
from .test_proxy import tls_get, tunnel

APPROVER = r'''
import json, os, sys, time
q = json.loads(sys.stdin.readline())
with open(os.environ["ASK_LOG"], "a") as f:
    f.write(json.dumps(q) + "\n")
mode = open(os.environ["ASK_MODE"]).read()
if mode == "sleep":
    time.sleep(30)
elif mode == "garbage":
    print("yes please")
elif mode == "allow-word":
    print(json.dumps({"decision": "allow"}))
elif mode == "exit1":
    print(json.dumps({"decision": "once"}))
    sys.exit(1)
elif mode == "slow-run":
    time.sleep(float(os.environ.get("ASK_DELAY", "1")))
    print(json.dumps({"decision": "run"}))
elif mode == "huge":
    sys.stdout.write("x" * 200000)
else:
    print(json.dumps({"decision": mode, "reason": "scripted"}))
'''


@pytest.fixture
def approver(tmp_path, monkeypatch):
    """A scripted approver: set_mode(m) picks its answer; asked() lists the questions it got."""
    script = tmp_path / "approver.py"
    script.write_text(APPROVER)
    log = tmp_path / "asked.jsonl"
    monkeypatch.setenv("ASK_LOG", str(log))
    mode = tmp_path / "mode"
    mode.write_text("deny")
    monkeypatch.setenv("ASK_MODE", str(mode))

    class A:
        cmd = f"{sys.executable} {script}"

        @staticmethod
        def set_mode(m):
            mode.write_text(m)

        @staticmethod
        def asked():
            return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return A


class AskStack:
    """Gateway + DNS server with an asker; rules allow only allowed.test, loopback may be dialled
    for asked names (allowed_ips), other.test is denied outright."""

    def __init__(self, upstream, asker, port):
        self.events: list[dict] = []
        self.lock = threading.Lock()
        self.rules = Rules.parse([f"allowed.test:{port}"], ["denied.test"], allowed_ips=["127.0.0.1"])
        self.resolver = Resolver([("127.0.0.1", upstream.port)], self.rules, Pins(), timeout=2.0)
        self.gw = Gateway(self.rules, self.resolver, log=self._log, ask=asker,
                          limits=Limits(handshake_timeout=5.0, idle_timeout=10.0)).start()
        self.dns = DNSServer(self.resolver, log=self._log, ask=asker, ask_wait=0.5).start()

    def _log(self, ev):
        json.dumps(ev)
        with self.lock:
            self.events.append(dict(ev))

    def connects(self, n=0, timeout=5.0):
        end = time.monotonic() + timeout
        while True:
            with self.lock:
                got = [e for e in self.events if e["event"] == "connect"]
            if len(got) >= n or time.monotonic() > end:
                return got
            time.sleep(0.01)

    def stop(self):
        self.gw.stop()
        self.dns.stop()


@pytest.fixture
def ask_stack(upstream, dialled, https_origin, tmp_path):
    made = []

    def make(asker):
        s = AskStack(upstream, asker, https_origin.port)
        made.append(s)
        return s
    yield make
    for s in made:
        s.stop()


def get(st, host, port, cafile):
    """One HTTPS GET through CONNECT: the body, or the refusal status line."""
    s, status = tunnel(st.gw, f"{host}:{port}")
    if not status.startswith("HTTP/1.1 200"):
        s.close()
        return status
    return tls_get(s, host, cafile)


# --- the scripted approver -------------------------------------------------------------------
def test_approver_once_allows_one_connection(ask_stack, approver, https_origin, tls_files, upstream):
    approver.set_mode("once")
    events: list[dict] = []
    st = ask_stack(make_asker("ask", approver.cmd, None, events.append))
    p = https_origin.port
    assert get(st, "also.test", p, tls_files[0]).startswith("sni=also.test")
    assert get(st, "also.test", p, tls_files[0]).startswith("sni=also.test")
    assert len(approver.asked()) == 2                      # once is once: asked again
    q = approver.asked()[0]
    assert (q["event"], q["host"], q["port"], q["via"], q["entry"]) == ("ask", "also.test", p, "proxy",
                                                                      f"also.test:{p}")
    assert "profile" not in q["choices"]                   # no profile file: not offered
    ev = st.connects(2)[0]
    assert ev["decision"] == "allow" and ev["approver"].startswith("command ") and ev["rule"].startswith("ask once")
    # the run's record: one approval event per question, from the engine
    assert [(e["of"], e["answer"]) for e in events] == [("network", "once"), ("network", "once")]
    # control: a host the rules allow is never asked
    assert get(st, "allowed.test", p, tls_files[0]).startswith("sni=allowed.test")
    assert len(approver.asked()) == 2


def test_approver_run_remembered_for_proxy_and_dns(ask_stack, approver, https_origin, tls_files):
    approver.set_mode("run")
    st = ask_stack(make_asker("ask", approver.cmd, None, None))
    p = https_origin.port
    for _ in range(3):
        assert get(st, "also.test", p, tls_files[0]).startswith("sni=also.test")
    assert len(approver.asked()) == 1
    r = dns_query(st.dns, "also.test")                      # the run's answer covers the lookup
    assert r.rcode == w.NOERROR and len(approver.asked()) == 1
    # another port of the same host is another destination: asked
    approver.set_mode("deny")
    assert get(st, "also.test", p + 1 if p < 65535 else p - 1, tls_files[0]).startswith("HTTP/1.1 403")
    assert len(approver.asked()) == 2


@pytest.mark.parametrize("mode", ["deny", "garbage", "allow-word", "exit1", "huge"])
def test_approver_anything_but_an_allow_denies(ask_stack, approver, https_origin, tls_files, mode):
    approver.set_mode(mode)
    st = ask_stack(make_asker("ask", approver.cmd, None, None))
    status = get(st, "also.test", https_origin.port, tls_files[0])
    assert status.startswith("HTTP/1.1 403"), status
    assert https_origin.accepted == 0
    ev = st.connects(1)[0]
    assert ev["decision"] == "deny" and ev["asked"] == "deny" and ev["allow_with"]
    # a denial is remembered for the run: the same host is not asked again
    assert get(st, "also.test", https_origin.port, tls_files[0]).startswith("HTTP/1.1 403")
    assert len(approver.asked()) == 1


def test_approver_timeout_denies(ask_stack, approver, https_origin, tls_files):
    approver.set_mode("sleep")
    asker = make_asker("ask", approver.cmd, None, None, timeout=1.0)
    st = ask_stack(asker)
    assert get(st, "also.test", https_origin.port, tls_files[0]).startswith("HTTP/1.1 403")
    assert "no answer in 1 s" in st.connects(1)[0]["reason"]
    assert https_origin.accepted == 0


def test_explicit_deny_is_never_asked(ask_stack, approver, https_origin, tls_files, upstream):
    approver.set_mode("run")
    st = ask_stack(make_asker("ask", approver.cmd, None, None))
    assert get(st, "denied.test", https_origin.port, tls_files[0]).startswith("HTTP/1.1 403")
    assert dns_query(st.dns, "denied.test").rcode == w.NXDOMAIN
    assert approver.asked() == [] and "denied.test" not in upstream.names()
    # control: a name with no rule is asked
    assert dns_query(st.dns, "also.test").rcode == w.NOERROR and len(approver.asked()) == 1


def test_concurrent_connections_ask_once(ask_stack, approver, https_origin, tls_files, monkeypatch):
    approver.set_mode("slow-run")
    monkeypatch.setenv("ASK_DELAY", "1")
    st = ask_stack(make_asker("ask", approver.cmd, None, None))
    with ThreadPoolExecutor(12) as ex:
        out = list(ex.map(lambda _: get(st, "also.test", https_origin.port, tls_files[0]), range(12)))
    assert all(o.startswith("sni=also.test") for o in out), out
    assert len(approver.asked()) == 1


def test_dns_waits_bounded_then_retry_gets_the_answer(ask_stack, approver, https_origin, tls_files,
                                                      monkeypatch, upstream):
    approver.set_mode("slow-run")
    monkeypatch.setenv("ASK_DELAY", "1.5")
    st = ask_stack(make_asker("ask", approver.cmd, None, None))
    t0 = time.monotonic()
    with pytest.raises(socket.timeout):                    # pending: no answer, the client retries
        q = w.build_query(0x4243, "also.test", w.A, edns=w.EDNS_SIZE)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.8)
            s.sendto(q, st.dns.address)
            s.recv(65535)
    assert "also.test" not in upstream.names()             # nothing left the host while pending
    while len(approver.asked()) < 1 or time.monotonic() - t0 < 1.6:
        time.sleep(0.05)
    r = dns_query(st.dns, "also.test")
    assert r.rcode == w.NOERROR and len(approver.asked()) == 1
    assert any(e.get("decision") == "pending" for e in st.events if e["event"] == "dns")
    # the lookup's "run" is for the name on 443 (what an entry without a port means): a
    # connection on another port is its own question
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname(), timeout=5)
    srv, _ = lst.accept()
    lst.close()
    st.gw.handle_redirected(srv, "127.0.0.1", https_origin.port, pid=os.getpid())
    # the rule admits 127.0.0.1 for names only (allowed_ips); also.test is pinned there now
    assert tls_get(c, "also.test", tls_files[0]).startswith("sni=also.test")
    assert [(q["via"], q["port"]) for q in approver.asked()] == [("dns", None), ("transparent", https_origin.port)]


def test_dns_once_covers_the_following_connection(ask_stack, approver, https_origin, tls_files):
    approver.set_mode("once")
    st = ask_stack(make_asker("ask", approver.cmd, None, None))
    r = dns_query(st.dns, "also.test")
    assert r.rcode == w.NOERROR and [q["via"] for q in approver.asked()] == ["dns"]
    s, status = tunnel(st.gw, "also.test:443")
    s.close()
    # the connection on 443 used the lookup's "once" (a 502: nothing listens there; not a 403)
    assert not status.startswith("HTTP/1.1 403"), status
    assert len(approver.asked()) == 1
    s, status = tunnel(st.gw, "also.test:443")             # and only once
    s.close()
    assert len(approver.asked()) == 2


def test_approver_gets_the_supervisors_environment(tmp_path, monkeypatch):
    out = tmp_path / "env.json"
    script = tmp_path / "a.py"
    script.write_text(f"import json, os, sys; sys.stdin.read(); json.dump(dict(os.environ), open({str(out)!r}, 'w'));"
                      "print(json.dumps({'decision': 'deny'}))")
    monkeypatch.setenv("CONFINE_TEST_MARK", "supervisor")
    a = make_asker("ask", f"{sys.executable} {script}", None, None)
    assert a is not None
    assert a(Question("x.test", 443)).decision == "deny"
    assert json.loads(out.read_text()).get("CONFINE_TEST_MARK") == "supervisor"


# --- add to the profile ----------------------------------------------------------------------
PROFILE = """\
# my profile: comments stay
description: mine   # trailing comment
extends: default
network:
  # the hosts
  allow:
    - allowed.test   # why this one
  deny: [denied.test]
env:
  pass: [A]
"""


def test_approver_profile_adds_the_entry(ask_stack, approver, https_origin, tls_files, tmp_path):
    prof = tmp_path / "mine.yaml"
    prof.write_text(PROFILE)
    loaded: list[str] = []

    def validate(path):
        loaded.append(path)
        data = yaml.safe_load(open(path))
        Rules.parse(data["network"]["allow"], data["network"]["deny"])

    approver.set_mode("profile")
    st = ask_stack(make_asker("ask", approver.cmd, str(prof), None, validate=validate))
    p = https_origin.port
    assert get(st, "also.test", p, tls_files[0]).startswith("sni=also.test")
    assert get(st, "also.test", p, tls_files[0]).startswith("sni=also.test")
    assert len(approver.asked()) == 1 and "profile" in approver.asked()[0]["choices"]
    text = prof.read_text()
    assert "# my profile: comments stay" in text and "# why this one" in text and "# the hosts" in text
    data = yaml.safe_load(text)
    assert data["network"]["allow"] == ["allowed.test", f"also.test:{p}"]
    assert data["network"]["deny"] == ["denied.test"] and data["env"] == {"pass": ["A"]}
    assert loaded and not os.path.exists(loaded[0])        # validated as a candidate, then renamed
    assert not [n for n in os.listdir(tmp_path) if ".confine-" in n]
    assert st.connects(1)[0]["rule"].startswith("ask profile")


def test_profile_that_does_not_load_is_not_written(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)

    def validate(path):
        raise ConfineError("unknown key 'network.allow'")
    w_ = ProfileWriter(str(prof), validate=validate)
    with pytest.raises(ConfineError, match="does not load"):
        w_.add("x.test")
    assert prof.read_text() == PROFILE
    # the asker then allows for the run only, and says so
    asker = Asker(Engine(Approvals(), lambda ev, offered: ("profile", ""), "test", profile=w_))
    a = asker(Question("x.test", 443))
    assert a.decision == "run" and "not added to the profile" in a.reason


def test_builtin_profile_never_edited(tmp_path):
    d = tmp_path / "builtin"
    d.mkdir()
    prof = d / "claude-code.yaml"
    prof.write_text(PROFILE)
    w_ = ProfileWriter(str(prof), builtin_dirs=(str(d),))
    assert w_.why_not() == "the profile is a built-in"
    assert ProfileWriter(None).why_not() == "the profile is a built-in"
    with pytest.raises(ConfineError, match="built-in"):
        w_.add("x.test")
    assert prof.read_text() == PROFILE
    asked = []
    asker = Asker(Engine(Approvals(), lambda ev, offered: (asked.append(offered), ("profile", ""))[1],
                         "test", profile=w_))
    # not offered: an answer outside the choices is a deny (only an offered allow allows)
    assert asker(Question("x.test", 443)).decision == "deny" and asked == [("once", "run", "deny")]
    # control: the same file elsewhere is edited
    other = tmp_path / "mine.yaml"
    other.write_text(PROFILE)
    assert ProfileWriter(str(other), builtin_dirs=(str(d),)).add("x.test") is True
    # the shipped profiles are built-ins by default
    from confine.approval.profile import _builtin_dirs
    shipped = os.path.join(_builtin_dirs()[-1], "default.yaml")
    assert ProfileWriter(shipped, builtin_dirs=_builtin_dirs()).why_not() == "the profile is a built-in"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write any file")
def test_unwritable_profile_refused(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    prof.chmod(0o444)
    assert ProfileWriter(str(prof)).why_not() == "the profile is not writable"


WRITER = """
import sys
from confine.approval.profile import ProfileWriter
w = ProfileWriter(sys.argv[1])
for i in range(int(sys.argv[3])):
    w.add(f"h{i}.{sys.argv[2]}.test")
"""


def test_profile_write_under_concurrent_writers(tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text(PROFILE)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(prof), f"w{k}", "6"]) for k in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    data = yaml.safe_load(prof.read_text())
    want = {"allowed.test"} | {f"h{i}.w{k}.test" for i in range(6) for k in range(4)}
    assert set(data["network"]["allow"]) == want and len(data["network"]["allow"]) == len(want)
    assert "# why this one" in prof.read_text()
    assert not [n for n in os.listdir(tmp_path) if ".confine-" in n]


@pytest.mark.parametrize("text,expect", [
    ("description: x\n", {"allow": ["new.test"]}),
    ("network:\n  connect_tcp: [22]\n", {"connect_tcp": [22], "allow": ["new.test"]}),
    ("network:\n  allow: [a.test, b.test]  # two\n", {"allow": ["a.test", "b.test", "new.test"]}),
    ("network:\n    allow:\n    - a.test\n    deny:\n    - d.test\n",
     {"allow": ["a.test", "new.test"], "deny": ["d.test"]}),
    ("network:\n  allow:\n    - a.test\n\n    # later\n    - b.test\nenv: {}\n",
     {"allow": ["a.test", "b.test", "new.test"]}),
    ("network:  # the net\n  allow:\n  - a.test\n", {"allow": ["a.test", "new.test"]}),
])
def test_insert_allow_layouts(text, expect):
    data = yaml.safe_load(insert_allow(text, "new.test"))
    assert data["network"] == expect


def test_insert_allow_refuses_what_it_cannot_edit(tmp_path):
    with pytest.raises(ConfineError):
        insert_allow("network: {allow: [a.test]}\n", "new.test")
    prof = tmp_path / "p.yaml"
    prof.write_text("network:\n  allow:\n    - a.test\n  other: |\n    - not.a.list.item\n")
    w_ = ProfileWriter(str(prof))
    try:
        w_.add("new.test")
    except ConfineError:
        pass                          # refused, or:
    data = yaml.safe_load(prof.read_text())
    assert data["network"]["other"] == "- not.a.list.item\n"   # never a silent change elsewhere


def test_make_asker_deny_is_none_and_default_checked():
    assert make_asker("deny", None, None, None) is None
    with pytest.raises(ConfineError):
        make_asker("allow", None, None, None)


# --- no terminal -----------------------------------------------------------------------------
NON_INTERACTIVE = """
from confine.approval.network import make_asker
from confine.gateway.approve import Question
a = make_asker("ask", None, None, None)
r = a(Question("x.test", 443))
print(r.decision, r.approver)
"""


def test_non_interactive_denies():
    # a new session has no controlling terminal: /dev/tty cannot be opened
    r = subprocess.run([sys.executable, "-c", NON_INTERACTIVE], capture_output=True, text=True,
                       start_new_session=True, stdin=subprocess.DEVNULL, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["deny", "non-interactive"]


# --- a pseudo-terminal -----------------------------------------------------------------------
PTY_CHILD = """
import json, os, subprocess, sys, termios, tty
from confine.approval.network import make_asker
from confine.gateway.approve import Question
out = sys.argv[1]
fd = os.open("/dev/tty", os.O_RDWR)
if len(sys.argv) > 2:
    import fcntl, struct
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, int(sys.argv[2]), 0, 0))
tty.setraw(fd)                                   # the agent owns the terminal in raw mode
before = termios.tcgetattr(fd)
agent = subprocess.Popen([sys.executable, "-c", "import sys,time; print('agent says hi'); sys.stdout.flush()"],
                         stdout=open(out + ".agent", "w"))
agent.wait()
a = make_asker("ask", None, None, None, timeout=20)
r = a(Question("ask.test", 8443, "proxy", pid=agent.pid, exe="/usr/bin/cu\\x1b[2Jrl"))
after = termios.tcgetattr(fd)
json.dump({"decision": r.decision, "approver": r.approver, "reason": r.reason, "restored": before == after},
          open(out, "w"))
"""


def _pty_run(tmp_path, key, cols=None):
    out = tmp_path / "result.json"
    if out.exists():
        out.unlink()
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.execv(sys.executable, [sys.executable, "-c", PTY_CHILD, str(out)] + ([str(cols)] if cols else []))
        finally:
            os._exit(127)
    screen = b""
    end = time.monotonic() + 30
    try:
        while b"? \x1b[0m" not in screen and time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                try:
                    screen += os.read(master, 4096)
                except OSError:
                    break
        assert b"? \x1b[0m" in screen, screen
        os.write(master, key)
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 1)
            if r:
                try:
                    d = os.read(master, 4096)
                except OSError:
                    break
                if not d:
                    break
                screen += d
            if out.exists() and out.stat().st_size:
                break
        _, status = os.waitpid(pid, 0)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(master)
    return json.loads(out.read_text()), screen, (tmp_path / "result.json.agent").read_text()


def test_pty_question_on_the_terminal_not_the_agents_stdout(tmp_path):
    res, screen, agent_out = _pty_run(tmp_path, b"r")
    assert res["decision"] == "run" and res["approver"] == "tty", res
    assert res["restored"]                                # the agent's raw mode is back
    assert b"wants ask.test:8443" in screen
    assert screen.index(b"\x1b7") < screen.index(b"wants") < screen.index(b"\x1b8")   # cursor saved, restored
    assert b"\x1b[2J" not in screen                       # the process name cannot drive the terminal
    assert agent_out == "agent says hi\n" and "confine" not in agent_out


def test_pty_other_key_denies(tmp_path):
    res, screen, _ = _pty_run(tmp_path, b"x")
    assert res["decision"] == "deny" and "not an allow" in res["reason"]
    res, _, _ = _pty_run(tmp_path, b"o")                  # control: o is once
    assert res["decision"] == "once"


def test_tty_backend_not_foreground_denies():
    # opened but not a terminal at all: denied, never a guess
    from confine.approval.network import event_of
    assert TtyApprover("/dev/null")(event_of(Question("x.test", 443)), ("once", "run", "deny"))[0] == "deny"


def test_answer_rule_and_allowed():
    assert Answer("once", "tty").allowed and not Answer("pending", "tty").allowed
    assert not Answer("deny", "tty").allowed and Answer("run", "tty").rule == "ask run (tty)"




def test_a_flood_of_names_is_bounded():
    """Each DNS waiter gives up after its wait, but its question stays queued for the retry:
    an agent asking for endless names must not grow the queue (or the person's evening)."""
    from confine.approval import engine as approve
    gate = threading.Event()
    asked = []

    def slow(ev, offered):
        asked.append(ev.subject["host"])
        gate.wait(10)
        return "deny", ""
    a = Asker(Engine(Approvals(), slow, "test"))
    try:
        bound = approve.MAX_PENDING_KIND    # one kind's share of the queue (the rest: other kinds)
        out = [a(Question(f"n{i}.flood.test", None, "dns", wait=0.01)) for i in range(bound + 20)]
        assert [x.decision for x in out[:bound]] == ["pending"] * bound
        assert all(x.decision == "deny" and "already waiting" in x.reason for x in out[bound:])
    finally:
        gate.set()
    end = time.monotonic() + 10
    while len(asked) < bound and time.monotonic() < end:
        time.sleep(0.01)
    time.sleep(0.1)
    assert len(asked) == bound                          # the refused ones were never put to anyone
    # control: once the queue drains, a new name is asked again
    assert a(Question("late.flood.test", 443, wait=5)).decision == "deny" and asked[-1] == "late.flood.test"


def test_pty_narrow_terminal_gets_one_line(tmp_path):
    res, screen, _ = _pty_run(tmp_path, b"d", cols=40)
    assert res["decision"] == "deny"
    shown = screen[screen.index(b"\x1b[7m") + 4:screen.index(b"\x1b[0m")]
    assert len(shown) < 40 and b"ask.test" in shown and b"[o/r/d]" in shown, shown


def test_approver_child_holding_stdout_does_not_hold_the_answer(tmp_path):
    """An approver that leaves a background child with its stdout: the answer counts when the
    approver exits (not when the child does), and the child is killed with the group."""
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "a.sh"
    script.write_text(f"#!/bin/sh\nread q\nsleep 300 &\necho $! > {pidfile}\necho '{{\"decision\": \"run\"}}'\n")
    script.chmod(0o755)
    a = make_asker("ask", str(script), None, None, timeout=10)
    assert a(Question("x.test", 443, wait=30)).decision == "run"
    pid = int(pidfile.read_text())
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the approver's child {pid} is still running")
