"""Agents' login files (issue 24 item 3): the `logins:` section, and the placeholder copy
of a login file with its Bindings (credentials/logins.py).

Threat: a token of the agent's own login reaching it in clear (a secret the copy still
holds, the real file readable through a grant), or sent to a host the profile did not
name. Each refusal has an accepted neighbour.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import textwrap

import pytest

from confine.credentials import logins, sources
from confine.credentials.binding import Target
from confine.errors import ProfileError
from confine.policy import load

CLAUDE = """
    logins:
      - name: claude-code
        file: {file}
        tokens:
          - {{json: claudeAiOauth.accessToken, hosts: [api.anthropic.com]}}
          - {{json: claudeAiOauth.refreshToken}}
    """


@pytest.fixture(autouse=True)
def records(tmp_path_factory, monkeypatch):
    """confine's private state for the refreshes' redo records (credentials/redo.py):
    a directory of the test's, also as root (whose state is /var/lib/confine)."""
    from confine.credentials import pending
    d = tmp_path_factory.mktemp("records") / "credentials"
    monkeypatch.setattr(pending, "directory", lambda: str(d))
    return d


def _load(tmp_path, text: str):
    p = tmp_path / "p.yaml"
    p.write_text(textwrap.dedent(text))
    return load.load(str(p), workdir=str(tmp_path), home=str(tmp_path), tmp=str(tmp_path))


def _errors(tmp_path, text: str) -> list[str]:
    with pytest.raises(ProfileError) as e:
        _load(tmp_path, text)
    return [str(e.value), *e.value.more]


