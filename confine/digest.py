"""SHA-256 (and git's SHA-1) for what a run hashes, without loading OpenSSL.

`import hashlib` loads OpenSSL's libcrypto, ~2.7 ms of every `confine exec`, which
hashes only names, keys and small files. The interpreter's own implementations,
the ones hashlib falls back to, give the same digests but are 5-15x slower per
byte: from LARGE bytes on (what the caller passes or says it will feed) `sha256`
imports hashlib. `in_broker` never imports: once Landlock is on, the broker
cannot read Python's files. Both modules are imported here, before any fork (on
some builds they are files in lib-dynload). A Python without them imports
hashlib here, as before.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _hashlib import HASH

__all__ = ["sha256", "in_broker", "LARGE"]

LARGE = 1 << 18                  # where OpenSSL's speed pays for loading it (~1 ms of hashing)

_own: dict[str, Any] = {}
try:                             # CPython's own: _sha256 until 3.11, then _sha2
    _own["sha256"] = __import__("_sha2" if sys.version_info >= (3, 12) else "_sha256").sha256
    _own["sha1"] = __import__("_sha1").sha1
except (ImportError, AttributeError):
    import hashlib as _hashlib
    _own = {"sha256": _hashlib.sha256, "sha1": _hashlib.sha1}


def sha256(data: bytes = b"", *, expect: int = 0) -> HASH:
    """A SHA-256 hash object of `data`, as hashlib.sha256(data) makes it;
    `expect`: how many more bytes the caller will feed with update()."""
    if len(data) + expect < LARGE:
        h: HASH = _own["sha256"](data)
        return h
    import hashlib
    return hashlib.sha256(data)


def in_broker(name: str, data: bytes) -> HASH:
    """hashlib.new(name, data) for "sha1" or "sha256" where nothing may be imported
    (the broker after Landlock): OpenSSL's if hashlib is loaded already, else
    the interpreter's own."""
    hashlib = sys.modules.get("hashlib")
    h: HASH = hashlib.new(name, data) if hashlib is not None else _own[name](data)
    return h
