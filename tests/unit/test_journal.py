"""confine/journal in-process: the chain and its verdicts, the HMAC, the writer's cap
and reserve, the key's refusals, the export shapes (tests/e2e/test_record.py runs
it through real runs)."""
from __future__ import annotations

import hmac
import json
import os
import threading

import pytest

from confine.errors import ConfineError
from confine.journal import chain, render, store, writer

RUN = "20261206-081500-42"


@pytest.fixture
def state(tmp_path, monkeypatch):
    """The state directories in tmp_path, whoever runs the unit tier (root's would
    be /var/lib/confine)."""
    monkeypatch.setattr(store, "state_dir", lambda name, **_: str(tmp_path / name))
    # and the fallback (/tmp/confine-state-UID), which earlier runs of the account may fill
    monkeypatch.setattr(store, "fallback_base", lambda: str(tmp_path / "fallback"))
    monkeypatch.delenv(writer.LINES_ENV, raising=False)
    return tmp_path


def _record(n: int = 8, **kw) -> tuple[bytes, bytes, writer.Journal]:
    j = writer.Journal.open(RUN, {"argv": ["x"], "workdir": "/w"}, **kw)
    j.start()
    for i in range(n):
        j.append({"event": "refusal", "time": 1.5, "layer": "mediation", "what": f"r{i}"})
    j.close({"status": 0})
    key = store.load_key(False)
    assert key is not None
    return store.read(j.path), key, j


@pytest.mark.parametrize("key", [b"k", b"k" * 64, b"k" * 65, os.urandom(32)])
def test_hmac_is_rfc2104(key):
    assert chain.hmac_sha256(key, b"line\n") == hmac.new(key, b"line\n", "sha256").hexdigest()


def test_a_whole_record_verifies(state):
    data, key, j = _record()
    v = chain.verify(data, key, run=RUN)
    assert v.ok and v.closed and v.lines == 10, v
    first = json.loads(data.splitlines()[0])
    assert first["prev"] == first["nonce"] and first["key"] == chain.key_id(key)
    assert os.stat(j.path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(j.path)).st_mode & 0o777 == 0o700
    assert os.stat(store.key_path()).st_mode & 0o777 == 0o600


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@pytest.mark.parametrize("how,result,line", [
    ("byte", chain.EDITED, 4), ("removed", chain.REMOVED, 4), ("swapped", chain.REORDERED, 4),
    ("last", chain.NOT_CLOSED, 9), ("first", chain.REMOVED, 1), ("cut", chain.TRUNCATED, 10),
    ("seq", chain.EDITED, 4), ("prev", chain.EDITED, 4), ("appended", chain.EDITED, 11),
    ("rechained", chain.EDITED, 10), ("other run", chain.EDITED, 1)])
def test_each_edit_is_named(state, how, result, line):
    data, key, _ = _record()
    L = _lines(data)
    if how == "byte":
        L[3] = L[3].replace(b'"r2"', b'"r3"')
    elif how == "removed":
        del L[3]
    elif how == "swapped":
        L[3], L[4] = L[4], L[3]
    elif how == "last":
        del L[-1]
    elif how == "first":
        del L[0]
    elif how == "cut":
        L[-1] = L[-1][:-9]
    elif how == "seq":
        L[3] = L[3].replace(b'"seq":3,', b'"seq":7,')
    elif how == "prev":
        L[3] = L[3][:20] + (b"0" if L[3][20:21] != b"0" else b"1") + L[3][21:]
    elif how == "appended":
        L.append(L[-1])
    elif how == "rechained":
        # every hash recomputed after an edit: only the HMAC catches it
        recs = [json.loads(x) for x in L]
        recs[3]["what"] = "forged"
        prev, out = recs[0]["prev"], []
        for r in recs:
            r["prev"] = prev
            raw = (json.dumps(r, separators=(",", ":")) + "\n").encode()
            out.append(raw)
            prev = chain.digest(raw)
        L = out
    v = chain.verify(b"".join(L), key, run="20261206-081500-7" if how == "other run" else RUN)
    assert (v.result, v.line) == (result, line), v
    assert v.message.startswith(f"line {line}: "), v


def test_without_the_key_the_hmac_is_not_a_pass(state):
    data, key, _ = _record()
    assert chain.verify(data, None).result == chain.NO_KEY
    assert chain.verify(data, os.urandom(32)).result == chain.OTHER_KEY


def test_the_cap_counts_what_it_drops_and_keeps_room_for_the_end(state, monkeypatch):
    monkeypatch.setenv(writer.LINES_ENV, "20")
    j = writer.Journal.open(RUN, {})
    for i in range(100):
        j.append({"event": "refusal" if i % 2 else "dns", "time": 1})
    j.ended()
    for _ in range(5):
        j.append({"event": "exit_check", "time": 2})
    j.close({})
    recs = [json.loads(x) for x in store.read(j.path).splitlines()]
    assert [r["event"] for r in recs[-7:]] == ["exit_check"] * 5 + ["dropped", "end"]
    assert recs[-2]["by_event"] == {"refusal": 40, "dns": 40} and recs[-2]["count"] == 80
    assert len(recs) == 1 + 20 + 7
    assert chain.verify(store.read(j.path), store.load_key(False)).ok