def _b64(obj: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


def test_section_loads(tmp_path):
    f = tmp_path / "creds.json"
    pol = _load(tmp_path, CLAUDE.format(file=f))
    (lg,) = pol.logins
    assert lg.file == str(f) and not lg.optional
    acc, ref = lg.tokens
    assert acc.path == ("claudeAiOauth", "accessToken") and acc.targets == (
        Target("api.anthropic.com", 443),)
    assert ref.targets == ()
    # not a Landlock deny (it would carve the state root around it): the run binds the
    # placeholder copy over the real file (tests/e2e/agents/test_logins.py)
    assert str(f) not in {d.path for d in pol.deny}


@pytest.mark.parametrize("entry,why", [
    ("{name: x, file: /a, tokens: [{json: a}], color: red}", "unknown key 'logins.color'"),
    ("{name: x, file: rel/a, tokens: [{json: a}]}", "must be absolute"),
    ("{name: x, file: /a, tokens: []}", "tokens: must be a non-empty list"),
    ("{name: x, file: /a, tokens: [{json: 'a..b'}]}", "not a dotted path"),
    ("{name: x, file: /a, tokens: [{json: a, hosts: [1.2.3.4]}]}", "not addresses"),
    ("{name: x, file: /a, tokens: [{json: a, jwt: yes-please}]}", "true or false"),
    ("{name: x, file: /a, tokens: [{json: a}, {json: a}]}", "named twice"),
])
def test_bad_entries_name_line_and_key(tmp_path, entry, why):
    errs = _errors(tmp_path, f"logins:\n  - {entry}\n")
    assert any(why in e and "p.yaml:2" in e for e in errs), errs


def test_claude_copy_keeps_shape_and_replaces_only_tokens(tmp_path):
    f = tmp_path / "creds.json"
    (lg,) = _load(tmp_path, CLAUDE.format(file=f)).logins
    acc, ref = "sk-ant-oat01-" + "Ab9" * 30, "sk-ant-ort01-" + "Zy8" * 30
    real = {"claudeAiOauth": {"accessToken": acc, "refreshToken": ref, "expiresAt": 17,
                              "scopes": ["user:inference"], "subscriptionType": "max"}}
    c = logins.make_copy(lg, json.dumps(real))
    seen = json.loads(c.text)["claudeAiOauth"]
    assert acc not in c.text and ref not in c.text
    assert seen["accessToken"].startswith("sk-ant-oat01-") and len(seen["accessToken"]) == len(acc)
    assert seen["refreshToken"].startswith("sk-ant-ort01-") and len(seen["refreshToken"]) == len(ref)
    assert {k: v for k, v in seen.items() if not k.endswith("Token")} == {
        k: v for k, v in real["claudeAiOauth"].items() if not k.endswith("Token")}
    a, r = c.bindings
    assert (a.name, a.value, a.placeholder, a.targets) == (
        "claude-code:claudeAiOauth.accessToken", acc, seen["accessToken"],
        (Target("api.anthropic.com", 443),))
    assert (r.value, r.targets) == (ref, ())     # never sent anywhere
    assert acc not in repr(c) and acc not in repr(a)


def test_codex_jwt_keeps_claims_not_signature_and_absent_keys_are_skipped(tmp_path):
    f = tmp_path / "auth.json"
    pol = _load(tmp_path, f"""
        logins:
          - name: codex
            file: {f}
            tokens:
              - {{json: OPENAI_API_KEY, hosts: [api.openai.com]}}
              - {{json: tokens.access_token, hosts: [chatgpt.com], jwt: true}}
              - {{json: tokens.refresh_token}}
              - {{json: tokens.id_token, jwt: true}}
        """)
    (lg,) = pol.logins
    head, claims = _b64({"alg": "RS256"}), _b64({"email": "a@b.example", "chatgpt_plan_type": "plus"})
    sig = "s1G" * 40
    idt = f"{head}.{claims}.{sig}"
    opaque = "rt_" + "q7W" * 20      # jwt: true on a token that is no JWT: the ordinary rule
    real = {"OPENAI_API_KEY": None, "tokens": {"id_token": idt, "access_token": opaque,
                                               "refresh_token": "rt_" + "Kp2" * 20,
                                               "account_id": "acct-123"},
            "last_refresh": "2026-12-06T00:00:00Z"}
    c = logins.make_copy(lg, json.dumps(real))
    got = json.loads(c.text)
    assert got["OPENAI_API_KEY"] is None and got["tokens"]["account_id"] == "acct-123"
    h, p, s = got["tokens"]["id_token"].split(".")
    assert (h, p) == (head, claims) and s != sig and len(s) == len(sig)
    assert sig not in c.text and real["tokens"]["refresh_token"] not in c.text
    assert len(got["tokens"]["access_token"]) == len(opaque) and opaque not in c.text
    assert [b.name for b in c.bindings] == ["codex:tokens.access_token",
                                            "codex:tokens.refresh_token", "codex:tokens.id_token"]


def test_a_value_left_elsewhere_in_the_copy_is_refused(tmp_path):
    f = tmp_path / "creds.json"
    (lg,) = _load(tmp_path, CLAUDE.format(file=f)).logins
    acc = "sk-ant-oat01-" + "Ab9" * 30
    ok = {"claudeAiOauth": {"accessToken": acc, "refreshToken": "sk-ant-ort01-" + "Zy8" * 30}}
    logins.make_copy(lg, json.dumps(ok))
    leaked = {**ok, "backup": {"token": acc}}     # a copy the profile does not name
    with pytest.raises(sources.SourceError) as e:
        logins.make_copy(lg, json.dumps(leaked))
    assert acc not in str(e.value)
    with pytest.raises(sources.SourceError, match="not JSON"):
        logins.make_copy(lg, "{nope")


def test_start_skips_an_absent_optional_file_and_refuses_without_mount_ns(tmp_path):
    f = tmp_path / "creds.json"
    pol = _load(tmp_path, CLAUDE.format(file=f).replace("tokens:", "optional: true\n        tokens:"))
    events: list[dict] = []
    kw = dict(uid=os.getuid(), gid=os.getgid(), tmp=str(tmp_path), warn=lambda s: None,
              emit=events.append, grants=(), denied=())
    assert logins.start(pol.logins, mount_ns=True, **kw) == []
    assert events[-1]["action"] == "skipped"
    f.write_text(json.dumps({"claudeAiOauth": {"accessToken": "sk-ant-oat01-" + "Ab9" * 30}}))
    f.chmod(0o600)
    (c,) = logins.start(pol.logins, mount_ns=True, **kw)
    assert c.target == str(f) and c.path.startswith(str(tmp_path))
    logins.write([c], os.getuid(), os.getgid())
    assert os.stat(c.path).st_mode & 0o777 == 0o600
    assert "sk-ant-oat01-" + "Ab9" * 30 not in open(c.path).read()
    assert "Ab9" * 30 not in json.dumps(events)
    from confine.errors import ConfineError
    with pytest.raises(ConfineError, match="mount namespace"):
        logins.start(pol.logins, mount_ns=False, **kw)


REFRESH = CLAUDE + """
        refresh:
          endpoints: [platform.claude.com/v1/oauth/token]
          token: claudeAiOauth.refreshToken
          response: {{access_token: claudeAiOauth.accessToken, refresh_token: claudeAiOauth.refreshToken}}
    """


@pytest.mark.parametrize("refresh,why", [
    ("{endpoints: [platform.claude.com], token: a, response: {x: a}}", "not HOST/PATH"),
    ("{endpoints: ['1.2.3.4/t'], token: a, response: {x: a}}", "not HOST/PATH"),
    ("{endpoints: [h.example/t], token: b, response: {x: a}}", "token: 'b' is not one of"),
    ("{endpoints: [h.example/t], token: a, response: {x: c}}", "response.x: 'c' is not one of"),
    ("{endpoints: [h.example/t], token: a}", "needs response:"),
])
def test_bad_refresh_names_line_and_key(tmp_path, refresh, why):
    errs = _errors(tmp_path, "logins:\n  - {name: x, file: /a, tokens: [{json: a}], "
                             f"refresh: {refresh}}}\n")
    assert any(why in e and "p.yaml:2" in e for e in errs), errs


def _refresh_copy(tmp_path):
    f = tmp_path / "creds.json"
    (lg,) = _load(tmp_path, REFRESH.format(file=f)).logins
    acc, ref = "sk-ant-oat01-" + "Ab9" * 30, "sk-ant-ort01-" + "Zy8" * 30
    f.write_text(json.dumps({"claudeAiOauth": {"accessToken": acc, "refreshToken": ref,
                                               "expiresAt": 5}}))
    f.chmod(0o640)
    return f, lg, logins.make_copy(lg, f.read_text()), acc, ref


def test_refresh_swaps_the_body_and_stores_the_answer(tmp_path):
    f, lg, c, acc, ref = _refresh_copy(tmp_path)
    a, r = c.bindings
    rf = r.refresh
    assert a.refresh is None and rf is not None
    assert rf.matches("platform.claude.com", 443, "POST", "/v1/oauth/token")
    assert not rf.matches("platform.claude.com", 443, "GET", "/v1/oauth/token")
    assert not rf.matches("platform.claude.com", 443, "POST", "/v1/oauth/token2")
    assert not rf.matches("api.anthropic.com", 443, "POST", "/v1/oauth/token")
    body = json.dumps({"grant_type": "refresh_token", "refresh_token": r.placeholder}).encode()
    assert json.loads(rf.request(body))["refresh_token"] == ref
    with pytest.raises(logins.RefreshError):          # no placeholder of this login in it
        rf.request(b'{"refresh_token": "sk-ant-ort01-guess"}')
    new_acc, new_ref = "sk-ant-oat01-" + "Qw1" * 30, "sk-ant-ort01-" + "Er2" * 30
    bound: list = []
    events: list = []
    rf.emit = events.append
    out = json.loads(rf.answer(json.dumps({"access_token": new_acc, "refresh_token": new_ref,
                                           "expires_in": 3600}).encode(), bound.append))
    assert out["expires_in"] == 3600
    assert out["access_token"] != new_acc and len(out["access_token"]) == len(new_acc)
    assert [(b.placeholder, b.value) for b in bound] == [
        (out["access_token"], new_acc), (out["refresh_token"], new_ref)]
    assert bound[0].targets == a.targets and bound[1].refresh is rf
    real = json.loads(f.read_text())["claudeAiOauth"]
    assert (real["accessToken"], real["refreshToken"], real["expiresAt"]) == (new_acc, new_ref, 5)
    assert f.stat().st_mode & 0o777 == 0o640
    assert [n for n in os.listdir(tmp_path) if n.startswith(".creds")] == []
    # the next refresh carries the new placeholder and gets the new real value
    assert json.loads(rf.request(json.dumps({"refresh_token": out["refresh_token"]}).encode())
                      )["refresh_token"] == new_ref
    assert events[-1]["action"] == "refreshed" and new_acc not in json.dumps(events)
    with pytest.raises(logins.RefreshError):
        rf.answer(b"<html>", bound.append)


def test_refresh_writes_the_real_file_in_place_with_its_stamps(tmp_path):
    """The real file keeps its inode: a rename would replace the name the agent's copy is
    bound over, which ends that bind in the agent's namespace and shows it the real file.
    expiresAt is stamped from the answer (else the next run starts expired); an answer
    with none of the tokens writes nothing."""
    f = tmp_path / "creds.json"
    (lg,) = _load(tmp_path, REFRESH.format(file=f) + "      stamps: {claudeAiOauth.expiresAt: "
                  "expires_in_ms, at: now_rfc3339}\n").logins
    assert dict(lg.refresh.stamps) == {("claudeAiOauth", "expiresAt"): "expires_in_ms",
                                       ("at",): "now_rfc3339"}
    ref = "sk-ant-ort01-" + "Zy8" * 30
    f.write_text(json.dumps({"claudeAiOauth": {"accessToken": "sk-ant-oat01-" + "Ab9" * 30,
                                               "refreshToken": ref, "expiresAt": 5}}))
    f.chmod(0o600)
    before = f.stat().st_ino
    rf = logins.make_copy(lg, f.read_text()).bindings[1].refresh
    with pytest.raises(logins.RefreshError, match="none of the login's tokens"):
        rf.answer(b'{"error": "invalid_grant"}', lambda b: None)
    assert json.loads(f.read_text())["claudeAiOauth"]["expiresAt"] == 5
    new_acc = "sk-ant-oat01-" + "Qw1" * 30
    rf.answer(json.dumps({"access_token": new_acc, "expires_in": 3600}).encode(), lambda b: None)
    real = json.loads(f.read_text())
    assert f.stat().st_ino == before
    assert real["claudeAiOauth"]["accessToken"] == new_acc
    assert real["claudeAiOauth"]["refreshToken"] == ref
    assert real["claudeAiOauth"]["expiresAt"] > 1_700_000_000_000
    assert real["at"].endswith("Z") and real["at"][:2] == "20"
    assert sorted(os.listdir(tmp_path)) == ["creds.json", "p.yaml"]


@pytest.mark.parametrize("stamps,why", [
    ("{b: now}", "not one of expires_in_ms"),
    ("{a: expires_in_ms}", "one of this login's tokens"),
    ("[x]", "must map"),
])
def test_bad_stamps_name_line_and_key(tmp_path, stamps, why):
    errs = _errors(tmp_path, "logins:\n  - {name: x, file: /a, tokens: [{json: a}], refresh: "
                             f"{{endpoints: [h.example/t], token: a, response: {{x: a}}, "
                             f"stamps: {stamps}}}}}\n")
    assert any(why in e and "p.yaml:2" in e for e in errs), errs


def test_whole_response_framing():
    from confine.credentials.swap import Refusal, _whole_response
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    assert _whole_response(head + b"Content-Length: 4\r\n\r\n{}", False) is None
    assert _whole_response(head + b"Content-Length: 2\r\n\r\n{}", False)[2] == b"{}"
    chunked = head + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"
    assert _whole_response(chunked, False) is None
    assert _whole_response(chunked + b"0\r\n\r\n", False)[2] == b"{}"
    assert _whole_response(head + b"\r\n{}", False) is None
    assert _whole_response(head + b"\r\n{}", True)[2] == b"{}"
    with pytest.raises(Refusal):
        _whole_response(b"garbage\r\n\r\n", True)


def test_a_login_file_that_is_a_link_or_someone_else_s_is_refused(tmp_path):
    """Root reads the agent's account's file for --user: a link there (to a file of root's)
    or a file of another owner must not become the agent's copy. The control: the same
    content as the account's own regular file is read."""
    f = tmp_path / "creds.json"
    (lg,) = _load(tmp_path, CLAUDE.format(file=f)).logins
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"claudeAiOauth": {"accessToken": "sk-ant-oat01-" + "Ab9" * 30},
                                 "private": "of root"}))
    kw = dict(uid=os.getuid(), gid=os.getgid(), tmp=str(tmp_path), mount_ns=True,
              warn=lambda s: None, emit=lambda e: None, grants=(), denied=())
    f.symlink_to(other)
    with pytest.raises(sources.SourceError):
        logins.start((lg,), **kw)
    f.unlink()
    f.write_bytes(other.read_bytes())
    assert len(logins.start((lg,), **kw)) == 1
    if os.geteuid() == 0:
        os.chown(f, 54321, 54321)
        with pytest.raises(sources.SourceError, match="belongs to uid 54321"):
            logins.start((lg,), **kw)


