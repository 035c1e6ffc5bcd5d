"""The server name a TLS client asks for, read from its ClientHello without decrypting.

The threat: the bytes come from the agent, which may send a ClientHello split
over many records and reads, lie about lengths, or never finish. The parser
is bounds-checked everywhere and the caller caps how much it reads
(MAX_HELLO) and how long it waits: an incomplete hello is NEED_MORE until the
cap, anything malformed is refused, never guessed at.
"""
from __future__ import annotations

import struct

from ..record import dataclass

MAX_HELLO = 16384          # handshake bytes accepted for one ClientHello (post-quantum hellos are ~2 KiB)
MAX_RECORD = 16384 + 256   # a TLS plaintext record (RFC 8446 5.1), with slack for TLS 1.2 padding
EXT_SNI, EXT_ALPN, EXT_ECH = 0, 16, 0xFE0D


class MalformedHello(ValueError):
    """The bytes are not a TLS ClientHello (or not one within the caps)."""


@dataclass(frozen=True)
class ClientHello:
    sni: str | None              # the host_name entry, as sent (ASCII), None if absent
    alpn: tuple[str, ...] = ()
    ech: bool = False            # an encrypted_client_hello extension is present
    consumed: int = 0            # bytes of the stream the hello's records took


def looks_like_tls(first: bytes) -> bool:
    return len(first) >= 1 and first[0] == 0x16


def parse_client_hello(data: bytes) -> ClientHello | None:
    """Parse the start of a client's stream. None: not enough bytes yet (read more).

    Raises MalformedHello when the stream cannot be a ClientHello.
    """
    hs = bytearray()
    off = 0
    need: int | None = None
    while need is None or len(hs) < need:
        if len(data) - off < 5:
            return None
        ctype, major, _minor, length = struct.unpack_from("!BBBH", data, off)
        if ctype != 0x16:
            raise MalformedHello("not a TLS handshake record")
        if major != 3:
            raise MalformedHello("not TLS record version 3.x")
        if length == 0 or length > MAX_RECORD:
            raise MalformedHello("bad TLS record length")
        if len(data) - off - 5 < length:
            return None
        hs += data[off + 5:off + 5 + length]
        off += 5 + length
        if need is None and len(hs) >= 4:
            if hs[0] != 1:
                raise MalformedHello("first handshake message is not a ClientHello")
            need = 4 + int.from_bytes(hs[1:4], "big")
            if need > MAX_HELLO + 4:
                raise MalformedHello("ClientHello larger than the cap")
        if len(hs) > MAX_HELLO + 4 + MAX_RECORD:
            raise MalformedHello("ClientHello larger than the cap")
    assert need is not None
    return _parse_body(bytes(hs[4:need]), off)


class _Reader:
    def __init__(self, b: bytes) -> None:
        self.b, self.i = b, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.i + n > len(self.b):
            raise MalformedHello("field runs past its end")
        out = self.b[self.i:self.i + n]
        self.i += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u16(self) -> int:
        return int(struct.unpack("!H", self.take(2))[0])

    def vec8(self) -> bytes:
        return self.take(self.u8())

    def vec16(self) -> bytes:
        return self.take(self.u16())

    def done(self) -> bool:
        return self.i == len(self.b)


def _parse_body(body: bytes, consumed: int) -> ClientHello:
    r = _Reader(body)
    version = r.u16()
    if version >> 8 != 3:
        raise MalformedHello("legacy_version is not 3.x")
    r.take(32)                       # random
    if len(r.vec8()) > 32:           # legacy_session_id
        raise MalformedHello("session id longer than 32 bytes")
    suites = r.vec16()
    if not suites or len(suites) % 2:
        raise MalformedHello("bad cipher suite list")
    if not r.vec8():                 # legacy_compression_methods
        raise MalformedHello("no compression methods")
    if r.done():
        return ClientHello(None, consumed=consumed)   # no extensions at all (TLS 1.0-style)
    exts = _Reader(r.vec16())
    if not r.done():
        raise MalformedHello("bytes after the extensions")
    sni: str | None = None
    alpn: list[str] = []
    ech = False
    seen: set[int] = set()
    while not exts.done():
        etype = exts.u16()
        edata = exts.vec16()
        if etype in seen:
            raise MalformedHello(f"extension {etype} twice")   # RFC 8446 4.2
        seen.add(etype)
        if etype == EXT_SNI:
            sni = _sni(edata)
        elif etype == EXT_ALPN:
            alpn = _alpn(edata)
        elif etype == EXT_ECH:
            ech = True
    return ClientHello(sni, tuple(alpn), ech, consumed)


def _sni(data: bytes) -> str:
    r = _Reader(data)
    lst = _Reader(r.vec16())
    if not r.done():
        raise MalformedHello("bytes after the server name list")
    name: str | None = None
    while not lst.done():
        ntype = lst.u8()
        value = lst.vec16()
        if ntype != 0:
            continue
        if name is not None:
            raise MalformedHello("two host names in server_name")   # RFC 6066 3
        if not value or len(value) > 255 or not all(0x21 <= c < 0x7F for c in value):
            raise MalformedHello("server name is not a printable ASCII name")
        name = value.decode("ascii")
    if name is None:
        raise MalformedHello("server_name without a host name")
    return name


def _alpn(data: bytes) -> list[str]:
    r = _Reader(data)
    lst = _Reader(r.vec16())
    out = []
    while not lst.done():
        p = lst.vec8()
        out.append(p.decode("ascii", "replace"))
    return out


def sni_of(data: bytes) -> str | None:
    """The SNI of a complete ClientHello, None if absent, incomplete or malformed."""
    try:
        hello = parse_client_hello(data)
    except MalformedHello:
        return None
    return hello.sni if hello is not None else None
