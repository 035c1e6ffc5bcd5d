"""The approval engine, its grammar and its approvers, without a run (issue 25 items 1, 2).

The e2e tests (tests/e2e/test_approvals.py) put real agents' calls to it; here
each rule of the grammar, each remembered answer and each way a decider can
fail is checked on its own, with the allowing case beside each denial.
"""
from __future__ import annotations

import json
import socket
import struct
import threading
import time

import pytest

from confine.approval import Engine, Event, SocketApprover, frame, read_frame
from confine.approval import engine as engine_mod
from confine.errors import ProfileError
from confine.policy import load
from confine.policy.approvals import Approvals


def _policy(tmp_path, text):
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return load.load(str(p), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))


def _error(tmp_path, text):
    with pytest.raises(ProfileError) as e:
        _policy(tmp_path, text)
    return str(e.value)


# --- the grammar ---

def test_minimal_form_as_written(tmp_path):
    pol = _policy(tmp_path, "approvals:\n"
                            "  unix_sockets: ask            # a connect outside the grants is asked\n"
                            "  deletions: {ask_above: 20}   # more deletions than this: asked\n")
    a = pol.approvals
    assert a.decide("unix_socket", {"path": "/run/docker.sock"})[0] == "ask"
    assert a.decide("deletions", {"count": 20, "path": "src/a"})[0] == "allow"
    assert a.decide("deletions", {"count": 21, "path": "src/a"})[0] == "ask"
    # kinds not named keep confine's fixed behaviour
    assert a.decide("protected_write", {"path": ".envrc"})[0] == "deny"
    assert a.decide("credential", {"name": "gh"})[0] == "allow"


def test_rules_first_match_and_examples(tmp_path):
    pol = _policy(tmp_path, """approvals:
  unix_sockets:
    default: deny
    rules:
      - match: /run/docker.sock
        decision: allow
        examples: {match: [/run/docker.sock], no_match: [/run/docker.sock.x]}
      - match: /run/**/*.sock
        decision: ask
        examples: {match: [/run/user/1000/bus.sock, /run/x.sock], no_match: [/tmp/x.sock]}
  deletions:
    ask_above: 50
    rules:
      - match: "src/**"
        decision: ask
""")
    a = pol.approvals
    assert a.decide("unix_socket", {"path": "/run/docker.sock"})[0] == "allow"
    assert a.decide("unix_socket", {"path": "/run/user/1/a.sock"})[0] == "ask"
    assert a.decide("unix_socket", {"path": "/tmp/a.sock"})[0] == "deny"
    assert a.decide("deletions", {"count": 1, "path": "src/main.c"})[0] == "ask"
    assert a.decide("deletions", {"count": 1, "path": "docs/x"})[0] == "allow"
    assert "rules[0]" in a.decide("unix_socket", {"path": "/run/docker.sock"})[1]


@pytest.mark.parametrize("text, where", [
    # an example that does not match its own rule
    ("approvals:\n  unix_sockets:\n    rules:\n      - match: /run/*.sock\n        decision: ask\n"
     "        examples: {match: [/run/a/b.sock]}\n",
     "p.yaml:6: approvals.unix_sockets.rules[0].examples.match: '/run/a/b.sock' does not match"),
    # a no_match example that matches
    ("approvals:\n  unix_sockets:\n    rules:\n      - match: /run/*.sock\n        decision: ask\n"
     "        examples:\n          no_match: [/run/x.sock]\n",
     "p.yaml:7: approvals.unix_sockets.rules[0].examples.no_match: '/run/x.sock' matches"),
    # an example an earlier rule decides first
    ("approvals:\n  unix_sockets:\n    rules:\n      - {match: /run/*, decision: deny}\n"
     "      - match: /run/d.sock\n        decision: allow\n        examples: {match: [/run/d.sock]}\n",
     "p.yaml:7: approvals.unix_sockets.rules[1].examples.match: '/run/d.sock' is decided by an "
     "earlier rule"),
    ("approvals:\n  unix_socket: ask\n", "p.yaml:2: unknown key 'approvals.unix_socket' "
     "(did you mean 'unix_sockets'?)"),
    ("approvals:\n  exec: maybe\n", "p.yaml:2: approvals.exec: 'maybe' is not one of allow, deny, ask"),
    ("approvals:\n  deletions: {ask_above: -1}\n", "p.yaml:2: approvals.deletions.ask_above: -1"),
    ("approvals:\n  unix_sockets: {ask_above: 3}\n", "unknown key 'approvals.unix_sockets.ask_above'"),
    ("approvals:\n  unix_sockets:\n    rules:\n      - {match: run/x, decision: ask}\n",
     "p.yaml:4: approvals.unix_sockets.rules[0].match: 'run/x' must be an absolute path"),
    ("approvals:\n  protected_writes:\n    rules:\n      - {match: /abs, decision: ask}\n",
     "must be relative to the workdir"),
    ("approvals:\n  unix_sockets:\n    rules:\n      - {decision: ask}\n", "missing key 'match'"),
    ("approvals:\n  network: allow\n", "approvals.network: 'allow' is not one of ask, deny"),
    ("network:\n  default: deny\napprovals:\n  network: ask\n", "contradicts network.default"),
])
def test_bad_input_names_line_and_key(tmp_path, text, where):
    assert where in _error(tmp_path, text)


