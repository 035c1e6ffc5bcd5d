"""Which directories are protected roots (protect/roots.py): the workdir and each
directory write grant, deduplicated with the outer one winning; not the TMPDIR,
/dev, or a single granted file."""
from __future__ import annotations

import os

from confine.policy import load as _load
from confine.policy.patterns import effective
from confine.protect.roots import roots_of


def _dirs(tmp_path):
    out = {}
    for n in ("top/wd", "top/sib", "top/mirror.git", "home", "tmp", "top/wd/inner"):
        p = tmp_path / n
        p.mkdir(parents=True)
        out[n] = os.path.realpath(p)
    f = tmp_path / "top" / "file.txt"
    f.write_text("x")
    out["file"] = os.path.realpath(f)
    return out


def _roots(d, *write, workdir="top/wd"):
    pol = _load.load("default", workdir=d[workdir], home=d["home"], tmp=d["tmp"],
                     extra_write=list(write))
    return pol, roots_of(pol)


def test_workdir_and_directory_grants_are_roots(tmp_path):
    d = _dirs(tmp_path)
    pol, roots = _roots(d, d["top/sib"], d["top/mirror.git"], d["file"])
    assert [r.path for r in roots] == [d["top/wd"], d["top/sib"], d["top/mirror.git"]]
    assert [r.workdir for r in roots] == [True, False, False]
    assert all(r.patterns == effective(pol) for r in roots)
    assert roots[1].source == "--write"
    # not roots: the TMPDIR, the profile's ?/dev/shm, a single file
    assert not any(r.path in (d["tmp"], d["file"]) or r.path.startswith("/dev")
                   for r in roots)


def test_overlapping_roots_the_outer_one_wins(tmp_path):
    d = _dirs(tmp_path)
    _, inner = _roots(d, d["top/wd/inner"])
    assert [r.path for r in inner] == [d["top/wd"]]
    top = os.path.dirname(d["top/wd"])
    _, outer = _roots(d, d["top/sib"], top)
    assert [(r.path, r.workdir) for r in outer] == [(top, True)]
