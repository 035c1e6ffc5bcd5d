"""protect/keep.py in-process: the overrides, the order runs are dropped in and
the current run kept (the e2e test runs it through real runs)."""
from __future__ import annotations

import os
import time

import pytest

from confine.errors import ConfineError
from confine.protect import keep


@pytest.mark.parametrize("raw,want", [("1048576", 1 << 20), ("50M", 50 << 20), ("2G", 2 << 30),
                                      ("3KiB", 3 << 10), ("1t", 1 << 40)])
def test_size_override(monkeypatch, raw, want):
    monkeypatch.setenv(keep.BYTES_ENV, raw)
    assert keep.limits().max_bytes == want


@pytest.mark.parametrize("env,raw", [(keep.BYTES_ENV, "lots"), (keep.BYTES_ENV, "-5"),
                                     (keep.DAYS_ENV, "soon"), (keep.DAYS_ENV, "-1")])
def test_bad_override_is_refused(monkeypatch, env, raw):
    monkeypatch.setenv(env, raw)
    with pytest.raises(ConfineError, match=env):
        keep.limits()


def test_defaults(monkeypatch):
    monkeypatch.delenv(keep.BYTES_ENV, raising=False)
    monkeypatch.delenv(keep.DAYS_ENV, raising=False)
    assert keep.limits() == keep.Limits(1 << 30, 30)


def _runs_in(base) -> list[str]:
    """The store's entries but the size records (keep.INDEX)."""
    return [n for n in os.listdir(base) if n != keep.INDEX]


def _run(base, hours_ago: float, size: int) -> str:
    name = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() - hours_ago * 3600)) + "-7"
    os.makedirs(base / name)
    with open(base / name / "f", "wb") as f:
        f.write(os.urandom(size))
    return name


def test_oldest_go_first_and_the_current_run_stays(tmp_path):
    old, mid, new = (_run(tmp_path, h, 400 << 10) for h in (3, 2, 1))
    cur = _run(tmp_path, 0, 700 << 10)
    said: list[str] = []
    gone = keep.bound(str(tmp_path), "held files", cur, said.append,
                      lim=keep.Limits(1 << 20, 30))
    assert [r.run for r in gone] == [old, mid, new]     # 700 KiB alone is under 1 MiB
    assert sorted(_runs_in(tmp_path)) == [cur]
    assert all("over the 1.0 MiB bound on held files" in s for s in said), said
    # alone over the bound: said, kept
    said.clear()
    assert keep.bound(str(tmp_path), "held files", cur, said.append,
                      lim=keep.Limits(100 << 10, 30)) == []
    assert _runs_in(tmp_path) == [cur] and "alone holds" in said[0], said
    # control: under the bound nothing goes, and nothing is said
    said.clear()
    assert keep.bound(str(tmp_path), "held files", None, said.append,
                      lim=keep.Limits(1 << 30, 30)) == [] and said == []


def test_age_limit(tmp_path):
    old = _run(tmp_path, 24 * 40, 10)
    fresh = _run(tmp_path, 1, 10)
    said: list[str] = []
    gone = keep.bound(str(tmp_path), "quarantine", None, said.append,
                      lim=keep.Limits(1 << 30, 30))
    assert [r.run for r in gone] == [old] and _runs_in(tmp_path) == [fresh]
    assert "older than 30 days" in said[0]


def test_the_current_runs_write_grants_stay_with_it(tmp_path):
    """A run's write grants keep their held files and quarantine as RUN.rootN
    (runtime/session.py): they are the current run too, never dropped as older ones."""
    old = _run(tmp_path, 2, 400 << 10)
    cur = _run(tmp_path, 0, 300 << 10)
    grant = cur + ".root1"
    os.makedirs(tmp_path / grant)
    with open(tmp_path / grant / "f", "wb") as f:
        f.write(os.urandom(500 << 10))
    said: list[str] = []
    gone = keep.bound(str(tmp_path), "held files", cur, said.append,
                      lim=keep.Limits(700 << 10, 30))
    assert [r.run for r in gone] == [old]
    assert sorted(_runs_in(tmp_path)) == [cur, grant]
    # together over the bound: said once, both kept
    said.clear()
    assert keep.bound(str(tmp_path), "held files", cur, said.append,
                      lim=keep.Limits(600 << 10, 30)) == []
    assert sorted(_runs_in(tmp_path)) == [cur, grant] and "alone holds" in said[0], said


