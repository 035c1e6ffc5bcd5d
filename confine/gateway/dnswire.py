"""DNS messages: a bounded parser and builder for the few shapes the gateway needs.

The threat: the parser reads bytes from the agent (queries) and from the
network (upstream answers). Compression pointers can loop or point forward,
counts can promise more records than the message holds, names can exceed
their limits. Every read is bounds-checked, pointers must point backwards and
are limited in number, and a malformed message raises DNSFormatError.
"""
from __future__ import annotations

import ipaddress
import struct
from typing import Sequence

from ..record import dataclass, field

A, NS, CNAME, SOA, PTR, MX, TXT, AAAA, SRV, OPT, SVCB, HTTPS = 1, 2, 5, 6, 12, 15, 16, 28, 33, 41, 64, 65
IXFR, AXFR, ANY = 251, 252, 255
CLASS_IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED = 0, 1, 2, 3, 4, 5
QTYPE_NAMES = {A: "A", NS: "NS", CNAME: "CNAME", SOA: "SOA", PTR: "PTR", MX: "MX", TXT: "TXT",
               AAAA: "AAAA", SRV: "SRV", SVCB: "SVCB", HTTPS: "HTTPS", ANY: "ANY", AXFR: "AXFR",
               IXFR: "IXFR"}
RCODE_NAMES = {NOERROR: "NOERROR", FORMERR: "FORMERR", SERVFAIL: "SERVFAIL", NXDOMAIN: "NXDOMAIN",
               NOTIMP: "NOTIMP", REFUSED: "REFUSED"}

MAX_MESSAGE = 65535
MAX_POINTERS = 16
MAX_NAME_WIRE = 255
MAX_RECORDS = 256        # a message promising more records than this is refused
UDP_PLAIN = 512
EDNS_SIZE = 1232         # the size confine advertises and honours at most (DNS flag day 2020)


class DNSFormatError(ValueError):
    """The bytes are not a DNS message this parser accepts."""


@dataclass(frozen=True)
class Question:
    labels: tuple[bytes, ...]   # as received (case kept, for the echo)
    qtype: int
    qclass: int

    @property
    def name(self) -> str:
        """The name as text; non-ASCII bytes or dots inside a label make it unmatchable."""
        return ".".join(lb.decode("latin-1") for lb in self.labels)


@dataclass(frozen=True)
class Record:
    name: str        # lower case, no trailing dot
    rtype: int
    rclass: int
    ttl: int
    rdata: bytes
    target: str | None = None   # CNAME target, decoded


@dataclass
class Message:
    id: int
    flags: int
    questions: list[Question] = field(default_factory=list)
    answers: list[Record] = field(default_factory=list)
    udp_size: int | None = None   # EDNS payload size, if an OPT record was present

    @property
    def qr(self) -> bool:
        return bool(self.flags & 0x8000)

    @property
    def opcode(self) -> int:
        return (self.flags >> 11) & 0xF

    @property
    def rcode(self) -> int:
        return self.flags & 0xF

    @property
    def tc(self) -> bool:
        return bool(self.flags & 0x0200)

    @property
    def rd(self) -> bool:
        return bool(self.flags & 0x0100)


def _read_name(buf: bytes, off: int) -> tuple[tuple[bytes, ...], int]:
    """Labels of the name at `off`, and the offset after it (in the original stream)."""
    labels: list[bytes] = []
    end: int | None = None
    jumps = 0
    total = 1
    pos = off
    while True:
        if pos >= len(buf):
            raise DNSFormatError("name runs past the end")
        n = buf[pos]
        if n & 0xC0 == 0xC0:
            if pos + 1 >= len(buf):
                raise DNSFormatError("truncated compression pointer")
            ptr = ((n & 0x3F) << 8) | buf[pos + 1]
            if end is None:
                end = pos + 2
            jumps += 1
            if jumps > MAX_POINTERS or ptr >= pos:
                raise DNSFormatError("compression pointer loops or points forward")
            pos = ptr
            continue
        if n & 0xC0:
            raise DNSFormatError("unsupported label type")
        if n == 0:
            return tuple(labels), (end if end is not None else pos + 1)
        total += n + 1
        if total > MAX_NAME_WIRE:
            raise DNSFormatError("name longer than 255 bytes")
        if pos + 1 + n > len(buf):
            raise DNSFormatError("label runs past the end")
        labels.append(buf[pos + 1:pos + 1 + n])
        pos += 1 + n