# --- a refresh's write cut by a crash (credentials/redo.py) ---

NEW_ACC, NEW_REF = "sk-ant-oat01-" + "Qw1" * 30, "sk-ant-ort01-" + "Er2" * 30


def _padded_login(tmp_path):
    """A login whose new text (indent 2) is shorter than its old one (indent 4): a write
    cut before its truncate leaves the old tail after the new text."""
    f, lg, _c, acc, ref = _refresh_copy(tmp_path)
    f.write_text(json.dumps({"claudeAiOauth": {"accessToken": acc, "refreshToken": ref,
                                               "expiresAt": 5}, "other": {"kept": True}},
                            indent=4))
    f.chmod(0o600)
    return f, lg, logins.make_copy(lg, f.read_text()).bindings[1].refresh


def _killed_between_write_and_truncate(rf) -> None:
    """The supervisor's refresh, in a child killed (SIGKILL) right after the new text
    is written over the old and before the file is cut to its length."""
    pid = os.fork()
    if pid == 0:
        try:
            os.ftruncate = lambda fd, n: os.kill(os.getpid(), signal.SIGKILL)
            rf.answer(json.dumps({"access_token": NEW_ACC, "refresh_token": NEW_REF,
                                  "expires_in": 3600}).encode(), lambda b: None)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _start(lg, tmp_path, grants=()):
    said: list[str] = []
    events: list[dict] = []
    out = logins.start((lg,), uid=os.getuid(), gid=os.getgid(), tmp=str(tmp_path),
                       mount_ns=True, warn=said.append, emit=events.append, grants=grants,
                       denied=())
    return out, said, events