def _index(base) -> dict[str, int]:
    with open(base / keep.INDEX) as f:
        return {n: int(v.split()[0]) for n, v in (line.rsplit("\t", 1) for line in f)}


def _set_index(base, sizes: dict[str, int], mode: int = 0o600) -> None:
    with open(base / keep.INDEX, "w") as f:
        f.writelines(f"{n}\t{s} 0\n" for n, s in sizes.items())
    os.chmod(base / keep.INDEX, mode)


def test_a_finished_runs_size_is_measured_once(tmp_path):
    """A kept run's size is recorded in the store's one index (keep.INDEX, never inside
    a run, whose top level holds names the agent chose) and read back, not walked at the
    end of every later run; the run just ended is measured afresh."""
    old = _run(tmp_path, 2, 300 << 10)
    cur = _run(tmp_path, 0, 100 << 10)
    bfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        first = {r.run: r.size for r in keep.runs(bfd, fresh=cur)}
        assert first[old] >= 300 << 10
        assert _index(tmp_path) == first
        assert sorted(os.listdir(tmp_path)) == sorted([keep.INDEX, old, cur])
        # the record is what counts for a finished run (never walked again) ...
        _set_index(tmp_path, {old: 12345, cur: 1})
        with open(tmp_path / cur / "more", "wb") as f:
            f.write(os.urandom(200 << 10))
        again = {r.run: r.size for r in keep.runs(bfd, fresh=cur)}
        assert again[old] == 12345
        # ... the current run's is measured afresh (its stale entry is not used)
        assert again[cur] >= first[cur] + (200 << 10)
        assert _index(tmp_path)[cur] == again[cur]
        # a record that is not a number is measured again
        with open(tmp_path / keep.INDEX, "w") as f:
            f.write(f"{old}\tx 0\n")
        assert {r.run: r.size for r in keep.runs(bfd)}[old] >= 300 << 10
        # the record of a run that is gone goes with it
        import shutil
        shutil.rmtree(tmp_path / old)
        keep.runs(bfd)
        assert old not in _index(tmp_path)
        # a name the agent chose at a quarantined run's top level is never taken for one
        with open(tmp_path / cur / keep.INDEX, "w") as f:
            f.write(f"{cur}\t1 0\n")
        os.unlink(tmp_path / keep.INDEX)
        assert {r.run: r.size for r in keep.runs(bfd)}[cur] > 1
    finally:
        os.close(bfd)


def test_an_index_others_may_write_is_not_used(tmp_path):
    """A planted index (writable by others, or not a regular file of ours) is ignored:
    every run is measured again, so a run cannot be made to count for less."""
    old = _run(tmp_path, 2, 300 << 10)
    bfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _set_index(tmp_path, {old: 1}, mode=0o666)
        assert {r.run: r.size for r in keep.runs(bfd)}[old] >= 300 << 10
        os.unlink(tmp_path / keep.INDEX)
        os.mkfifo(tmp_path / keep.INDEX)
        assert {r.run: r.size for r in keep.runs(bfd)}[old] >= 300 << 10
        os.unlink(tmp_path / keep.INDEX)
        (tmp_path / "elsewhere").write_text(f"{old}\t1 0\n")
        os.symlink(tmp_path / "elsewhere", tmp_path / keep.INDEX)
        assert {r.run: r.size for r in keep.runs(bfd)}[old] >= 300 << 10
        # control: the same entry in an index of ours is used
        os.unlink(tmp_path / keep.INDEX)
        _set_index(tmp_path, {old: 1})
        assert {r.run: r.size for r in keep.runs(bfd)}[old] == 1
    finally:
        os.close(bfd)


def test_sizes_recorded_before_the_index_are_read_once(tmp_path):
    """The per-run records of an older confine (keep.SIZE_DIR) are taken over into the
    index rather than every kept run walked again."""
    old = _run(tmp_path, 2, 300 << 10)
    os.mkdir(tmp_path / keep.SIZE_DIR)
    (tmp_path / keep.SIZE_DIR / old).write_text("777")
    bfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert {r.run: r.size for r in keep.runs(bfd)}[old] == 777
        assert _index(tmp_path) == {old: 777}
    finally:
        os.close(bfd)
