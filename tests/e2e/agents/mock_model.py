"""A scripted model server for the agent CLIs' end-to-end tests (issue 22).

It speaks the two wire protocols the CLIs use, as observed from the requests they send
(every request is one JSON line in LOG, headers and body, so a new CLI version's changes
show up there): Anthropic's Messages API with streaming (POST /v1/messages, Claude Code)
and OpenAI's Responses API (POST /v1/responses, Codex). The script of one turn: a request
that offers a shell tool is answered with a call of that tool running COMMAND; the
follow-up carrying the tool's result gets a final text; a request without tools (Claude
Code's title) gets plain text. It runs inside a network namespace the test makes, so it
can be reached only through the veth on this machine.

usage: mock_model.py HOST PORT LOG COMMAND

Optional, from the environment (the login tests, test_logins.py): MOCK_TLS_CERT and
MOCK_TLS_KEY serve HTTPS instead of HTTP; MOCK_BEARER answers 401 to a request whose
Authorization is not `Bearer MOCK_BEARER` (or MOCK_NEW_ACCESS); MOCK_REFRESH makes
POST .../oauth/token a token endpoint (see `_token`; the file LOG.refuse makes it refuse
every refresh); MOCK_DNS="name=addr,..." answers
those names (A records) on HOST:53 over UDP, every other name NXDOMAIN.
"""
from __future__ import annotations

import ipaddress
import json
import os
import socket
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST, PORT, LOG, COMMAND = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
FINAL = "The command ran."
_lock = threading.Lock()


def log(**ev: Any) -> None:
    with _lock, open(LOG, "a") as f:
        f.write(json.dumps(ev) + "\n")


def sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    for name, data in events)


# --- Anthropic Messages ------------------------------------------------------------------

def _anthropic_has_tool_result(body: dict[str, Any]) -> bool:
    for m in body.get("messages", []):
        content = m.get("content")
        if isinstance(content, list) and any(
                isinstance(c, dict) and c.get("type") == "tool_result" for c in content):
            return True
    return False


def anthropic(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]], str]:
    """(kind, content blocks, stop reason) for one Messages request."""
    tools = {t.get("name") for t in body.get("tools") or []}
    if "Bash" in tools and not _anthropic_has_tool_result(body):
        return ("tool", [{"type": "tool_use", "id": "toolu_confine_1", "name": "Bash",
                          "input": {"command": COMMAND, "description": "write proof"}}],
                "tool_use")
    if tools:
        return "final", [{"type": "text", "text": FINAL}], "end_turn"
    return "title", [{"type": "text", "text": "Proof file"}], "end_turn"


def anthropic_stream(model: str, blocks: list[dict[str, Any]], stop: str) -> bytes:
    ev: list[tuple[str, dict[str, Any]]] = [("message_start", {
        "type": "message_start",
        "message": {"id": "msg_confine", "type": "message", "role": "assistant",
                    "model": model, "content": [], "stop_reason": None,
                    "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}})]
    for i, b in enumerate(blocks):
        if b["type"] == "tool_use":
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                       "content_block": {**b, "input": {}}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                       "delta": {"type": "input_json_delta",
                                 "partial_json": json.dumps(b["input"])}}))
        else:
            ev.append(("content_block_start", {"type": "content_block_start", "index": i,
                       "content_block": {"type": "text", "text": ""}}))
            ev.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                       "delta": {"type": "text_delta", "text": b["text"]}}))
        ev.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    ev.append(("message_delta", {"type": "message_delta",
                                 "delta": {"stop_reason": stop, "stop_sequence": None},
                                 "usage": {"output_tokens": 5}}))
    ev.append(("message_stop", {"type": "message_stop"}))
    return sse(ev)


# --- OpenAI Responses --------------------------------------------------------------------

