"""The rule for a config git rewrites during the run (gitconfig.vet_git_config),
the guard's verdict on existing repository configs, and which configs the
snapshot leaves without a bind. End to end: tests/e2e/test_git_existing.py."""
from __future__ import annotations

import os
import subprocess

import pytest

from confine import protect
from confine.protect import gitconfig
from confine.protect.guard import VET, Guard

PERSON = b"[core]\n\tbare = false\n\teditor = vim\n[filter \"lfs\"]\n\tclean = git-lfs clean\n"


def names(data: bytes, trusted: bytes | None) -> list[str] | str:
    bad, err = protect.vet_git_config(data, trusted)
    return err if err else [it.name for it, _ in bad]


def test_safe_keys_pass_and_others_are_named():
    assert names(b"[user]\n\tname = a\n[remote \"o\"]\n\turl = h:x\n", None) == []
    assert names(b"[core]\n\tpager = less\n[alias]\n\tx = !sh\n", None) == ["core.pager", "alias.x"]


def test_the_persons_entries_may_stay_exactly_as_they_were():
    assert names(PERSON + b"[user]\n\tname = a\n", PERSON) == []
    # reordered, and under a header written another way, still the same entries
    assert names(b"[filter \"lfs\"]\n\tclean = git-lfs clean\n[core]\n\teditor = vim\n", PERSON) == []
    assert names(b"[core]\n\teditor = emacs\n", PERSON) == ["core.editor"]          # another value
    assert names(PERSON + b"[core]\n\teditor = vim\n", PERSON) == ["core.editor"]   # twice
    assert names(b"[filter \"LFS\"]\n\tclean = git-lfs clean\n", PERSON) == ["filter.LFS.clean"]
    assert names(b"[core]\n", PERSON) == []                                          # removed


def test_nul_bytes_and_syntax_errors_refuse_the_file():
    assert names(b"[user]\n\tname = a\0b\n", None) == "a NUL byte"
    assert names(b"[user\n", None).startswith("line ")


def test_the_guard_vets_a_rename_onto_an_existing_config_only_where_the_snapshot_said():
    g = Guard("/w", protect.compile_patterns(None), extra=[("r/.git/config", False),
                                                          ("b.git/config", False)],
              configs=[("r/.git/config", PERSON)])
    assert g.rename_to("/w/r/.git/config") == VET
    assert g.trusted_config(g.rel("/w/r/.git/config")) == PERSON
    assert g.rename_to("/w/b.git/config") not in (None, VET)         # kept its bind: refused
    assert g.rename_to("/w/new/.git/config") == VET                  # a new repository
    assert g.trusted_config(g.rel("/w/new/.git/config")) is None
    assert g.write("/w/r/.git/config", 1, 1) is not None
    assert g.create("/w/r/.git/config", "file") is not None


def test_snapshot_leaves_repository_configs_to_the_guard_only_when_asked(tmp_path):
    wd = str(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "HOME": wd, "GIT_CONFIG_NOSYSTEM": "1"}
    for repo in ("r", "v/x"):
        subprocess.run(["git", "init", "-q", os.path.join(wd, repo)], check=True, env=env)
    os.link(os.path.join(wd, "v/x/.git/config"), os.path.join(wd, "v/hard"))
    plain = protect.snapshot(wd, home=wd, git_configs=[])
    ro = {"/".join(m.rel) for m in plain.mount_plan.mounts if m.readonly}
    assert plain.checked_configs == () and "r/.git/config" in ro
    snap = protect.snapshot(wd, home=wd, git_configs=[], guarded=True)
    ro = {"/".join(m.rel) for m in snap.mount_plan.mounts if m.readonly}
    # a hard-linked config keeps its bind: the other name could write it
    assert snap.checked_configs == ("r/.git/config",), snap.checked_configs
    assert "r/.git/config" not in ro and "r/.git/hooks" in ro and "v/x/.git/config" in ro
    assert Guard.from_snapshot(snap).rename_to(f"{snap.workdir}/r/.git/config") == VET
    assert snap.describe()["checked_configs"] == ["r/.git/config"]


# --- locations and refspecs (issue 21, items 1 and 2) -------------------------------

PERSON_REMOTE = b"[remote \"origin\"]\n\turl = ../up.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n"

NETWORK = ["https://h/p.git", "http://h/p", "ssh://h/p", "ssh://u@h:22/~/p.git", "git://h/p",
           "git+ssh://h/p", "ssh+git://h/p", "host:path", "user@host:path.git", "[::1]:x",
           "u@[::1]:x", "ssh://[::1]/x", "h:/abs/p"]
LOCAL = ["~/x.git", "../x", "/abs", "x", "./a:b", "/a:b", "file:///x", "file://h/x",
         "ext::sh -c touch% /tmp/pwned", "fd::3", "fd::3,4", "foo::bar", "::x", "",
         "SSH://h/p", "HTTPS://h/p", "svn://h/p", "rsync://h/p", "-oProxyCommand=x:p",
         "ssh://-oProxyCommand=x/p", "ssh://u@-x/p", "u@-x:p", "ssh://-u@h/p"]