def _text(labels: tuple[bytes, ...]) -> str:
    return ".".join(lb.decode("latin-1") for lb in labels).lower()


def parse(buf: bytes) -> Message:
    if len(buf) < 12 or len(buf) > MAX_MESSAGE:
        raise DNSFormatError("message shorter than a header or longer than 65535 bytes")
    mid, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", buf, 0)
    if qd > 4 or an + ns + ar > MAX_RECORDS:
        raise DNSFormatError("too many records")
    msg = Message(id=mid, flags=flags)
    off = 12
    for _ in range(qd):
        labels, off = _read_name(buf, off)
        if off + 4 > len(buf):
            raise DNSFormatError("truncated question")
        qtype, qclass = struct.unpack_from("!HH", buf, off)
        off += 4
        msg.questions.append(Question(labels, qtype, qclass))
    for section in range(3):
        count = (an, ns, ar)[section]
        for _ in range(count):
            labels, off = _read_name(buf, off)
            if off + 10 > len(buf):
                raise DNSFormatError("truncated record")
            rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", buf, off)
            off += 10
            if off + rdlen > len(buf):
                raise DNSFormatError("record data runs past the end")
            rdata = buf[off:off + rdlen]
            target = None
            if rtype == CNAME and section == 0:
                tl, _ = _read_name(buf, off)
                target = _text(tl)
            off += rdlen
            if rtype == OPT and section == 2:
                msg.udp_size = max(UDP_PLAIN, rclass)
            elif section == 0:
                msg.answers.append(Record(_text(labels), rtype, rclass, ttl & 0x7FFFFFFF, rdata, target))
    return msg


def _encode_labels(labels: tuple[bytes, ...]) -> bytes:
    return b"".join(bytes([len(lb)]) + lb for lb in labels) + b"\0"


def encode_name(name: str) -> bytes:
    labels = tuple(lb.encode("ascii") for lb in name.rstrip(".").split(".") if lb)
    for lb in labels:
        if len(lb) > 63:
            raise DNSFormatError(f"label too long in {name!r}")
    out = _encode_labels(labels)
    if len(out) > MAX_NAME_WIRE:
        raise DNSFormatError(f"name too long: {name!r}")
    return out


def build_query(mid: int, name: str, qtype: int, *, rd: bool = True, edns: int | None = EDNS_SIZE) -> bytes:
    flags = 0x0100 if rd else 0
    out = struct.pack("!HHHHHH", mid, flags, 1, 0, 0, 1 if edns else 0)
    out += encode_name(name) + struct.pack("!HH", qtype, CLASS_IN)
    if edns:
        out += b"\0" + struct.pack("!HHIH", OPT, edns, 0, 0)
    return out


def build_response(query: Message, rcode: int, answers: Sequence[tuple[int, int, bytes]] = (),
                   *, limit: int = MAX_MESSAGE) -> bytes:
    """A response to `query`: its question echoed, `answers` as (type, ttl, rdata) owned
    by the question name, EDNS echoed if the query had it. If the message would exceed
    `limit`, the answers are dropped and TC is set (the client retries over TCP)."""
    q = query.questions[0] if query.questions else None
    flags = 0x8000 | (query.opcode << 11) | (query.flags & 0x0100) | 0x0080 | (rcode & 0xF)
    qsec = _encode_labels(q.labels) + struct.pack("!HH", q.qtype, q.qclass) if q else b""
    opt = b"\0" + struct.pack("!HHIH", OPT, EDNS_SIZE, 0, 0) if query.udp_size is not None else b""
    ans = b"".join(b"\xc0\x0c" + struct.pack("!HHIH", t, CLASS_IN, ttl, len(rd)) + rd
                   for t, ttl, rd in answers) if q else b""
    n_ans = len(answers) if q else 0
    head = struct.pack("!HHHHHH", query.id, flags, 1 if q else 0, n_ans, 0, 1 if opt else 0)
    out = head + qsec + ans + opt
    if len(out) > limit:
        head = struct.pack("!HHHHHH", query.id, flags | 0x0200, 1 if q else 0, 0, 0, 1 if opt else 0)
        out = head + qsec + opt
    return out


def rdata_address(rtype: int, rdata: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if rtype == A and len(rdata) == 4:
        return ipaddress.IPv4Address(rdata)
    if rtype == AAAA and len(rdata) == 16:
        return ipaddress.IPv6Address(rdata)
    return None


def udp_limit(query: Message) -> int:
    if query.udp_size is None:
        return UDP_PLAIN
    return min(query.udp_size, EDNS_SIZE)
