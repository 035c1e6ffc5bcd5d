"""The exit check and the approval engine: a protected write approved during the run
(approvals.protected_writes) is kept only while it is the very file made then."""
from __future__ import annotations

import hashlib
import os

from confine import protect


def _run(tmp_path, approve):
    wd = tmp_path / "wd"
    wd.mkdir()
    snap = protect.snapshot(str(wd))
    envrc = wd / ".envrc"
    envrc.write_text("export OK=1\n")
    st = envrc.stat()
    approved = {".envrc": (st.st_dev, st.st_ino)} if approve else {}
    return wd, protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"), approved=approved)


def test_approved_file_kept_with_its_digest(tmp_path):
    wd, rep = _run(tmp_path, approve=True)
    assert (wd / ".envrc").read_text() == "export OK=1\n"
    digest = hashlib.sha256(b"export OK=1\n").hexdigest()
    kept = [c for c in rep.changes if c.path == ".envrc"]
    assert [(c.action, c.alert) for c in kept] == [("kept", False)] and digest in kept[0].detail
    assert not rep.alerts


def test_unapproved_file_quarantined(tmp_path):
    wd, rep = _run(tmp_path, approve=False)          # the control: the same file, not approved
    assert not (wd / ".envrc").exists()
    assert [c.action for c in rep.changes if c.path == ".envrc"] == ["quarantined"]


def test_another_file_at_the_approved_name_quarantined(tmp_path):
    wd = tmp_path / "wd"
    wd.mkdir()
    snap = protect.snapshot(str(wd))
    envrc = wd / ".envrc"
    envrc.write_text("export OK=1\n")
    st = envrc.stat()
    other = wd / "other"
    other.write_text("export EVIL=1\n")
    os.replace(other, envrc)                          # the name now holds another inode
    rep = protect.verify_and_revert(snap, quarantine_dir=str(tmp_path / "q"),
                                    approved={".envrc": (st.st_dev, st.st_ino)})
    assert not envrc.exists()
    assert [c.action for c in rep.changes if c.path == ".envrc"] == ["quarantined"]