def one(key: bytes, value: bytes, trusted: bytes | None = b"", extra: bytes = b"") -> list[str]:
    got = names(b"[remote \"origin\"]\n\turl = https://h/o.git\n" + extra
                + key + b" = " + value + b"\n", trusted)
    assert isinstance(got, list), got
    return got


@pytest.mark.parametrize("value", NETWORK)
@pytest.mark.parametrize("key", ["url", "pushurl"])
def test_a_network_url_may_be_set(key, value):
    assert one(b"[remote \"o\"]\n\t" + key.encode(), b'"' + value.encode() + b'"') == []
    assert one(b"[submodule \"s\"]\n\turl", b'"' + value.encode() + b'"') == []


@pytest.mark.parametrize("value", LOCAL)
@pytest.mark.parametrize("key", ["url", "pushUrl", "PUSHURL"])
def test_a_local_path_or_helper_may_not(key, value):
    q = b'"' + value.replace("\\", "\\\\").encode() + b'"'
    assert one(b"[remote \"o\"]\n\t" + key.encode(), q) == [f"remote.o.{key.lower()}"]
    assert one(b"[submodule \"s\"]\n\turl", q) == ["submodule.s.url"]
    # the same under a legacy header (lower-cased by git), and as the key alone
    assert one(b"[remote.O]\n\t" + key.encode(), q) == [f"remote.o.{key.lower()}"]


def test_the_reason_names_what_the_value_is():
    why = {v: protect.vet_git_config(b"[remote \"o\"]\n\tpushurl = \"" + v.encode() + b"\"\n")[0][0][1]
           for v in ("~/x.git", "file:///x", "ext::sh", "svn://h/p")}
    assert "local path" in why["~/x.git"] and "file://" in why["file:///x"]
    assert "helper" in why["ext::sh"] and "scheme" in why["svn://h/p"]
    assert all("network URL" in w for w in why.values()), why


def test_quotes_and_escapes_are_read_as_git_reads_them():
    # quoting, comments and line continuations, as git's parser reads them
    assert one(b"[remote \"o\"]\n\tpushurl", b'"/tmp/x" ; https://h/p') == ["remote.o.pushurl"]
    assert one(b"[remote \"o\"]\n\tpushurl", b'https://h/p # /tmp/x') == []
    assert one(b"[remote \"o\"]\n\tpushurl", b'"ss"h://h/p') == []
    assert one(b"[remote \"o\"]\n\tpushurl", b'/tm\\\n p/x') == ["remote.o.pushurl"]
    assert one(b"[remote \"o\"]\n\tpushurl", b'ss\\\nh://h/p') == []
    assert one(b"[remote \"o\"]\n\tpushurl", b'') == ["remote.o.pushurl"]
    assert names(b"[remote \"o\"]\n\tpushurl\n", None) == ["remote.o.pushurl"]


@pytest.mark.parametrize("key", [b"[branch \"main\"]\n\tpushRemote", b"[branch \"main\"]\n\tremote",
                                 b"[remote]\n\tpushDefault", b"[remote]\n\tpushdefault"])
def test_a_remote_name_is_judged_by_the_remote_it_names(key):
    assert one(key, b"origin") == []                       # a remote with a url
    assert one(key, b"https://h/p") == []                  # a URL is a remote too
    assert one(key, b"~/.cache/x/evil.git") != []
    assert one(key, b"/abs/evil.git") != []
    # a name no remote of the config has a url for: git takes it as a path
    assert one(key, b"evil") != []
    assert one(key, b"Origin") != []                       # remote names keep their case
    assert one(key, b"p", extra=b"[remote \"p\"]\n\tpushurl = https://h/p\n") != []
    # ... nor when that remote's url is itself refused
    got = one(key, b"q", extra=b"[remote \"q\"]\n\turl = /tmp/q.git\n")
    assert "remote.q.url" in got and len(got) == 2, got


def test_branch_remote_dot_is_the_repository_itself():
    assert one(b"[branch \"f\"]\n\tremote", b".") == []
    assert one(b"[remote]\n\tpushdefault", b".") != []


@pytest.mark.parametrize("value,refused", [
    (":refs/heads/release", True), (":release", True), ("+main:main", True),
    ("+refs/heads/*:refs/heads/*", True), ("+main", True),
    ("main:main", False), ("refs/heads/*:refs/heads/*", False), ("HEAD", False), (":", False),
    ("^refs/heads/secret", False)])
def test_push_refspecs_that_force_or_delete(value, refused):
    got = one(b"[remote \"origin\"]\n\tpush", value.encode())
    assert got == (["remote.origin.push"] if refused else []), got


