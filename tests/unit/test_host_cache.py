"""The namespace probe's kept success (plan/host.py): used only when its key,
its directory and its file are exactly right; the probe runs otherwise, and a
failure is never kept."""
from __future__ import annotations

import os

import pytest

from confine.plan import host


@pytest.fixture
def probes(monkeypatch, tmp_path):
    """The cache in a private directory of this uid; counts real probes."""
    where = tmp_path / "confine"
    calls: list[bool] = []
    result = [(True, True)]

    def fake_probe(as_root: bool) -> tuple[bool, bool]:
        calls.append(as_root)
        return result[0]
    monkeypatch.setattr(host, "_fork_probe", fake_probe)
    monkeypatch.setattr(host, "cache_dir", lambda: str(where))
    monkeypatch.setattr(host, "_under_seccomp", lambda: False)
    monkeypatch.delenv(host.NO_NAMESPACES_ENV, raising=False)
    host._NS_CACHE.clear()
    yield where, calls, result
    host._NS_CACHE.clear()


def _again(as_root: bool = False) -> tuple[bool, bool]:
    host._NS_CACHE.clear()               # a new process: only the file is left
    return host._probe(as_root)


def test_a_success_is_kept_and_used(probes):
    where, calls, _ = probes
    assert _again() == (True, True) and len(calls) == 1
    st = os.stat(where / host.CACHE_NAME)
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o600
    assert os.stat(where).st_mode & 0o777 == 0o700
    assert _again() == (True, True) and len(calls) == 1          # no probe this time


def test_a_failure_is_never_kept(probes):
    where, calls, result = probes
    result[0] = (True, False)
    assert _again() == (True, False)
    assert _again() == (True, False) and len(calls) == 2
    assert not (where / host.CACHE_NAME).exists()


def test_a_tampered_or_stale_key_is_ignored(probes, monkeypatch):
    where, calls, _ = probes
    _again()
    f = where / host.CACHE_NAME
    f.write_text(f.read_text().replace("ok ", "ok 0"))
    assert _again() == (True, True) and len(calls) == 2          # probed again, rewritten
    assert _again() == (True, True) and len(calls) == 2
    # anything in the key changing (another boot, a sysctl, the code...) reprobes
    monkeypatch.setattr(host, "probe_key", lambda as_root: "another")
    assert _again() == (True, True) and len(calls) == 3
    # as root and as a user are separate answers
    monkeypatch.undo()


def test_the_key_names_what_decides_the_answer():
    k = host.probe_key(False)
    assert k == host.probe_key(False)
    assert k != host.probe_key(True)


@pytest.mark.parametrize("how", ["group-writable file", "world-writable dir", "symlink file",
                                 "symlink dir", "foreign file"])
def test_a_file_anyone_else_could_write_is_ignored(probes, tmp_path, how):
    where, calls, _ = probes
    _again()
    f = where / host.CACHE_NAME
    if how == "group-writable file":
        os.chmod(f, 0o620)
    elif how == "world-writable dir":
        os.chmod(where, 0o777)
    elif how == "symlink file":
        real = tmp_path / "elsewhere"
        os.rename(f, real)
        os.symlink(real, f)
    elif how == "symlink dir":
        os.rename(where, tmp_path / "real-dir")
        os.symlink(tmp_path / "real-dir", where)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give the file to another uid")
        os.chown(f, 65534, 65534)
    assert _again() == (True, True) and len(calls) == 2          # not believed: probed
    if how in ("world-writable dir", "symlink dir"):
        assert len(calls) == 2 and _again() and len(calls) == 3  # and never written there


def test_under_a_seccomp_filter_nothing_is_kept(probes, monkeypatch):
    where, calls, _ = probes
    monkeypatch.setattr(host, "_under_seccomp", lambda: True)
    _again()
    _again()
    assert len(calls) == 2 and not where.exists()


def test_cache_dir_of_a_user_needs_a_private_runtime_dir(monkeypatch, tmp_path):
    if os.geteuid() == 0:
        assert host.cache_dir() == "/run/confine"
        return
    rt = tmp_path / "rt"
    rt.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(rt))
    assert host.cache_dir() == str(rt / "confine")
    os.chmod(rt, 0o755)
    assert host.cache_dir() is None
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative")
    assert host.cache_dir() is None
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert host.cache_dir() is None