def test_network_kind_is_network_default(tmp_path):
    assert _policy(tmp_path, "approvals:\n  network: ask\n").network.default == "ask"
    assert _policy(tmp_path, "network:\n  default: ask\n").approvals.decide("network", {})[0] == "ask"
    assert _policy(tmp_path, "{}\n").approvals.decide("network", {})[0] == "deny"


# --- the engine ---

def _engine(answers, kinds="unix_sockets: ask"):
    asked = []

    def approver(ev, offered):
        asked.append((ev.kind, dict(ev.subject), offered))
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a, "because"
    from confine.policy.approvals import KindSpec
    appr = Approvals((("unix_socket", KindSpec("ask")), ("protected_write", KindSpec("ask"))))
    events = []
    return Engine(appr, approver, "test", events=events.append), asked, events


def _sock(path="/run/d.sock"):
    return Event("unix_socket", {"path": path}, {"pid": 1})


def test_once_not_remembered_run_remembered_deny_remembered():
    e, asked, events = _engine(["once", "run", "deny"])
    assert e.decide(_sock(), 5).answer == "once"
    assert e.decide(_sock(), 5).answer == "run"          # once was not remembered: asked again
    v = e.decide(_sock(), 5)
    assert v.allowed and v.by == "remembered"            # run was
    d = e.decide(_sock("/run/other.sock"), 5)
    assert not d.allowed and d.answer == "deny" and d.reason == "because"
    assert e.decide(_sock("/run/other.sock"), 5).by == "remembered"
    assert len(asked) == 3
    assert "profile" not in asked[0][2]                  # no profile file: not offered
    assert [x["decision"] for x in events] == ["allow", "allow", "allow", "deny", "deny"]
    assert all(x["kind"] == "approval" for x in events) and "latency_ms" in events[0]


def test_unclear_answers_deny():
    e, _, _ = _engine(["yes", RuntimeError("boom"), "profile"])
    assert e.decide(_sock("/a"), 5).decision == "deny"
    assert "boom" in e.decide(_sock("/b"), 5).reason
    assert e.decide(_sock("/c"), 5).decision == "deny"   # profile was not offered


def test_non_interactive_denies_every_ask_but_not_what_rules_decide():
    from confine.policy.approvals import KindSpec
    e = Engine(Approvals((("unix_socket", KindSpec("ask")),)), None)
    v = e.decide(_sock(), 5)
    assert v.decision == "deny" and "non-interactive" in v.reason
    assert e.decide(Event("exec", {"path": "/bin/ls"}), 5).allowed      # exec: allow by default
    assert not e.decide(Event("nonsense", {}), 5).allowed


def test_one_question_at_a_time_and_flood_bounded():
    gate = threading.Event()
    seen = []

    def slow(ev, offered):
        seen.append(ev.subject["path"])
        gate.wait(5)
        return "once", ""
    from confine.policy.approvals import KindSpec
    e = Engine(Approvals((("unix_socket", KindSpec("ask")),)), slow, "slow")
    out = []
    n = engine_mod.MAX_PENDING_KIND + 5
    for i in range(n):
        e.submit(_sock(f"/s{i}"), out.append)
    time.sleep(0.2)
    assert len(seen) == 1                                # one question at a time
    denied = [v for v in out if v.decision == "deny"]
    assert len(denied) == 5 and "already waiting" in denied[0].reason
    gate.set()
    end = time.monotonic() + 5
    while len(out) < n and time.monotonic() < end:
        time.sleep(0.01)
    assert sum(v.allowed for v in out) == engine_mod.MAX_PENDING_KIND