@pytest.mark.parametrize("raw", ["lots", "5", "-1"])
def test_a_bad_cap_is_refused(state, monkeypatch, raw):
    monkeypatch.setenv(writer.LINES_ENV, raw)
    with pytest.raises(ConfineError, match=writer.LINES_ENV):
        writer.Journal.open(RUN, {})


def test_threads_append_in_one_chain(state):
    j = writer.Journal.open(RUN, {})
    before = threading.active_count()
    j.append({"event": "refusal", "time": 1})
    assert threading.active_count() == before      # no thread until start() (the fork)
    j.start()

    def flood(t: int) -> None:
        for i in range(200):
            j.append({"event": "refusal", "time": 1, "what": f"{t}-{i}"})
    ts = [threading.Thread(target=flood, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    j.close({})
    v = chain.verify(store.read(j.path), store.load_key(False))
    assert v.ok and v.lines == 803, v


def test_the_mirror_gets_the_same_bytes_and_a_second_run_segments(state, tmp_path):
    log = tmp_path / "run.log"
    for _ in range(2):
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        data, key, _ = _record(3, mirror=fd, mirror_name=str(log))
    both = log.read_bytes()
    assert both.endswith(data) and len(both) > len(data)
    parts = chain.segments(both)
    assert [p[0] for p in parts] == [1, 6]
    assert all(chain.verify(b, key, first=f).ok for f, b in parts)


def test_a_record_id_taken_gets_a_suffix(state):
    a = writer.Journal.open(RUN, {})
    b = writer.Journal.open(RUN, {})
    assert (a.run, b.run) == (RUN, RUN + ".1")
    a.close()
    b.close()
    assert store.runs() == [RUN, RUN + ".1"] or sorted(store.runs()) == [RUN, RUN + ".1"]
    assert store.locate(RUN + ".1") == b.path


def test_a_key_others_can_read_is_refused(state):
    store.load_key(True)
    os.chmod(store.key_path(), 0o644)
    with pytest.raises(ConfineError, match="0600"):
        store.load_key(False)


def test_the_store_is_bounded_oldest_first(state):
    says: list[str] = []
    paths = []
    for i in range(4):
        j = writer.Journal.open(f"20261206-08150{i}-1", {})
        j.close()
        paths.append(j.path)
        os.utime(j.path, (1000 + i, 1000 + i))
    size = os.stat(paths[0]).st_blocks * 512
    dropped = store.bound(2 * size, 1e6, "20261206-081500-1", says.append, now=2000)
    assert dropped == 2 and len(says) == 2
    assert [os.path.exists(p) for p in paths] == [True, False, False, True]   # the current stays
    assert store.bound(1 << 30, 0.001, "20261206-081503-1", says.append) == 1   # by age


def test_human_lines_escape_what_the_agent_named():
    rec = {"seq": 3, "time": 1.0, "event": "refusal", "layer": "name guard",
           "what": "symlink e\x1b]0;pwned\x07/.envrc", "grant": {"key": "protected",
                                                                  "value": "!.envrc"}}
    line = render.human(rec)
    assert "\x1b" not in line and "\x07" not in line and "\\x1b]0;pwned" in line
    o = render.ocsf(rec, RUN)
    assert (o["class_uid"], o["status_id"], o["action_id"]) == (1001, 2, 2)
    assert o["metadata"]["uid"] == f"{RUN}:3" and o["unmapped"]["what"] == rec["what"]
    dns = render.ocsf({"seq": 4, "time": 2.0, "event": "dns", "name": "x.test",
                       "decision": "deny"}, RUN)
    assert dns["class_uid"] == 4003 and dns["query"]["hostname"] == "x.test"


def test_the_other_helpers_events_read_as_lines():
    ap = render.summary({"event": "approval", "of": "unix_socket",
                         "subject": {"path": "/run/x.sock"}, "decision": "deny", "by": "tty",
                         "answer": "once", "latency_ms": 812.5})
    assert ap == "asked unix_socket path=/run/x.sock: deny by tty (once) in 812.5 ms"
    cr = render.summary({"event": "credential", "kind": "credential", "action": "use",
                         "name": "gh", "host": "api.github.com"})
    assert cr.startswith("credential gh: use ") and "host=api.github.com" in cr


def test_without_a_state_directory_the_record_goes_to_the_runtime_directory(
        tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(store, "state_dir", lambda name, **_: str(tmp_path / "file" / name))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "rt"))
    (tmp_path / "rt").mkdir()
    base, note = store.writable_base()
    assert base == str(tmp_path / "rt" / "confine") and "kept in" in note
    j = writer.Journal.open(RUN, {}, base=base)
    j.close()
    assert store.locate(None) == j.path == os.path.join(base, "runs", RUN + ".jsonl")
    assert store.base_of(j.path) == base
    assert chain.verify(store.read(j.path), store.load_key(False, base)).ok
