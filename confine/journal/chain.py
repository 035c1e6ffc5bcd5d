"""The record's line format and its check: bytes in, verdict out (no files here).

A line is one JSON object, ASCII only (names the agent chose are \\u escapes: no
byte of a line can move a terminal's cursor when shown), ending in "\\n":

    {"seq":N,"prev":H,"time":T,"event":E,...}

`prev` is the SHA-256 (hex) of the previous line's exact bytes, newline included;
the first line ("event":"start") chains to a per-run random nonce, which it also
carries ("nonce"), so two records never share a chain and a chain cannot be
computed before the run. The last line ("event":"end") carries "mac": the
HMAC-SHA256, under the person's record key, of that line's own bytes without the
mac, which include `prev`, the hash of everything before it.

Threat: a line edited, removed, reordered, or the file cut short. The hashes alone
catch a careless edit and say where; the HMAC catches one that recomputed them
(the key is out of the editor's reach). A record without its end line is "not
closed": the run was killed before it ended, or the end was cut off; an editor
can always cut lines from the end, so "not closed" is never a pass.

"""
from __future__ import annotations

import hmac
import json
import re
from collections.abc import Mapping
from hashlib import sha256

from ..record import dataclass

VERSION = 1
RESERVED = ("seq", "prev", "mac")
_HEX64 = re.compile(rb"[0-9a-f]{64}")
_MAC_TAIL = re.compile(rb',"mac":"([0-9a-f]{64})"\}\n\Z')
# one encoder for every line: json.dumps with options makes a new one per call
_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"))

# verdicts (the CLI's exit codes: ok 0, not-closed 2, the others 1)
OK, EDITED, REMOVED, REORDERED, TRUNCATED, NOT_CLOSED, NO_KEY, OTHER_KEY, EMPTY = (
    "ok", "edited", "removed", "reordered", "truncated", "not-closed", "no-key",
    "other-key", "empty")


def digest(line: bytes) -> str:
    return sha256(line).hexdigest()


def hmac_sha256(key: bytes, msg: bytes) -> str:
    return hmac.new(key, msg, "sha256").hexdigest()


def key_id(key: bytes) -> str:
    """Names a key without revealing it: which key closed a record."""
    return digest(b"confine-record-key\0" + key)[:16]


def encode(seq: int, prev: str, fields: Mapping[str, object]) -> bytes:
    """One line: seq and prev first, then the fields (never overriding them)."""
    rec: dict[str, object] = {"seq": seq, "prev": prev}
    for k, v in fields.items():
        if k not in RESERVED:
            rec[k] = v
    return (_ENCODER.encode(rec) + "\n").encode("ascii")


def seal(key: bytes, seq: int, prev: str, fields: Mapping[str, object]) -> bytes:
    """The closing line: its own bytes without the mac, then the mac over them."""
    body = encode(seq, prev, fields)
    mac = hmac_sha256(key, body)
    return body[:-2] + f',"mac":"{mac}"}}\n'.encode()


@dataclass
class Verdict:
    result: str                 # OK or one of the failures above
    line: int = 0               # 1-based: the first bad line (0: none)
    message: str = ""
    lines: int = 0              # lines read
    run: str = ""               # the run the start line names
    closed: bool = False

    @property
    def ok(self) -> bool:
        return self.result == OK

    def to_dict(self) -> dict[str, object]:
        return {"result": self.result, "ok": self.ok, "line": self.line,
                "message": self.message, "lines": self.lines, "run": self.run,
                "closed": self.closed}


def _seq(rec: Mapping[str, object]) -> int:
    s = rec["seq"]
    return s if isinstance(s, int) else -1


def _parse(raw: bytes) -> dict[str, object] | None:
    try:
        rec = json.loads(raw)
    except ValueError:
        return None
    if (not isinstance(rec, dict) or not isinstance(rec.get("seq"), int)
            or not isinstance(rec.get("prev"), str)):
        return None
    return rec