@pytest.mark.parametrize("value,refused", [
    ("+refs/heads/*:refs/remotes/origin/*", False), ("refs/heads/*:refs/remotes/o/*", False),
    ("+refs/heads/main", False), ("refs/heads/main:", False), ("^refs/heads/x", False),
    ("+refs/heads/*:refs/heads/*", True), ("refs/heads/main:refs/heads/main", True),
    ("+refs/tags/*:refs/tags/*", True), ("main:main", True),
    ("+refs/heads/*:refs/remotes/../heads/*", True), ("+refs/*:refs/*", True),
    ("x:refs/remotes/o/a:refs/heads/main", True)])    # git splits at the last colon
def test_fetch_refspecs_write_only_remote_tracking_refs(value, refused):
    got = one(b"[remote \"origin\"]\n\tfetch", value.encode())
    assert got == (["remote.origin.fetch"] if refused else []), got


@pytest.mark.parametrize("value,refused", [
    (b"true", True), (b"yes", True), (b"On", True), (b"1", True), (b"2", True), (b"1k", True),
    (b"bogus", True), (b"false", False), (b"no", False), (b"OFF", False), (b"0", False),
    (b'""', False)])
def test_mirror_true_in_any_spelling(value, refused):
    got = one(b"[remote \"origin\"]\n\tmirror", value)
    assert got == (["remote.origin.mirror"] if refused else []), got
    assert names(b"[remote \"o\"]\n\tmirror\n", None) == ["remote.o.mirror"]   # key alone: true
    assert one(b"[remote \"origin\"]\n\tpruneTags", value) == \
        (["remote.origin.prunetags"] if refused else [])
    assert one(b"[fetch]\n\tpruneTags", value) == (["fetch.prunetags"] if refused else [])


def test_the_persons_own_location_and_refspecs_may_stay_exactly():
    mine = PERSON_REMOTE + b"\tpush = +main:main\n\tmirror = true\n[branch \"main\"]\n" \
        b"\tpushremote = /srv/mirror.git\n"
    assert names(mine + b"[user]\n\tname = a\n", mine) == []
    assert names(PERSON_REMOTE.replace(b"../up.git", b"../other.git"), mine) == ["remote.origin.url"]
    assert names(mine.replace(b"mirror.git", b"evil.git"), mine) == ["branch.main.pushremote"]
    # a branch naming the person's remote (on a local path) is judged by it: accepted
    assert names(PERSON_REMOTE + b"[branch \"f\"]\n\tremote = origin\n", PERSON_REMOTE) == []
    # added twice: the second is not the person's
    assert names(mine + b"[remote \"origin\"]\n\tpush = +main:main\n", mine) == ["remote.origin.push"]


def test_a_new_repository_is_judged_on_keys_only_at_the_call():
    data = PERSON_REMOTE + b"[branch \"main\"]\n\tremote = origin\n"
    assert protect.vet_git_config(data, None, values=False) == ([], None)
    assert [it.name for it, _ in protect.vet_git_config(data, None)[0]] == \
        ["remote.origin.url", "branch.main.remote"]
    # and sanitized at exit: the url goes, and the branch naming it with it
    new, removed, err = protect.sanitize_git_config(data)
    assert err is None and [it.name for it, _ in removed] == ["remote.origin.url", "branch.main.remote"]
    assert b"up.git" not in new and b"refs/remotes/origin" in new


def test_git_agrees_which_values_are_local(tmp_path):
    """git's own reading of the same values (transport.c): `git ls-remote`
    with no network reachable says which it takes for a local path."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_SSH_COMMAND": "false", "GIT_ALLOW_PROTOCOL": "file"}
    for v in ("./a:b", "../x", "/abs", "x", "~/x.git"):
        p = subprocess.run(["git", "ls-remote", v], cwd=tmp_path, env=env, capture_output=True,
                           text=True)
        assert "does not appear to be a git repository" in p.stderr, (v, p.stderr)
    for v in ("host:path", "[::1]:x", "u@h:p"):
        p = subprocess.run(["git", "ls-remote", v], cwd=tmp_path, env=env, capture_output=True,
                           text=True)
        assert "does not appear to be a git repository" not in p.stderr, (v, p.stderr)


def test_the_path_a_location_names():
    def path(name: str, value: str) -> str | None:
        sec, _, rest = name.partition(".")
        sub, _, key = rest.rpartition(".")
        return gitconfig.location_path(protect.ConfigItem(sec, sub or None, key, value, 1))
    assert path("remote.o.url", "ssh://localhost/home/a/x.git") == "/home/a/x.git"
    assert path("remote.o.url", "ssh://h/~/x.git") == "~/x.git"
    assert path("remote.o.url", "u@h:x.git") == "~/x.git"
    assert path("remote.o.url", "h:/srv/x.git") == "/srv/x.git"
    assert path("remote.o.url", "../up.git") == "../up.git"
    assert path("remote.o.url", "file:///srv/x") == "/srv/x"
    assert path("branch.m.remote", "origin") is None and path("branch.m.remote", ".") is None
    assert path("branch.m.pushremote", "/tmp/evil.git") == "/tmp/evil.git"
    assert path("user.name", "/x") is None
