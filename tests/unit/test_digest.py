"""confine.digest.sha256 gives hashlib's SHA-256 digests on both sides of LARGE,
whole or fed by update(), and keeps OpenSSL out of a start: the index, the agent
home's name and the host probe's key are keyed by these digests."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys

import pytest

import confine
from confine import digest

# the confine these tests import (installed, or the checkout in the unit tier)
_PATH = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(confine.__file__))!r})\n"

SIZES = [0, 1, 63, 64, 65, 4096, digest.LARGE - 1, digest.LARGE, digest.LARGE + 1,
         3 * digest.LARGE + 7]


@pytest.mark.parametrize("size", SIZES)
def test_whole(size: int) -> None:
    data = os.urandom(size)
    assert digest.sha256(data).digest() == hashlib.sha256(data).digest()
    assert digest.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size", SIZES)
def test_fed(size: int) -> None:
    data = os.urandom(size)
    h = digest.sha256(expect=size)
    for i in range(0, size, 1000):
        h.update(data[i:i + 1000])
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()


def test_small_inputs_skip_openssl() -> None:
    """What a start hashes does not load _hashlib (a Python without the built-in
    SHA-256 is the one case where it may)."""
    own = "_sha2" if sys.version_info >= (3, 12) else "_sha256"
    if importlib.util.find_spec(own) is None or importlib.util.find_spec("_sha1") is None:
        pytest.skip(f"this Python has no {own} or _sha1")
    code = ("import sys; from confine import digest; "
            "digest.sha256(b'x' * (digest.LARGE - 1)).hexdigest(); "
            "h = digest.sha256(expect=100); h.update(b'y'); h.digest(); "
            "print('_hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-I", "-c", _PATH + code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False"]


def test_large_inputs_use_hashlib() -> None:
    assert type(digest.sha256(b"x" * digest.LARGE)) is type(hashlib.sha256())
    assert type(digest.sha256(expect=digest.LARGE)) is type(hashlib.sha256())


@pytest.mark.parametrize("name", ["sha1", "sha256"])
@pytest.mark.parametrize("size", [0, 100, digest.LARGE + 1])
def test_in_broker(name: str, size: int) -> None:
    data = os.urandom(size)
    assert digest.in_broker(name, data).digest() == hashlib.new(name, data).digest()


def test_in_broker_imports_nothing() -> None:
    """The broker hashes git's index after Landlock, when Python's files can no
    longer be read: in_broker must not import, whatever the size."""
    code = ("import sys; from confine import digest\n"
            "class NoImports:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        raise ImportError('import after Landlock: ' + name)\n"
            "sys.meta_path.insert(0, NoImports())\n"
            "data = b'z' * (2 * digest.LARGE)\n"
            "print(digest.in_broker('sha1', data).hexdigest(),"
            " digest.in_broker('sha256', data).hexdigest())\n")
    out = subprocess.run([sys.executable, "-I", "-c", _PATH + code], capture_output=True, text=True,
                         check=True).stdout.split()
    data = b"z" * (2 * digest.LARGE)
    assert out == [hashlib.sha1(data).hexdigest(), hashlib.sha256(data).hexdigest()]