def verify(data: bytes, key: bytes | None, *, run: str | None = None,
           first: int = 1) -> Verdict:
    """Check one record's bytes. key None: everything but the HMAC is checked and
    the verdict is NO_KEY at best. run: the id the record must name. first: the
    line number of data's first line (a record inside a longer --log file)."""
    if not data:
        return Verdict(EMPTY, first, "the record is empty")
    raw = data.split(b"\n")
    tail = raw.pop()                     # b"" when the data ends with a newline
    lines = [r + b"\n" for r in raw]
    n = len(lines) + (1 if tail else 0)
    recs = [_parse(b) for b in lines]
    hashes = [digest(b) for b in lines]
    where = {h: i for i, h in enumerate(hashes)}

    def bad(result: str, i: int, msg: str) -> Verdict:
        return Verdict(result, first + i, f"line {first + i}: {msg}", n, started)

    started = ""
    for i, rec in enumerate(recs):
        if rec is None:
            return bad(EDITED, i, "edited (not a line of a record)")
        if i == 0:
            if rec.get("seq") != 0 or rec.get("event") != "start":
                if _seq(rec) > 0:
                    return bad(REMOVED, 0, f"the first {rec['seq']} line(s) of the record "
                               "were removed (it begins at a later line)")
                return bad(EDITED, 0, "edited (the first line is not the run's start)")
            if (not _HEX64.fullmatch(str(rec["prev"]).encode())
                    or rec.get("nonce") != rec["prev"]):
                return bad(EDITED, 0, "edited (the start line's nonce)")
            started = str(rec.get("run") or "")
            if run is not None and started != run:
                return bad(EDITED, 0, f"this is the record of run {started!r}, not of {run!r}")
            continue
        before = recs[i - 1]
        assert before is not None
        chained = rec["prev"] == hashes[i - 1]
        step = _seq(rec) - _seq(before)
        if chained and step == 1:
            if rec.get("event") == "end" and i != len(recs) - 1:
                return bad(EDITED, i + 1, "lines after the record's end (appended later)")
            continue
        if chained:
            return bad(EDITED, i, "edited (its seq does not follow the line before)")
        j = where.get(str(rec["prev"]))
        if j is not None and j != i - 1:
            return bad(REORDERED, i, f"out of order (it follows line {first + j} of the file, "
                       f"not line {first + i - 1})")
        if step > 1:
            return bad(REMOVED, i, f"{step - 1} line(s) removed before it")
        if step < 1:
            return bad(REORDERED, i, "out of order (its seq is not after the line before)")
        # line i-1 was changed, or the prev field of line i: the next line tells which
        after = recs[i + 1] if i + 1 < len(recs) else None
        if after is not None and after["prev"] != hashes[i]:
            return bad(EDITED, i, "edited")
        return bad(EDITED, i - 1, "edited (its hash is not the one the next line carries)")
    if tail:
        return bad(TRUNCATED, len(lines), "truncated (cut within the line)")
    last = recs[-1]
    assert last is not None
    if last.get("event") != "end":
        return Verdict(NOT_CLOSED, first + len(lines) - 1,
                       f"line {first + len(lines) - 1}: not closed: the record has no end line "
                       "(the run was killed before it ended, or its last lines were removed)",
                       n, started)
    m = _MAC_TAIL.search(lines[-1])
    if m is None:
        return bad(EDITED, len(lines) - 1, "edited (the end line has no mac)")
    if key is None:
        return Verdict(NO_KEY, 0, "the chain is whole, but the record key is not here: the "
                       "end line's HMAC cannot be checked", n, started, True)
    body = lines[-1][:m.start()] + b"}\n"
    if not hmac.compare_digest(hmac_sha256(key, body), m.group(1).decode()):
        kid = recs[0].get("key") if recs[0] is not None else None
        if kid and kid != key_id(key):
            return Verdict(OTHER_KEY, first + len(lines) - 1,
                           f"line {first + len(lines) - 1}: closed with another key "
                           f"({kid}; this account's is {key_id(key)}): verify as the account "
                           "that ran it", n, started, True)
        return bad(EDITED, len(lines) - 1, "edited: the end line's HMAC does not match "
                   "(the record was rewritten)")
    return Verdict(OK, 0, f"ok: {len(lines)} lines, closed", n, started, True)


def segments(data: bytes) -> list[tuple[int, bytes]]:
    """A --log FILE holds the records of several runs, one after another: each
    (first line number, bytes), split where a line starts a record."""
    out: list[tuple[int, bytes]] = []
    start, lineno, pos = 0, 1, 0
    first = 1
    for raw in data.splitlines(keepends=True):
        if pos and raw.startswith(b'{"seq":0,') and b'"event":"start"' in raw:
            out.append((first, data[start:pos]))
            start, first = pos, lineno
        pos += len(raw)
        lineno += 1
    out.append((first, data[start:]))
    return out