def test_a_flood_of_one_kind_leaves_room_and_the_next_turn_to_another():
    """Endless questions of one kind (an agent asking name after name) neither fill
    the queue for the others nor put them at its end: a credential's use asked
    during the flood is asked next. Control: the flooding kind's own questions
    still come in the order asked, and the total bound holds across kinds."""
    gates = [threading.Event() for _ in range(64)]
    seen = []

    def slow(ev, offered):
        seen.append((ev.kind, ev.subject.get("path") or ev.subject.get("name")))
        gates[len(seen) - 1].wait(5)
        return "once", ""
    from confine.policy.approvals import KindSpec
    e = Engine(Approvals((("unix_socket", KindSpec("ask")),)), slow, "slow")
    out = {}
    for i in range(engine_mod.MAX_PENDING_KIND + 3):
        e.submit(_sock(f"/s{i}"), lambda v, i=i: out.__setitem__(f"/s{i}", v))
    cred = Event("credential", {"name": "FORGE", "host": "forge.test"}, {"pid": 1})
    e.submit(cred, lambda v: out.__setitem__("cred", v), ask=True)
    time.sleep(0.2)
    assert seen == [("unix_socket", "/s0")]
    # the kind's share is full: its next question is refused, another kind's is not
    assert [k for k, v in out.items() if v.decision == "deny"] == \
        [f"/s{i}" for i in range(engine_mod.MAX_PENDING_KIND, engine_mod.MAX_PENDING_KIND + 3)]
    assert "cred" not in out
    gates[0].set()
    end = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < end:
        time.sleep(0.01)
    assert seen[1] == ("credential", "FORGE")            # its turn came before /s1's
    for g in gates:
        g.set()
    end = time.monotonic() + 5
    while len(out) < engine_mod.MAX_PENDING_KIND + 4 and time.monotonic() < end:
        time.sleep(0.01)
    assert out["cred"].allowed
    assert [p for _, p in seen[2:]] == [f"/s{i}" for i in range(1, engine_mod.MAX_PENDING_KIND)]
    # across kinds the total bound holds: MAX_PENDING waiting, of at most two kinds here
    assert engine_mod.MAX_PENDING_KIND * 2 == engine_mod.MAX_PENDING


def test_one_memory_by_kind_and_the_callers_ask():
    """Every kind is remembered the same way, keyed by the kind first: a run for a host
    (network) does not answer a credential's use toward it nor a signature toward it;
    a credential's deny is remembered like any kind's. ask=True: the caller's own
    policy decided to ask (here no approvals rule would have asked at all)."""
    asked = []

    def approver(ev, offered):
        asked.append(ev.kind)
        return {"network": "run", "credential": "deny", "ssh_agent": "once"}[ev.kind], ""
    e = Engine(Approvals(), approver, "test")
    net = Event("network", {"host": "h.test", "port": 443, "via": "proxy"})
    cred = Event("credential", {"name": "T", "host": "h.test", "port": 443, "method": "GET"})
    sign = Event("ssh_agent", {"key": "SHA256:k", "use": "login", "host": "h.test", "port": 443})
    assert e.decide(net, 5, ask=True).answer == "run"
    assert not e.decide(cred, 5, ask=True).allowed                      # asked: not the host's run
    assert e.decide(sign, 5, ask=True).answer == "once"                  # asked too
    assert e.decide(net, 5, ask=True).by == "remembered"
    assert e.decide(Event("network", {"host": "h.test", "port": None}), 5, ask=True).allowed  # its lookup
    v = e.decide(cred, 5, ask=True)
    assert not v.allowed and v.by == "remembered"                        # a deny, remembered
    assert e.decide(Event("credential", {"name": "T", "host": "other.test"}), 5, ask=True).by != "remembered"
    assert asked == ["network", "credential", "ssh_agent", "credential"]
    # without ask=True the profile's rules decide: credential's default is allow, unasked
    assert e.decide(Event("credential", {"name": "U", "host": "h.test"}), 5).by != "test"
    assert not e.decide(sign, 5).allowed                                 # asked only, never ruled
    assert len(asked) == 4


# --- the socket approver ---

class _Server:
    def __init__(self, tmp_path, reply):
        self.path = str(tmp_path / "d.sock")
        self.s = socket.socket(socket.AF_UNIX)
        self.s.bind(self.path)
        self.s.listen(4)
        self.got = []
        self.reply = reply
        threading.Thread(target=self._one, daemon=True).start()

    def _one(self):
        c, _ = self.s.accept()
        q = read_frame(c, time.monotonic() + 5)
        self.got.append(q)
        out = self.reply(q)
        if out is not None:
            c.sendall(out)
        else:
            time.sleep(0.5)       # says nothing: the approver's timeout decides
        c.close()


def _ans(q, **kw):
    return frame({"type": "answer", "id": q["id"], **kw})


