"""One run, one asker, several kinds (docs/approvals.md "Approvers"): a network
destination (`network.default: ask`) and a credential use (`decision: ask`)
asked in the same run go to the same --approver-socket decider, as their own
kinds, one at a time and in the order asked, each decision one `approval`
event in the run's record; an answer remembered for one kind never answers
another (a "run" for a host is not a credential's use toward it), and
"remember" works the same for each kind (a credential's deny is not asked again,
like a destination's).

The network is the test's own namespaces (test_egress.py's `net`: an HTTPS
origin for allowed.test and other.test on 1.1.1.1, which logs the
Authorization header it got). Each refusal has its control: the same origin
reached in the same run once allowed.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import PY, Sandbox, make_workdir

sys.path.insert(0, os.path.dirname(__file__))
import test_egress  # noqa: E402
from deciders import Decider  # noqa: E402
from test_egress import NS_A, _ca  # noqa: E402

egress_net = test_egress.net      # its namespaces and servers, a fixture by this name here

pytestmark = pytest.mark.skipif(shutil.which("ip") is None or shutil.which("openssl") is None,
                                reason="needs iproute2 (ip netns) and openssl")

TOKEN = "ghp_" + "Q7" * 18                # the real value, outside only

# Each request: "ok <body>" or the error; `auth` sends the credential's placeholder.
AGENT = r'''
import json, os, ssl, sys, threading, time, urllib.request
out = {}
def get(name, url, auth, cafile, delay=0.0):
    time.sleep(delay)
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Bearer " + os.environ["FORGE_TOKEN"])
    # a run that swaps terminates TLS: the agent trusts the run's bundle (SSL_CERT_FILE)
    ctx = ssl.create_default_context(cafile=cafile or os.environ["SSL_CERT_FILE"])
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            out[name] = "ok " + r.read().decode()[:80]
    except Exception as e:
        out[name] = f"{type(e).__name__}: {e}"[:200]
plan = json.loads(sys.argv[1])
ts = [threading.Thread(target=get, args=a) for a in plan["together"]]
for t in ts:
    t.start()
for t in ts:
    t.join()
for a in plan.get("after", []):
    get(*a)
print(json.dumps(out))
'''


class Timed(Decider):
    """The scripted decider, with when each question came in and was answered."""

    def __init__(self, answers, delay):
        self.spans: list[tuple[float, float]] = []
        super().__init__(answers, delay=delay)

    def _one(self, c):
        t0 = time.monotonic()
        try:
            super()._one(c)
        finally:
            self.spans.append((t0, time.monotonic()))


def _run(mode, test_user, net, allow, plan, decider):
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    d = tempfile.mkdtemp(prefix="confine-kinds-")
    try:
        os.chmod(d, 0o755)
        if mode == "user":            # the unprivileged supervisor writes the record here
            os.chown(d, test_user.pw_uid, test_user.pw_gid)
        prof = os.path.join(d, "p.yaml")
        with open(prof, "w") as f:
            f.write(textwrap.dedent(f"""\
                extends: default
                network:
                  default: ask
                  allow: {json.dumps(allow)}
                  upstream_ca: [{net.ca}]
                credentials:
                  - name: FORGE_TOKEN
                    from_env: REAL_FORGE
                    hosts: [allowed.test]
                    decision: ask
                """))
        os.chmod(prof, 0o644)
        log = os.path.join(d, "run.jsonl")
        _ca(sb, net)
        full = ["ip", "netns", "exec", NS_A] + sb.exec_cmd(
            [PY, "-c", AGENT, json.dumps(plan)], "-p", prof, "--approver-socket", decider.path,
            "--log", log, env_extra=[f"REAL_FORGE={TOKEN}"])
        mark = net.mark()
        p = subprocess.run(full, capture_output=True, text=True, timeout=90, cwd=sb.workdir)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        assert lines, (p.returncode, p.stdout, p.stderr)
        with open(log) as f:
            record = [json.loads(x) for x in f if x.strip()]
        return json.loads(lines[-1]), record, net.since(mark), p
    finally:
        shutil.rmtree(sb.workdir, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def _approvals(record):
    return [e for e in record if e.get("event") == "approval" and e.get("by") != "remembered"]


@pytest.mark.parametrize("mode", ["root", "user"])
def test_two_kinds_asked_together_come_one_at_a_time(mode, egress_net, test_user):
    """A destination and a credential's use asked at about the same moment: the decider
    gets them as two kinds, the second only once the first is answered (it waited in
    the one queue meanwhile), in the order the record lists them; the run's record
    holds one approval event for each. Controls: both allowed (once) reach the origin,
    the credential's request with the real value."""
    delay = 1.0
    decider = Timed(["once", "once"], delay=delay)
    try:
        plan = {"together": [["net", "https://other.test/n", False, ""],
                             ["cred", "https://allowed.test/c", True, "", 0.3]]}
        out, record, seen, p = _run(mode, test_user, egress_net, ["allowed.test"], plan, decider)
    finally:
        decider.close()
    qs = decider.questions
    assert sorted(q["kind"] for q in qs) == ["credential", "network"], (json.dumps(qs), out, p.stderr)
    by_kind = {q["kind"]: q for q in qs}
    assert by_kind["network"]["subject"]["host"] == "other.test"
    assert by_kind["credential"]["subject"]["name"] == "FORGE_TOKEN"
    assert by_kind["credential"]["subject"]["host"] == "allowed.test"
    assert TOKEN not in json.dumps(qs)
    (a0, a1), (b0, b1) = decider.spans
    assert b0 >= a1 - 0.01, decider.spans              # one at a time: never two open
    assert [q["id"] for q in qs] == [1, 2]              # one approver, one numbering
    asked = _approvals(record)
    assert [(e["of"], e["answer"]) for e in asked] == [(q["kind"], "once") for q in qs], asked
    # the second was asked while the first was open: it waited its turn in the queue
    assert asked[1]["latency_ms"] >= (delay + 0.15) * 1000, asked
    assert not [e for e in record if e.get("event") == "ask"]   # no second record of the same decision
    # controls: both went through, the credential swapped in at the origin
    assert out["net"].startswith("ok hello") and out["cred"].startswith("ok hello"), out
    reqs = {e["path"]: e.get("auth") for e in seen if e["ev"] == "request"}
    assert reqs == {"/n": None, "/c": f"Bearer {TOKEN}"}, reqs