def openai(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(kind, output item) for one Responses request."""
    items = body.get("input") or []
    if any(isinstance(i, dict) and i.get("type") in ("function_call_output",
                                                     "custom_tool_call_output")
           for i in items):
        return "final", {"type": "message", "role": "assistant", "id": "msg_confine",
                         "content": [{"type": "output_text", "text": FINAL}]}
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if "exec_command" in tools:
        args: dict[str, Any] = {"cmd": COMMAND}
        name = "exec_command"
    else:
        args = {"command": ["bash", "-lc", COMMAND]}
        name = "shell"
    return "tool", {"type": "function_call", "id": "fc_confine", "call_id": "call_confine_1",
                    "name": name, "arguments": json.dumps(args)}


def openai_stream(item: dict[str, Any]) -> bytes:
    rid = "resp_confine"
    usage = {"input_tokens": 10, "input_tokens_details": None, "output_tokens": 5,
             "output_tokens_details": None, "total_tokens": 15}
    return sse([
        ("response.created", {"type": "response.created", "response": {"id": rid}}),
        ("response.output_item.added", {"type": "response.output_item.added",
                                        "output_index": 0, "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done",
                                       "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed",
                                "response": {"id": rid, "usage": usage}}),
    ])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass

    def _send(self, code: int, ctype: str, data: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _token(self, raw: bytes) -> None:
        """A token refresh: a real refresh token (MOCK_REFRESH, MOCK_NEW_REFRESH) in a JSON
        or form body gets MOCK_NEW_ACCESS and MOCK_NEW_REFRESH (gzipped, whatever was asked,
        with X-Mock-Answer: gzip); anything else 400. Toward auth.openai.com (Codex) the
        same with MOCK_CODEX_REFRESH, answered MOCK_CODEX_NEW_ACCESS, _NEW_REFRESH, _NEW_ID."""
        try:
            body = json.loads(raw)
        except ValueError:
            from urllib.parse import parse_qs
            body = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        codex = (self.headers.get("Host") or "").split(":")[0] == "auth.openai.com"
        env = "MOCK_CODEX_" if codex else "MOCK_"
        ok = body.get("refresh_token") in (os.environ.get(env + "REFRESH"),
                                           os.environ.get(env + "NEW_REFRESH")) \
            and not os.path.exists(LOG + ".refuse")
        log(method="POST", path=self.path, kind="refresh" if ok else "bad-refresh",
            headers=dict(self.headers), host=self.headers.get("Host"))
        if not ok:
            self._send(400, "application/json", b'{"error": "invalid_grant"}')
            return
        answer = json.dumps({
            "access_token": os.environ[env + "NEW_ACCESS"], "token_type": "Bearer",
            "refresh_token": os.environ[env + "NEW_REFRESH"], "expires_in": 3600,
            **({"id_token": os.environ[env + "NEW_ID"]} if codex else {}),
            "scope": "user:inference user:profile"}).encode()
        if self.headers.get("X-Mock-Answer") == "gzip":    # whatever the request asked for
            import gzip
            answer = gzip.compress(answer)
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        self._send(200, "application/json", answer)

    def do_GET(self) -> None:
        log(method="GET", path=self.path, headers=dict(self.headers))
        self._send(404, "application/json", b'{"error": "not here"}')

    do_HEAD = do_GET

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        path = self.path.split("?")[0]
        if path.endswith("/oauth/token") and os.environ.get("MOCK_REFRESH"):
            self._token(raw)
            return
        want = [os.environ[x] for x in ("MOCK_BEARER", "MOCK_NEW_ACCESS", "MOCK_CODEX_NEW_ACCESS")
                if os.environ.get(x)]
        if want and self.headers.get("Authorization") not in [f"Bearer {w}" for w in want]:
            log(method="POST", path=self.path, kind="unauthorized", headers=dict(self.headers))
            self._send(401, "application/json", b'{"type": "error", "error": '
                       b'{"type": "authentication_error", "message": "bad token"}}')
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if path.endswith("/messages"):
            kind, blocks, stop = anthropic(body)
            log(method="POST", path=self.path, kind=kind, headers=dict(self.headers), body=body)
            model = body.get("model", "claude-mock")
            if body.get("stream"):
                self._send(200, "text/event-stream", anthropic_stream(model, blocks, stop))
            else:
                self._send(200, "application/json", json.dumps({
                    "id": "msg_confine", "type": "message", "role": "assistant", "model": model,
                    "content": blocks, "stop_reason": stop, "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5}}).encode())
        elif path.endswith("/responses"):
            kind, item = openai(body)
            log(method="POST", path=self.path, kind=kind, headers=dict(self.headers), body=body)
            self._send(200, "text/event-stream", openai_stream(item))
        else:
            log(method="POST", path=self.path, kind="unknown", headers=dict(self.headers),
                body=body)
            self._send(404, "application/json", b'{"error": "not here"}')


def dns(zone: dict[str, str]) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((HOST, 53))
    while True:
        data, peer = s.recvfrom(4096)
        try:
            mid = struct.unpack_from("!H", data, 0)[0]
            off, labels = 12, []
            while data[off]:
                labels.append(data[off + 1:off + 1 + data[off]].decode("ascii", "replace"))
                off += 1 + data[off]
            qtype = struct.unpack_from("!H", data, off + 1)[0]
        except (struct.error, IndexError):
            continue
        name = ".".join(labels).lower()
        body, count = b"", 0
        if name in zone and qtype == 1:
            body = (b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4)
                    + ipaddress.IPv4Address(zone[name]).packed)
            count = 1
        rcode = 0 if name in zone else 3
        s.sendto(struct.pack("!HHHHHH", mid, 0x8180 | rcode, 1, count, 0, 0)
                 + data[12:off + 5] + body, peer)


def main() -> None:
    zone = dict(x.split("=", 1) for x in os.environ.get("MOCK_DNS", "").split(",") if x)
    if zone:
        threading.Thread(target=dns, args=(zone,), daemon=True).start()
    srv = ThreadingHTTPServer((HOST, PORT), Handler)
    if os.environ.get("MOCK_TLS_CERT"):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.environ["MOCK_TLS_CERT"], os.environ["MOCK_TLS_KEY"])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    log(ev="ready")
    srv.serve_forever()


if __name__ == "__main__":
    main()