@pytest.mark.parametrize("reply, want", [
    (lambda q: _ans(q, decision="once", reason="ok"), ("once", "ok")),
    (lambda q: _ans(q, decision="deny"), ("deny", "")),
    (lambda q: frame({"type": "answer", "id": q["id"] + 1, "decision": "once"}), "not to this question"),
    (lambda q: _ans(q, decision="once", extra=1), "unknown keys"),
    (lambda q: _ans(q, decision="always"), "is not one of"),
    (lambda q: struct.pack(">I", 1 << 20) + b"{}", "frame length"),
    (lambda q: struct.pack(">I", 2) + b"[]", "not a JSON object"),
    (lambda q: struct.pack(">I", 3) + b"\xff{}", "not UTF-8 JSON"),
    (lambda q: b"\0\0", "closed the connection"),
    (lambda q: None, "no answer in"),
])
def test_socket_approver_strict(tmp_path, reply, want):
    srv = _Server(tmp_path, reply)
    got = SocketApprover(srv.path, run="r1", workdir="/w", timeout=0.3).ask(
        _sock(), ("once", "run", "deny"), 7)
    if isinstance(want, tuple):
        assert got == want
    else:
        assert got[0] == "deny" and want in got[1], got
    q = srv.got[0]
    assert (q["type"], q["id"], q["run"], q["workdir"], q["kind"]) == ("question", 7, "r1", "/w", "unix_socket")
    assert q["subject"] == {"path": "/run/d.sock"} and q["choices"] == ["once", "run", "deny"]


def test_socket_approver_absent_denies(tmp_path):
    got = SocketApprover(str(tmp_path / "none.sock"), timeout=0.3)(_sock(), ("once", "deny"))
    assert got[0] == "deny" and "none.sock" in got[1]


def test_frame_round_trip_and_cap():
    a, b = socket.socketpair()
    a.sendall(frame({"x": "é"}))
    assert read_frame(b, time.monotonic() + 1) == {"x": "é"}
    with pytest.raises(ValueError):
        frame({"x": "a" * 70000})
    assert json.loads(frame({"k": 1})[4:]) == {"k": 1}
    a.close()
    b.close()



def test_profile_answer_adds_the_socket(tmp_path):
    from confine.approval import ProfileWriter
    prof = tmp_path / "p.yaml"
    prof.write_text("# mine\nunix_sockets:\n  allow:\n    - /run/a.sock\napprovals:\n  unix_sockets: ask\n")
    checked = []

    def validate(path):
        checked.append(path)
        load.load(path, workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))
    w = ProfileWriter(str(prof), validate=validate)
    from confine.policy.approvals import KindSpec
    e = Engine(Approvals((("unix_socket", KindSpec("ask")),)), lambda ev, offered: ("profile", ""),
               "test", profile=w)
    v = e.decide(_sock("/run/docker #1.sock"), 5)
    assert v.answer == "run" and "cannot be written" in v.reason      # allowed, not written
    v = e.decide(_sock("/run/docker.sock"), 5)
    assert v.answer == "profile", v
    assert len(checked) == 1                                          # the candidate was loaded
    pol = load.load(str(prof), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))
    assert [g.template for g in pol.unix_sockets] == ["/run/a.sock", "/run/docker.sock"]
    assert prof.read_text().startswith("# mine\n")


def test_landed_only_for_what_was_allowed():
    e, _, events = _engine(["once", "deny"])
    w = lambda p: Event("protected_write", {"path": p})  # noqa: E731
    assert e.decide(w(".envrc"), 5).allowed
    assert not e.decide(w(".mcp.json"), 5).allowed
    e.landed(".envrc", 1, 2)
    e.landed(".mcp.json", 1, 3)            # denied: a report of it is not taken
    e.landed(".bashrc", 1, 4)              # never asked
    assert e.writes == {".envrc": (1, 2)}
    assert [x["path"] for x in events if x["kind"] == "approved_write"] == [".envrc"]


def test_command_approver_gets_the_event(tmp_path):
    from confine.approval import CommandApprover
    seen = tmp_path / "q.json"
    script = tmp_path / "ap.sh"
    script.write_text(f"#!/bin/sh\ncat > {seen}\necho '{{\"decision\": \"run\", \"reason\": \"fine\"}}'\n")
    script.chmod(0o755)
    got = CommandApprover(str(script), timeout=5)(_sock(), ("once", "run", "deny"))
    assert got == ("run", "fine")
    q = json.loads(seen.read_text())
    assert (q["event"], q["kind"], q["subject"], q["choices"]) == (
        "ask", "unix_socket", {"path": "/run/d.sock"}, ["once", "run", "deny"])
    # an answer not offered is a deny
    script.write_text("#!/bin/sh\necho '{\"decision\": \"profile\"}'\n")
    assert CommandApprover(str(script), timeout=5)(_sock(), ("once", "run", "deny"))[0] != "profile"
