"""The git config parser and sanitizer (confine/protect/gitconfig.py), checked
against git itself: what git reads, the parser reads; what the sanitizer
keeps, git reads back as safe data only. No root, no kernel."""
from __future__ import annotations

import shutil
import subprocess

from confine.protect import gitconfig

GIT = shutil.which("git") or "/usr/bin/git"


TRICKY_CONFIG = (
    b"[core] fsmonitor = \"touch x\" ; comment\n"
    b"[Core]\n\tFSMonitor=a # c\n"
    b"[filter.Lfs]\n\tsmudge = a \\\n  b\n"
    b"[alias]\n x = \"!sh -c 'y'\"\r\n st = status\n"
    b"[includeIf \"gitdir:/x/\"]\npath = a\n"
    b"[remote \"o.r\\\"g\"]\n\turl = \"a\\tb\\\\c\"  \n\tbare\n"
    b"[user]name=z\n"
    b"[diff \"p\"]\n\ttextconv = cat\n"
    b"[credential]\n\thelper = !evil\n"
)


def _git_list(path: str) -> list[tuple[str, str | None]]:
    out = subprocess.run([GIT, "config", "--file", path, "--list", "--null", "--no-includes"],
                         capture_output=True, check=True).stdout.decode("utf-8", "surrogateescape")
    res = []
    for rec in out.split("\0"):
        if not rec:
            continue
        name, nl, value = rec.partition("\n")
        res.append((name, value if nl else None))
    return res


def _lower_name(name: str) -> str:
    # git prints section and key lower case, the subsection as written
    parts = name.split(".")
    return ".".join([parts[0].lower()] + parts[1:-1] + [parts[-1].lower()])


def test_parser_reads_what_git_reads(tmp_path):
    f = tmp_path / "config"
    f.write_bytes(TRICKY_CONFIG)
    items, err = gitconfig.parse_git_config(TRICKY_CONFIG)
    assert err is None
    assert [(i.name, i.value) for i in items] == [(_lower_name(n), v) for n, v in _git_list(str(f))]


def test_sanitized_config_keeps_only_safe_keys_and_git_agrees(tmp_path):
    data = TRICKY_CONFIG + (b"[core]\n\trepositoryformatversion = 0\n\thooksPath = h\n"
                            b"\tpager = less\n\tworktree = /home\n\tsshCommand = evil\n"
                            b"[remote \"origin\"]\n\turl = https://example.invalid/r.git\n"
                            b"\tuploadpack = evil\n[remote \"e\"]\n\turl = ext::sh -c evil\n"
                            b"[include]\n\tpath = ../x\n[protocol \"ext\"]\n\tallow = always\n"
                            b"[url \"ext::sh \"]\n\tinsteadOf = https://\n")
    new, removed, err = gitconfig.sanitize_git_config(data)
    assert err is None
    f = tmp_path / "config"
    f.write_bytes(new)
    kept = _git_list(str(f))
    # the tricky remote's url is a local path: dropped like a key off the list
    assert kept == [("user.name", "z"), ("core.repositoryformatversion", "0"),
                    ("remote.origin.url", "https://example.invalid/r.git")]
    assert [(i.name, i.value) for i, w in removed if "local path" in w] == \
        [("remote.o.r\"g.url", "a\tb\\c")]
    danger = {i.name for i, _ in removed if gitconfig.is_dangerous_key(i)}
    assert {"core.fsmonitor", "filter.lfs.smudge", "alias.x", "includeif.gitdir:/x/.path",
            "diff.p.textconv", "credential.helper", "core.hookspath", "core.pager",
            "core.worktree", "core.sshcommand", "remote.origin.uploadpack", "include.path",
            "protocol.ext.allow", "url.ext::sh .insteadof"} <= danger
    assert "alias.st" not in danger  # removed (not on the safe list) but not a program


def test_parser_stops_where_git_refuses(tmp_path):
    data = b"[core]\n\tbare = false\n[core\n\tfsmonitor = x\n"
    items, err = gitconfig.parse_git_config(data)
    assert [i.name for i in items] == ["core.bare"] and err
    f = tmp_path / "c"
    f.write_bytes(data)
    assert subprocess.run([GIT, "config", "--file", str(f), "--list"],
                          capture_output=True).returncode != 0
    new, removed, err2 = gitconfig.sanitize_git_config(data)
    assert b"fsmonitor" not in new and err2
