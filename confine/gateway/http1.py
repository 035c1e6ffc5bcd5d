"""The head of one HTTP/1.x request: method, target, headers, read defensively.

The threat: the head comes from the agent. Two Host headers, a Host that
disagrees with the absolute URI, folded header lines or a body framed two
ways (Content-Length and Transfer-Encoding) are how requests get smuggled
past a proxy to a second host. This parser refuses all of them and caps the
head at MAX_HEAD bytes; the proxy forwards exactly one request per connection.
"""
from __future__ import annotations

import re

from ..record import dataclass

MAX_HEAD = 16384
MAX_HEADERS = 100
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_VERSION = re.compile(rb"^HTTP/1\.[01]$")


class BadRequest(ValueError):
    """Not a request head this proxy forwards; `status` is the HTTP status to answer."""

    def __init__(self, msg: str, status: int = 400) -> None:
        super().__init__(msg)
        self.status = status


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]   # (name as sent, value), in order
    size: int                              # bytes of the head, CRLFCRLF included

    def get(self, name: str) -> list[str]:
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def host(self) -> str | None:
        hs = self.get("host")
        return hs[0] if len(hs) == 1 else None

    def content_length(self) -> int:
        """The body length: 0 if none. Raises BadRequest for chunked or ambiguous framing."""
        if self.get("transfer-encoding"):
            raise BadRequest("request bodies with Transfer-Encoding are not forwarded", 501)
        cl = self.get("content-length")
        if not cl:
            return 0
        if len(set(cl)) != 1 or not cl[0].isdigit() or len(cl[0]) > 15:
            raise BadRequest("bad Content-Length")
        return int(cl[0])


def head_end(buf: bytes) -> int:
    """Offset just after the blank line ending the head, or -1 if not there yet."""
    i = buf.find(b"\r\n\r\n")
    return -1 if i < 0 else i + 4


def parse_head(buf: bytes) -> RequestHead:
    end = head_end(buf)
    if end < 0:
        raise BadRequest("incomplete request head" if len(buf) < MAX_HEAD else "request head too large",
                         400 if len(buf) < MAX_HEAD else 431)
    if end > MAX_HEAD:
        raise BadRequest("request head too large", 431)
    lines = buf[:end - 4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.match(parts[0]) or not parts[1] or not _VERSION.match(parts[2]):
        raise BadRequest("bad request line")
    if any(c < 0x21 or c > 0x7E for c in parts[1]):
        raise BadRequest("bad request target")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line or line[:1] in (b" ", b"\t"):
            raise BadRequest("folded or empty header line")
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.match(name):
            raise BadRequest("bad header line")
        v = value.strip(b" \t")
        if any((c < 0x20 and c != 0x09) or c == 0x7F for c in v):
            raise BadRequest("control character in a header value")
        headers.append((name.decode("ascii"), v.decode("latin-1")))
        if len(headers) > MAX_HEADERS:
            raise BadRequest("too many header lines", 431)
    head = RequestHead(parts[0].decode("ascii"), parts[1].decode("ascii"), parts[2].decode("ascii"),
                       tuple(headers), end)
    if len(head.get("host")) > 1:
        raise BadRequest("more than one Host header")
    return head


def split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """'host:port', '[v6]:port' or 'host' -> (host, port). Raises BadRequest."""
    a = authority
    if "@" in a:
        raise BadRequest("user information in the authority")
    if a.startswith("["):
        end = a.find("]")
        if end < 0:
            raise BadRequest("unclosed '[' in the authority")
        host, rest = a[1:end], a[end + 1:]
        if rest and not rest.startswith(":"):
            raise BadRequest("bad authority")
        port_s = rest[1:] if rest else ""
    else:
        host, sep, port_s = a.rpartition(":")
        if not sep:
            host, port_s = a, ""
    if not host:
        raise BadRequest("empty host in the authority")
    if not port_s:
        if default_port is None:
            raise BadRequest("the authority needs a port")
        return host, default_port
    if not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise BadRequest("bad port in the authority")
    return host, int(port_s)


def absolute_target(target: str) -> tuple[str, int, str]:
    """'http://host[:port]/path?q' -> (host, port, '/path?q'). Only http: is proxied."""
    if not target.lower().startswith("http://"):
        raise BadRequest("only absolute http:// targets are proxied (use CONNECT for https)")
    rest = target[7:]
    cut = min([i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0] or [len(rest)])
    authority, path = rest[:cut], rest[cut:]
    if path.startswith("?"):
        path = "/" + path
    path = path.split("#", 1)[0] or "/"
    host, port = split_authority(authority, 80)
    return host, port, path


def same_authority(a: tuple[str, int], b: tuple[str, int]) -> bool:
    ha, hb = a[0].lower().rstrip("."), b[0].lower().rstrip(".")
    return ha == hb and a[1] == b[1]


HOP_BY_HOP = {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te",
              "trailer", "upgrade"}


def origin_head(head: RequestHead, path: str) -> bytes:
    """The request re-written for the origin server: origin-form target, hop-by-hop headers
    dropped, `Connection: close` (one request per connection, so no second request can
    ride the same connection)."""
    named = {p.strip().lower() for k, v in head.headers if k.lower() == "connection" for p in v.split(",")}
    lines = [f"{head.method} {path} {head.version}"]
    for k, v in head.headers:
        if k.lower() in HOP_BY_HOP or k.lower() in named:
            continue
        lines.append(f"{k}: {v}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