def test_a_refresh_cut_by_a_crash_is_redone_at_the_next_start(tmp_path, records):
    """With token rotation the old refresh token is spent once the answer arrives, so a
    supervisor killed mid-write must not lose the new tokens: the next start rewrites the
    half-written file (not JSON: the new text, then the old tail) from the record, in
    place, and the agent's copy is made from the new tokens."""
    f, lg, rf = _padded_login(tmp_path)
    ino = f.stat().st_ino
    _killed_between_write_and_truncate(rf)
    with pytest.raises(ValueError):
        json.loads(f.read_text())               # what the crash left: not JSON
    (rec,) = os.listdir(records)
    assert os.stat(records / rec).st_mode & 0o777 == 0o600
    (c,), said, events = _start(lg, tmp_path)
    real = json.loads(f.read_text())
    assert (real["claudeAiOauth"]["accessToken"], real["claudeAiOauth"]["refreshToken"]) == (
        NEW_ACC, NEW_REF)
    assert real["other"] == {"kept": True}
    assert f.stat().st_ino == ino and f.stat().st_mode & 0o777 == 0o600
    assert os.listdir(records) == []
    assert [b.value for b in c.bindings] == [NEW_ACC, NEW_REF]
    assert NEW_ACC not in c.text and NEW_REF not in c.text
    assert len(said) == 1 and "restored" in said[0], said
    assert any(e.get("action") == "recovered" and e.get("applied") for e in events), events
    assert NEW_REF not in json.dumps(events) + " ".join(said)
    # a refresh that is not cut leaves no record behind
    rf2 = c.bindings[1].refresh
    rf2.answer(json.dumps({"access_token": "sk-ant-oat01-" + "Zx3" * 30}).encode(),
               lambda b: None)
    assert os.listdir(records) == []
    assert json.loads(f.read_text())["claudeAiOauth"]["refreshToken"] == NEW_REF


