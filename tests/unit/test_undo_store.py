"""The undo store read back and restored (confine/undo/store.py, restore.py), without
a run: entries of the wrong shape or escaping the workdir are dropped, a later
"forget" drops a path, restore puts files back byte for byte with mode and times,
never through a symlink the workdir holds, and leaves a file changed after the run
alone unless forced."""
from __future__ import annotations

import json
import os

from confine.undo import store
from confine.undo.restore import restore

OLD = 1_500_000_000_000_000_000


def _store(tmp_path, entries, files):
    run = tmp_path / "run"
    (run / store.FILES).mkdir(parents=True)
    for name, data in files.items():
        (run / store.FILES / name).write_bytes(data)
    (run / store.ENTRIES).write_text("".join(json.dumps(e) + "\n" for e in entries))
    return os.open(run, store.DIR_FLAGS)


def _e(path, kind="file", **kw):
    e = {"path": path, "op": "unlink", "kind": kind, "mode": 0o640, "mtime_ns": OLD,
         "atime_ns": OLD, "uid": os.geteuid(), "gid": os.getegid()}
    e.update(kw)
    return e


def test_entries_are_checked_and_forgotten(tmp_path):
    dfd = _store(tmp_path, [_e("a", store="1", size=1), _e("../x", store="2"),
                            _e("/etc/passwd", store="3"), {"path": "b"}, _e("b/../../y"),
                            _e("c", store="4"), {"forget": True, "path": "c"},
                            _e("a", store="5")], {})
    try:
        got = store.read_entries(dfd)
    finally:
        os.close(dfd)
    assert [(e["path"], e.get("store")) for e in got] == [("a", "1")]


def test_restore_byte_for_byte_and_newer_files_kept(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    entries = [_e("src", "dir", op="rmdir", mode=0o750), _e("src/f", store="1", size=5),
               _e("src/l", "symlink", target="f", mode=0o777), _e("g", store="2", size=3, mode=0o755),
               _e("h", store="3", size=2)]
    dfd = _store(tmp_path, entries, {"1": b"hello", "2": b"run", "3": b"hh"})
    (wd / "g").write_bytes(b"the agent's")
    os.utime(wd / "g", ns=(OLD + 5, OLD + 5))         # changed during the run
    (wd / "h").write_bytes(b"the person's")           # changed after the run
    ended = OLD + 10
    os.utime(wd / "h", ns=(ended + 1, ended + 1))
    try:
        out = restore(dfd, store.read_entries(dfd), str(wd), ended_ns=ended)
        assert out.restored == 3 and out.skipped == [
            "h: changed after the run (--force puts it back over it)"], out
        assert (wd / "src" / "f").read_bytes() == b"hello"
        st = os.stat(wd / "src" / "f")
        assert (st.st_mode & 0o7777, st.st_mtime_ns) == (0o640, OLD)
        assert os.readlink(wd / "src" / "l") == "f"
        assert (wd / "g").read_bytes() == b"run" and os.stat(wd / "g").st_mode & 0o777 == 0o755
        d = os.stat(wd / "src")
        assert (d.st_mode & 0o7777, d.st_mtime_ns) == (0o750, OLD)
        assert (wd / "h").read_bytes() == b"the person's"
        out = restore(dfd, store.read_entries(dfd), str(wd), ended_ns=ended, paths=["h"],
                      force=True)
        assert out.restored == 1 and (wd / "h").read_bytes() == b"hh"
        # again: everything is as kept
        out = restore(dfd, store.read_entries(dfd), str(wd), ended_ns=ended)
        assert out.restored == 0 and out.unchanged == 4, out
    finally:
        os.close(dfd)


def test_restore_never_writes_through_a_symlink(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, wd / "src")              # the agent's: src is now a symlink
    dfd = _store(tmp_path, [_e("src/f", store="1", size=1)], {"1": b"x"})
    try:
        out = restore(dfd, store.read_entries(dfd), str(wd), ended_ns=OLD + 10)
    finally:
        os.close(dfd)
    assert out.restored == 0 and out.skipped and "src/f" in out.skipped[0], out
    assert os.listdir(outside) == []
