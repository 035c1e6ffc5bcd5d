"""A record for a person (one line per decision) and for a SIEM (OCSF, plain JSON).

Threat: every name in a record may be the agent's choice (a path, a host, a
command), and JSON decodes "\\u001b" back into an escape: everything shown on a
terminal goes through errors.printable. The export shapes are documented in
docs/record.md; a field is never dropped, what OCSF has no place for is kept
whole under `unmapped`.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import printable

_HIDDEN = {"seq", "prev", "time", "event", "mac", "nonce"}


def records(data: bytes) -> Iterator[dict[str, Any]]:
    """The lines that parse (a broken one is verify's to name, not show's)."""
    for raw in data.splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict):
            yield rec


def _when(t: object) -> str:
    if isinstance(t, (int, float)):
        return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"
    return str(t)[11:23] if isinstance(t, str) else "?"


def _rest(rec: Mapping[str, Any], skip: Iterable[str] = ()) -> str:
    out = []
    for k, v in rec.items():
        if k in _HIDDEN or k in skip or v in ("", None, [], {}):
            continue
        out.append(f"{k}={v if isinstance(v, (str, int, float)) else json.dumps(v)}")
    return " ".join(out)


def summary(rec: Mapping[str, Any]) -> str:
    """What one line decided, in words."""
    ev = str(rec.get("event") or "other")
    g = rec.get
    if ev == "start":
        return (f"run {g('run')} started: {' '.join(map(str, g('argv') or []))} in "
                f"{g('workdir')} as {g('user')} (profile {g('profile')})")
    if ev == "refusal":
        grant = g("grant") if isinstance(g("grant"), dict) else {}
        how = (f"{grant['key']}: [{grant.get('value')}]" if grant.get("key")
               else grant.get("flag") or grant.get("cannot") or "")
        return (f"denied [{g('layer')}]: {g('what') or g('host') or g('name') or ''}"
                + (f" -> {how}" if how else "")
                + (f" ({g('exe')})" if g("exe") else ""))
    if ev in ("connect", "dns"):
        where = g("host") or g("name") or g("dst") or "?"
        if g("port") is not None:
            where = f"{where}:{g('port')}"
        return (f"{g('decision') or 'allow'} {'DNS ' if ev == 'dns' else ''}{where}"
                + (f" ({g('rule') or g('reason')})" if g("rule") or g("reason") else "")
                + (f" asked: {g('asked')} by {g('approver')}" if g("asked") else "")
                + (f" [{g('exe')}]" if g("exe") else ""))
    if ev == "ask":
        where = f"{g('host')}:{g('port')}" if g("port") is not None else str(g("host"))
        lat = g("latency_ms")
        return (f"asked {where} ({g('via')}): {g('decision')} by {g('approver')}"
                + (f" in {lat} ms" if lat is not None else "")
                + (f": {g('reason')}" if g("reason") else ""))
    if ev == "approval":     # confine/approval (the engine): one per question answered
        subj = g("subject") if isinstance(g("subject"), dict) else {}
        lat = g("latency_ms")
        return (f"asked {g('of')} {' '.join(f'{k}={v}' for k, v in subj.items())}: "
                f"{g('decision')} by {g('by')}" + (f" ({g('answer')})" if g("answer") else "")
                + (f" in {lat} ms" if lat is not None else "")
                + (f": {g('reason')}" if g("reason") else ""))
    if ev == "credential":
        return f"credential {g('name')}: {g('action')} " + _rest(rec, ("name", "action", "kind"))
    if ev == "exit_check" and g("what") == "summary":
        return (f"exit check: {g('changes')} change(s), {g('alerts')} alert(s), "
                f"{g('failed')} failed" + (f"; quarantine {g('quarantine')}"
                                           if g("quarantine") else ""))
    if ev == "exit_check":
        return (f"{g('what')} {g('path') or '.'}: {g('action')}"
                + (f": {g('detail')}" if g("detail") else "")
                + (f"; moved to {g('quarantine')}" if g("quarantine") else ""))
    if ev == "held" and g("paths") is not None:
        return (f"held, kept at exit in {g('dir')}: {', '.join(map(str, g('paths')))}"
                + (f"; not kept: {'; '.join(map(str, g('left')))}" if g("left") else ""))
    if ev == "held":
        return str(g("what") or _rest(rec))
    if ev == "status":
        return (f"exit status {g('status')}"
                + (f" (the agent's {g('agent_status')})" if g("agent_status") is not None
                   else "") + (" (timed out)" if g("timed_out") else "")
                + (f": {g('error')}" if g("error") else ""))
    if ev == "dropped":
        by = ", ".join(f"{n} {k}" for k, n in (g("by_event") or {}).items())
        return f"{g('count')} line(s) over the cap of {g('limit')} not recorded ({by})"
    if ev == "end":
        return f"record closed: {g('lines')} lines before this one"
    return _rest(rec)


def human(rec: Mapping[str, Any]) -> str:
    return printable(f"{_when(rec.get('time'))} {rec.get('seq', '?'):>5} "
                     f"{str(rec.get('event') or 'other'):<10} {summary(rec)}")


# --- OCSF 1.1 ----------------------------------------------------------------------------
# (class_uid, category_uid, activity_id) by what a line is; 0: the base event
_FILE, _NET, _DNS, _PROC, _BASE = 1001, 4001, 4003, 1007, 0
_NET_KINDS = {"connect", "bind", "host", "socket", "unix"}


def _ocsf_class(rec: Mapping[str, Any]) -> tuple[int, int, int]:
    ev = rec.get("event")
    if ev == "dns":
        return _DNS, 4, 1                                   # Query
    if ev == "connect" or (ev == "refusal" and rec.get("kind") in _NET_KINDS):
        return _NET, 4, 1                                   # Open
    if ev in ("refusal", "held", "exit_check"):
        return _FILE, 1, 99                                 # Other
    if ev == "start":
        return _PROC, 1, 1                                  # Launch
    if ev == "status":
        return _PROC, 1, 2                                  # Terminate
    return _BASE, 0, 99


def ocsf(rec: Mapping[str, Any], run: str) -> dict[str, Any]:
    """One line as an OCSF 1.1 event (docs/record.md)."""
    cls, cat, act = _ocsf_class(rec)
    denied = rec.get("event") == "refusal" or rec.get("decision") == "deny"
    t = rec.get("time")
    out: dict[str, Any] = {
        "class_uid": cls, "category_uid": cat, "activity_id": act,
        "type_uid": cls * 100 + act,
        "time": int(t * 1000) if isinstance(t, (int, float)) else 0,
        "severity_id": 3 if denied else 1,                  # Medium / Informational
        "status_id": 2 if denied else 1,                    # Failure / Success
        "action_id": 2 if denied else 1,                    # Denied / Allowed
        "message": summary(rec),
        "metadata": {"version": "1.1.0", "product": {"name": "confine", "vendor_name": "confine"},
                     "uid": f"{run}:{rec.get('seq')}", "correlation_uid": run,
                     "log_name": str(rec.get("event") or "other")},
        "unmapped": dict(rec),
    }
    if cls == _NET:
        dst: dict[str, Any] = {}
        if rec.get("host") or rec.get("subject"):
            dst["hostname"] = rec.get("host") or rec.get("subject")
        if isinstance(rec.get("port"), int):
            dst["port"] = rec["port"]
        out["dst_endpoint"] = dst
    elif cls == _DNS:
        out["query"] = {"hostname": rec.get("name"), "type": rec.get("qtype")}
    elif cls == _FILE:
        out["file"] = {"path": rec.get("subject") or rec.get("path") or rec.get("what")}
    if rec.get("exe") or rec.get("pid"):
        out["actor"] = {"process": {k: v for k, v in (("pid", rec.get("pid")),
                                                       ("file", {"path": rec.get("exe")}))
                                    if v and v != {"path": None}}}
    return out