def _tamper(case: str, rec, f, records, tmp_path) -> None:
    if case == "bad JSON":
        rec.write_text('{"version": 1, "text": ')
    elif case == "group-readable":
        rec.chmod(0o640)
    elif case == "symlink":
        aside = tmp_path / "aside.json"
        os.rename(rec, aside)
        rec.symlink_to(aside)
    elif case == "another file":
        d = json.loads(rec.read_text())
        rec.write_text(json.dumps({**d, "file": str(tmp_path / "other.json")}))
    elif case == "another owner":
        os.chown(rec, 54321, 54321)
    elif case == "signed in again":
        d = json.loads(f.read_text())
        d["claudeAiOauth"]["accessToken"] = "sk-ant-oat01-" + "Nn7" * 30
        f.write_text(json.dumps(d))


@pytest.mark.parametrize("case", ["bad JSON", "group-readable", "symlink", "another file",
                                  "another owner", "signed in again"])
def test_a_record_that_is_not_ours_is_refused_and_left(tmp_path, records, case):
    """A record someone else placed (or one confine cannot read) would choose the tokens
    the person's login carries: refused with a line, left, the login file untouched. A
    record older than the file (signed in again since) is not applied either. The
    control: the same record untampered is applied."""
    from confine.credentials import redo
    if case == "another owner" and os.geteuid() != 0:
        pytest.skip("needs root to give the record another owner")
    f, lg, rf = _padded_login(tmp_path)
    before = f.read_bytes()
    new = before.replace(b"Zy8" * 30, b"Er2" * 30)
    redo.Record(lg.name, str(f), new, before).close()     # killed before its write
    (name,) = os.listdir(records)
    rec = records / name
    _tamper(case, rec, f, records, tmp_path)
    was = f.read_bytes()
    _copies, said, events = _start(lg, tmp_path)
    assert f.read_bytes() == was
    assert os.path.lexists(rec)
    assert len(said) == 1 and "not applied, left" in said[0], said
    assert [e["action"] for e in events if e.get("action", "").startswith("recover")] == [
        "recovery_refused"], events
    # the control: the record as the crash left it is applied
    os.unlink(rec)
    f.write_bytes(before)
    redo.Record(lg.name, str(f), new, before).close()
    _copies, said, _events = _start(lg, tmp_path)
    assert f.read_bytes() == new and os.listdir(records) == [] and "restored" in said[0]


