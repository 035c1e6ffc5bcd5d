"""The shipped apparmor/ and selinux/ files are exactly what the exporters
make of profiles/default.yaml: regenerate with scripts/gen-artefacts.sh."""
from __future__ import annotations

from confine.export import artefacts

from .conftest import REPO


def test_shipped_files_match_the_default_profile():
    expected = artefacts.generate()
    drifted = [rel for rel, text in expected.items()
               if not (REPO / rel).is_file() or (REPO / rel).read_text() != text]
    assert not drifted, f"regenerate with scripts/gen-artefacts.sh: {drifted}"


def test_no_stale_files():
    expected = set(artefacts.generate())
    shipped = {str(p.relative_to(REPO)) for d in ("apparmor", "selinux")
               for p in (REPO / d).rglob("*") if p.is_file()}
    assert shipped <= expected, f"not generated any more: {sorted(shipped - expected)}"


def test_generation_does_not_depend_on_the_machine(monkeypatch, tmp_path):
    """A different HOME and working directory change nothing (the shipped files
    must regenerate byte for byte on any machine)."""
    first = artefacts.generate()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert artefacts.generate() == first


def test_generation_does_not_depend_on_the_hosts_secrets(monkeypatch):
    """A built-in secret's glob (/etc/ssh/ssh_host_*_key) is denied in the generated
    files whether or not it matches anything on this host (openssh-server installed)."""
    import glob
    real = glob.glob

    def fake(matches: list[str]):
        return lambda p, *a, **k: matches if "ssh_host_" in p else real(p, *a, **k)
    monkeypatch.setattr(glob, "glob", fake([]))
    without = artefacts.generate()
    monkeypatch.setattr(glob, "glob", fake(["/etc/ssh/ssh_host_ed25519_key"]))
    assert artefacts.generate() == without
    assert "ssh_host_*_key" in without["apparmor/confine-default"]