def test_remembered_for_one_kind_does_not_answer_another(egress_net, test_user):
    """The person allows allowed.test for the run (network) and denies the credential's
    use toward it: the run answer does not answer the credential (asked, refused, the
    origin never sees the value); the deny is remembered like any kind's (the next use
    is refused unasked), and the destination stays allowed unasked (a request without
    the credential reaches the origin: the control)."""
    decider = Timed(["run", "deny"], delay=0.0)
    try:
        plan = {"together": [], "after": [["first", "https://allowed.test/1", True, ""],
                                          ["again", "https://allowed.test/2", True, ""],
                                          ["plain", "https://allowed.test/3", False, ""]]}
        out, record, seen, p = _run("user", test_user, egress_net, [], plan, decider)
    finally:
        decider.close()
    qs = decider.questions
    assert [(q["kind"], q["subject"].get("host")) for q in qs] == [
        ("network", "allowed.test"), ("credential", "allowed.test")], (qs, p.stderr)
    assert not out["first"].startswith("ok") and not out["again"].startswith("ok"), out
    assert out["plain"].startswith("ok hello"), out
    reqs = [(e["path"], e.get("auth")) for e in seen if e["ev"] == "request"]
    assert reqs == [("/3", None)], reqs                 # the value never left
    uses = [e for e in record if e.get("event") == "credential_use"]
    assert [e["decision"] for e in uses] == ["deny", "deny"], uses
    remembered = [e for e in record if e.get("event") == "approval" and e.get("by") == "remembered"]
    assert {e["of"] for e in remembered} >= {"network", "credential"}, remembered