def test_the_newest_record_wins_and_supersedes_older_ones(tmp_path, records):
    """Two records of one file (one left behind, then another crash): the newest is
    applied and the older one removed (its refresh token was spent by the newer refresh);
    applied oldest first, the stale tokens would have won."""
    from confine.credentials import redo
    f, lg, _rf = _padded_login(tmp_path)
    before = f.read_bytes()
    older = before.replace(b"Zy8" * 30, b"Aa1" * 30)
    newer = before.replace(b"Zy8" * 30, b"Er2" * 30)
    redo.Record(lg.name, str(f), older, before).close()
    redo.Record(lg.name, str(f), newer, before).close()
    assert len(os.listdir(records)) == 2
    _c, said, events = _start(lg, tmp_path)
    assert f.read_bytes() == newer and os.listdir(records) == []
    assert [e["action"] for e in events if e.get("action") in ("recovered", "superseded")] \
        == ["recovered", "superseded"]


def test_a_refreshing_login_is_refused_where_the_agent_could_read_its_records(tmp_path,
                                                                               records):
    """A record holds the real new tokens while it exists: a grant of the profile that
    covers the records' directory refuses the run before the start (unless a deny carves
    it out), as minting does; the control: a grant elsewhere."""
    from confine.errors import ConfineError
    _f, lg, _rf = _padded_login(tmp_path)
    with pytest.raises(ConfineError, match="readable by the agent through"):
        _start(lg, tmp_path, grants=[(str(records.parent), "--read")])
    assert len(_start(lg, tmp_path, grants=[("/usr", "default.yaml:3")])[0]) == 1
    assert len(logins.start((lg,), uid=os.getuid(), gid=os.getgid(), tmp=str(tmp_path),
                            mount_ns=True, warn=print, emit=print,
                            grants=[(str(records.parent), "--read")],
                            denied=[str(records)])) == 1


def test_a_record_that_cannot_be_kept_does_not_lose_the_refresh(tmp_path, records):
    """The records' directory no longer private mid-run (or a full disk): the new tokens
    are got and the old refresh token spent, so the file is written without a record
    (never a record in a directory others may read) and the event says so; the control:
    the same refresh with the directory private leaves no record either, and no event."""
    f, lg, _rf = _padded_login(tmp_path)
    (c,), _said, _events = _start(lg, tmp_path)
    rf = c.bindings[1].refresh
    events: list = []
    rf.emit = events.append
    os.chmod(records, 0o755)
    try:
        rf.answer(json.dumps({"refresh_token": NEW_REF}).encode(), lambda b: None)
    finally:
        os.chmod(records, 0o700)
    assert json.loads(f.read_text())["claudeAiOauth"]["refreshToken"] == NEW_REF
    assert os.listdir(records) == []
    assert [e["action"] for e in events] == ["unrecorded", "refreshed"], events
    events.clear()
    rf.answer(json.dumps({"refresh_token": "sk-ant-ort01-" + "Pq4" * 30}).encode(),
              lambda b: None)
    assert [e["action"] for e in events] == ["refreshed"] and os.listdir(records) == []
