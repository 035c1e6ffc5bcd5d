"""End-to-end attacks on `confine exec` from inside, with real confined processes.

Every "blocked" result is paired with a control: the same attempt by the same
identity outside the sandbox (which must succeed, or fail differently), or a
positive control inside. Removing the protection makes these tests fail.

Layers: a default run adds a private mount namespace (host read-only: writes
outside fail with EROFS before Landlock is asked; private /dev/shm and
/dev/pts) and a pid namespace with its own /proc (processes outside do not
exist: ESRCH/ENOENT). Where those answer first, the test also runs the same
attempt with `Sandbox.without_namespaces()` (CONFINE_TEST_NO_NAMESPACES=1,
--degrade mount_namespace) to prove Landlock/seccomp still block it alone,
or, for the documented gaps only namespaces close, that the gap reappears.

Identities:
  sandbox      parametrized: confine started by root (agent = workdir owner,
               the test account) and by the test account itself.
  root_agent   confine started by root with a root-owned workdir and --user root:
               the agent is uid 0 without capabilities; its control is root
               outside. This shows Landlock/seccomp, not file permissions or
               missing capabilities, are what stop it.
"""
from __future__ import annotations

import fcntl
import grp
import json
import os
import pwd
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid

import pytest

try:  # tests/ as a package or as a plain directory
    from .conftest import (
        PY,
        Sandbox,
        _alive,
        last_json,
        make_workdir,
        probe_code,
        pty_run,
        write_owned,
    )
except ImportError:
    from conftest import (
        PY,
        Sandbox,
        _alive,
        last_json,
        make_workdir,
        probe_code,
        pty_run,
        write_owned,
    )

pytestmark = pytest.mark.usefixtures("confine_bin")

DENIED = ("EACCES", "EPERM")
CROSS = ("EXDEV", "EACCES", "EPERM")  # link()/rename() across the boundary


def _tag() -> str:
    return uuid.uuid4().hex[:10]


def _mismatches(results: dict, expect: dict) -> list[str]:
    bad = []
    for name, want in expect.items():
        got = results.get(name, "<missing>")
        ok = got in want if isinstance(want, tuple) else got == want
        if not ok:
            bad.append(f"{name}: got {got!r}, want {want!r}")
    return bad


def _check(p, data, what="probe"):
    assert data is not None, (f"{what} printed no JSON (exit {p.returncode})\n"
                              f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-2000:]}")
    return data


# =====================================================================================
# Filesystem: writes outside the workdir, links, renames, truncation, /proc/self/root,
# secrets
# =====================================================================================

FS_BODY = r'''
H, W, O, T = P["home"], P["wd"], P["out"], P["tag"]
APPEND = os.O_WRONLY | os.O_APPEND
def created(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    os.unlink(path)
def write_via(path):
    fd = os.open(path, APPEND)   # opening for writing is the attempt; nothing is written
    os.close(fd)
def linked(src, dst):
    os.link(src, dst)
    os.unlink(dst)
def renamed(src, dst):
    os.rename(src, dst)
    os.rename(dst, src)
def made_dir(path):
    os.mkdir(path)
    os.rmdir(path)
def symlink_then_write(target, link):
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)
    write_via(link)
def listing(path):
    os.listdir(path)

# writes outside the workdir
attempt("write ~/.bashrc", lambda: write_via(H + "/.bashrc"))
attempt("create a file in ~", lambda: created(H + "/confine-" + T))
attempt("create /tmp/x", lambda: created("/tmp/x-confine-" + T))
attempt("write a file outside", lambda: write_via(O + "/file"))
attempt("create a file in a readable dir outside", lambda: created(O + "/new-" + T))
attempt("mkdir outside", lambda: made_dir(O + "/dir-" + T))
attempt("unlink a file outside", lambda: os.unlink(O + "/victim"))
attempt("write via planted symlink to ~/.bashrc", lambda: write_via(W + "/link-bashrc"))
attempt("write via planted symlink to a file outside", lambda: write_via(W + "/link-out"))
attempt("create via planted symlink to a dir outside", lambda: created(W + "/link-outdir/new-" + T))
attempt("symlink made inside, then write", lambda: symlink_then_write(O + "/file", W + "/mylink"))
attempt("hardlink ~/.bashrc into the workdir", lambda: linked(H + "/.bashrc", W + "/hl-bashrc"))
attempt("hardlink a file outside into the workdir", lambda: linked(O + "/file", W + "/hl-file"))
attempt("hardlink a workdir file out", lambda: linked(W + "/evil", O + "/hl-evil"))
attempt("rename a workdir file out", lambda: renamed(W + "/evil", O + "/evil"))
attempt("rename a file outside in", lambda: renamed(O + "/file", W + "/stolen"))
attempt("rename ~/notes.txt in", lambda: renamed(H + "/notes.txt", W + "/notes"))
attempt("rename ~/.ssh in", lambda: renamed(H + "/.ssh", W + "/ssh"))
attempt("O_RDONLY|O_TRUNC a readable file outside", lambda: opened(O + "/trunc", os.O_RDONLY | os.O_TRUNC))
attempt("truncate() a readable file outside", lambda: os.truncate(O + "/trunc2", 0))
attempt("write /proc/self/root/~/.bashrc", lambda: write_via("/proc/self/root" + H + "/.bashrc"))
attempt("create /proc/self/root/tmp/x", lambda: created("/proc/self/root/tmp/x-confine-" + T))
# reads of secrets and of HOME
attempt("read ~/.ssh/id_rsa", lambda: read_file(H + "/.ssh/id_rsa"))
attempt("read ~/.aws/credentials", lambda: read_file(H + "/.aws/credentials"))
attempt("read ~/.netrc", lambda: read_file(H + "/.netrc"))
attempt("list ~/.ssh", lambda: listing(H + "/.ssh"))
attempt("list ~", lambda: listing(H))
attempt("read ~/.bashrc", lambda: read_file(H + "/.bashrc"))
attempt("read ~/notes.txt", lambda: read_file(H + "/notes.txt"))
attempt("read /proc/self/root/~/.ssh/id_rsa", lambda: read_file("/proc/self/root" + H + "/.ssh/id_rsa"))
# positive controls (must work inside)
attempt("+create in the workdir", lambda: created(W + "/new-" + T))
attempt("+create via /proc/self/root/WORKDIR", lambda: created("/proc/self/root" + W + "/viaproc-" + T))
attempt("+rename within the workdir", lambda: renamed(W + "/evil", W + "/evil2"))
attempt("+hardlink within the workdir", lambda: linked(W + "/evil", W + "/evil-hl"))
attempt("+O_TRUNC in the workdir", lambda: opened(W + "/evil", os.O_WRONLY | os.O_TRUNC))
attempt("+write TMPDIR", lambda: created(os.environ.get("TMPDIR", "/nonexistent") + "/t-" + T))
attempt("+write /dev/null", lambda: write_via("/dev/null"))
attempt("+read a --read file outside", lambda: read_file(O + "/trunc"))
attempt("+read ~/.gitconfig (granted by the profile)", lambda: read_file(H + "/.gitconfig"))
attempt("+read /etc/passwd", lambda: read_file("/etc/passwd"))
'''

FS_DENIED = {
    "write ~/.bashrc": DENIED,
    "create a file in ~": DENIED,
    "create /tmp/x": DENIED,
    "write a file outside": DENIED,
    "create a file in a readable dir outside": DENIED,
    "mkdir outside": DENIED,
    "unlink a file outside": DENIED,
    "write via planted symlink to ~/.bashrc": DENIED,
    "write via planted symlink to a file outside": DENIED,
    "create via planted symlink to a dir outside": DENIED,
    "symlink made inside, then write": DENIED,
    "hardlink ~/.bashrc into the workdir": CROSS,
    "hardlink a file outside into the workdir": CROSS,
    "hardlink a workdir file out": CROSS,
    "rename a workdir file out": CROSS,
    "rename a file outside in": CROSS,
    "rename ~/notes.txt in": CROSS,
    "rename ~/.ssh in": CROSS,
    "O_RDONLY|O_TRUNC a readable file outside": DENIED,
    "truncate() a readable file outside": DENIED,
    "write /proc/self/root/~/.bashrc": DENIED,
    "create /proc/self/root/tmp/x": DENIED,
    "read ~/.ssh/id_rsa": DENIED,
    "read ~/.aws/credentials": DENIED,
    "read ~/.netrc": DENIED,
    "list ~/.ssh": DENIED,
    "list ~": DENIED,
    "read ~/.bashrc": DENIED,
    "read ~/notes.txt": DENIED,
    "read /proc/self/root/~/.ssh/id_rsa": DENIED,
}
FS_ALLOWED = [k for k in FS_BODY.split('attempt("')[1:] if k.startswith("+")]
FS_ALLOWED = [k.split('"', 1)[0] for k in FS_ALLOWED]
# Attempts that modify the filesystem outside the workdir: in a default run the
# read-only host view (the mount namespace) refuses them first, with EROFS,
# before Landlock is asked. The reads stay Landlock's alone.
FS_WRITES = [k for k in FS_DENIED if not k.startswith(("read ", "list "))]
EROFS = "EROFS"


def _fs_host_state(home, wd, out, bashrc, tags):
    return {
        "bashrc": open(home + "/.bashrc").read() == bashrc,
        "outside file": open(out + "/file").read() == "outside\n",
        "trunc size": os.path.getsize(out + "/trunc"),
        "trunc2 size": os.path.getsize(out + "/trunc2"),
        "victim exists": os.path.exists(out + "/victim"),
        "no /tmp/x": not any(os.path.exists("/tmp/x-confine-" + t) for t in tags),
        "no file in ~": not any(os.path.exists(home + "/confine-" + t) for t in tags),
        "evil in workdir": os.path.exists(wd + "/evil") and not os.path.exists(out + "/evil"),
        "notes in ~": os.path.exists(home + "/notes.txt"),
        ".ssh in ~": os.path.exists(home + "/.ssh/id_rsa"),
        "nothing new outside": sorted(os.listdir(out)) == ["file", "trunc", "trunc2", "victim"],
    }


@pytest.fixture(scope="module", params=["root", "user"])
def fs_run(request, confine_bin, test_user, planted_home):
    """Per launcher mode, the same probe three times: confined with every layer
    (the default), confined by Landlock and seccomp alone (no namespaces), and
    outside as the same account (control). Host state is captured after each
    confined run, before the control."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    wd = make_workdir(test_user)
    out = tempfile.mkdtemp(prefix="confine-out-", dir="/tmp")
    os.chmod(out, 0o755)
    os.chown(out, test_user.pw_uid, test_user.pw_gid)
    try:
        for name, text in (("file", "outside\n"), ("trunc", "0123456789"),
                           ("trunc2", "0123456789"), ("victim", "v\n")):
            write_owned(os.path.join(out, name), text, test_user)
        write_owned(os.path.join(wd, "evil"), "evil\n", test_user, mode=0o755)
        for link, target in (("link-bashrc", planted_home + "/.bashrc"),
                             ("link-out", out + "/file"), ("link-outdir", out)):
            os.symlink(target, os.path.join(wd, link))
            os.lchown(os.path.join(wd, link), test_user.pw_uid, test_user.pw_gid)
        sb = Sandbox(request.param, test_user, wd)
        with open(planted_home + "/.bashrc") as f:
            bashrc = f.read()
        res, host, tags = {}, {}, []
        for layers, box in (("all", sb), ("landlock", sb.without_namespaces())):
            tags.append(_tag())
            params = {"home": planted_home, "wd": wd, "out": out, "tag": tags[-1]}
            p, res[layers] = box.probe(FS_BODY, params, "--read", out)
            _check(p, res[layers], f"probe ({layers} layers)")
            host[layers] = _fs_host_state(planted_home, wd, out, bashrc, tags)
        params["tag"] = _tag()
        p2, outside = sb.outside_probe(FS_BODY, params)
        _check(p2, outside, "outside control")
        yield {"inside": res["all"], "landlock": res["landlock"], "outside": outside,
               "host": host, "proc": p}
    finally:
        shutil.rmtree(wd, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.parametrize("vector", list(FS_DENIED))
def test_fs_vector_blocked(fs_run, vector):
    """Blocked inside with a clear errno, by every layer together (writes: the
    read-only host view answers EROFS first) and by Landlock alone (no
    namespaces: EACCES/EPERM/EXDEV as the kernel's Landlock returns them); the
    same call works outside (same uid)."""
    want = FS_DENIED[vector]
    got = fs_run["inside"][vector]
    assert got in (want + (EROFS,) if vector in FS_WRITES else want), f"inside: {vector} -> {got}"
    alone = fs_run["landlock"][vector]
    assert alone in want, f"Landlock alone (no namespaces): {vector} -> {alone}"
    assert fs_run["outside"][vector] == "ok", \
        f"control: {vector} should work outside the sandbox, got {fs_run['outside'][vector]}"


def test_fs_readonly_host_view(fs_run):
    """The mount layer is really there: every write outside that does not cross
    mounts fails with EROFS in a default run (the kernel checks the read-only
    mount before Landlock); without namespaces none does."""
    cross = [k for k in FS_WRITES if FS_DENIED[k] is CROSS]
    not_erofs = {k: fs_run["inside"][k] for k in FS_WRITES
                 if k not in cross and fs_run["inside"][k] != EROFS}
    assert not not_erofs, f"not refused by the read-only host view: {not_erofs}"
    assert EROFS not in fs_run["landlock"].values(), fs_run["landlock"]


@pytest.mark.parametrize("vector", FS_ALLOWED)
def test_fs_positive_controls(fs_run, vector):
    for layers in ("inside", "landlock"):
        assert fs_run[layers][vector] == "ok", f"{layers}: {vector} -> {fs_run[layers][vector]}"


@pytest.mark.parametrize("layers", ["all", "landlock"])
def test_fs_host_state_unchanged(fs_run, layers):
    h = fs_run["host"][layers]
    assert h["trunc size"] == 10 and h["trunc2 size"] == 10, h
    bad = [k for k, v in h.items() if v is False]
    assert not bad, f"the confined probe changed the host: {bad}"


META_BODY = r"""
F, H = P["f"], P["home"]
attempt("chmod a file outside", lambda: os.chmod(F, 0o666))
attempt("chmod ~/.ssh", lambda: os.chmod(H + "/.ssh", 0o777))
attempt("utime a file outside", lambda: os.utime(F, (0, 0)))
attempt("setxattr user.* outside", lambda: os.setxattr(F, "user.confine", b"1"))
"""


def _meta_run(box, planted_home, f, outside=False):
    """Run META_BODY; return (results, mode of f, mtime of f, xattrs of f, mode of
    ~/.ssh), restoring ~/.ssh and f afterwards."""
    st_ssh = stat.S_IMODE(os.stat(planted_home + "/.ssh").st_mode)
    params = {"f": f, "home": planted_home}
    try:
        p, r = (box.outside_probe(META_BODY, params) if outside
                else box.probe(META_BODY, params))
        _check(p, r, "outside control" if outside else "probe")
        st = os.stat(f)
        after = (stat.S_IMODE(st.st_mode), st.st_mtime, os.listxattr(f),
                 stat.S_IMODE(os.stat(planted_home + "/.ssh").st_mode))
    finally:
        os.chmod(planted_home + "/.ssh", st_ssh)
        os.chmod(f, 0o600)
        os.utime(f)
        if "user.confine" in os.listxattr(f):
            os.removexattr(f, "user.confine")
    return (r,) + after


def test_chmod_utime_outside_workdir(sandbox, planted_home, outside_dir):
    """Metadata writes (chmod, utime, setxattr) on files outside the workdir.
    Landlock (through ABI 7) cannot restrict these; the read-only host view of
    the mount namespace does: EROFS, nothing changes. Paired with the same
    calls outside (they work there)."""
    f = write_owned(os.path.join(outside_dir, "meta"), "x", sandbox.agent, mode=0o600)
    ssh_mode = stat.S_IMODE(os.stat(planted_home + "/.ssh").st_mode)
    inside, mode, mtime, xattrs, ssh_after = _meta_run(sandbox, planted_home, f)
    outside, o_mode, o_mtime, _, _ = _meta_run(sandbox, planted_home, f, outside=True)
    assert outside["chmod a file outside"] == "ok" and outside["utime a file outside"] == "ok", \
        f"control: {outside}"
    assert (o_mode, o_mtime) == (0o666, 0), "control: outside, the calls take effect"
    assert mode == 0o600 and mtime != 0 and ssh_after == ssh_mode and not xattrs, \
        f"metadata of files outside the workdir changed from inside: {inside}"
    assert inside == {k: EROFS for k in inside} and len(inside) == 4, inside


def test_chmod_utime_without_namespaces_refused_by_the_broker(sandbox, planted_home, outside_dir):
    """Landlock cannot stop chmod/utime/setxattr outside the workdir; without the
    read-only host view (no namespaces) the broker judges them instead, with the
    same answer (EROFS) and nothing changes. Control: test_chmod_utime_outside_workdir
    (outside the sandbox the calls work). tests/e2e/test_no_namespaces.py has the rest."""
    f = write_owned(os.path.join(outside_dir, "meta"), "x", sandbox.agent, mode=0o600)
    ssh_mode = stat.S_IMODE(os.stat(planted_home + "/.ssh").st_mode)
    inside, mode, mtime, xattrs, ssh_after = _meta_run(sandbox.without_namespaces(),
                                                       planted_home, f)
    assert mode == 0o600 and mtime != 0 and ssh_after == ssh_mode and not xattrs, inside
    assert inside == {k: EROFS for k in inside} and len(inside) == 4, inside


def test_carve_out_read_home_keeps_secrets(sandbox, planted_home):
    """--read HOME grants the parent of ~/.ssh: ~/notes.txt becomes readable,
    the secrets stay unreadable (carve-out). Without --read, notes.txt is not."""
    body = r'''
    H = P["home"]
    attempt("read ~/notes.txt", lambda: read_file(H + "/notes.txt"))
    attempt("read ~/.bashrc", lambda: read_file(H + "/.bashrc"))
    attempt("read ~/.ssh/id_rsa", lambda: read_file(H + "/.ssh/id_rsa"))
    attempt("list ~/.ssh", lambda: os.listdir(H + "/.ssh") and None)
    attempt("read ~/.aws/credentials", lambda: read_file(H + "/.aws/credentials"))
    attempt("read ~/.netrc", lambda: read_file(H + "/.netrc"))
    attempt("write ~/notes.txt", lambda: opened(H + "/notes.txt", os.O_WRONLY | os.O_APPEND))
    '''
    params = {"home": planted_home}
    p, granted = sandbox.probe(body, params, "--read", planted_home)
    _check(p, granted)
    p, plain = sandbox.probe(body, params)
    _check(p, plain)
    p, outside = sandbox.outside_probe(body, params)
    _check(p, outside, "outside control")
    assert plain["read ~/notes.txt"] in DENIED, "control: HOME must not be readable by default"
    assert granted["read ~/notes.txt"] == "ok" and granted["read ~/.bashrc"] == "ok", granted
    for k in ("read ~/.ssh/id_rsa", "list ~/.ssh", "read ~/.aws/credentials", "read ~/.netrc"):
        assert granted[k] in DENIED, f"{k} readable although it is a secret: {granted}"
        assert outside[k] == "ok", f"control: {k} works outside: {outside}"
    # the read-only host view refuses the write first; Landlock alone refuses it too
    assert granted["write ~/notes.txt"] in DENIED + (EROFS,) and outside["write ~/notes.txt"] == "ok"
    p, alone = sandbox.without_namespaces().probe(body, params, "--read", planted_home)
    _check(p, alone)
    assert alone["read ~/notes.txt"] == "ok", alone
    for k in ("read ~/.ssh/id_rsa", "list ~/.ssh", "read ~/.aws/credentials", "read ~/.netrc",
              "write ~/notes.txt"):
        assert alone[k] in DENIED, f"Landlock alone: {k}: {alone}"


def test_carve_out_keeps_secrets_below_a_granted_directory(sandbox, planted_home):
    """A secret two levels below a grant (~/.config/gcloud under --read HOME): its
    siblings on the way down stay readable, the secret does not."""
    import shutil
    made = [os.path.join(planted_home, ".config", "gcloud", "key"),
            os.path.join(planted_home, ".config", "plain.txt")]
    new_dirs = [d for d in (os.path.join(planted_home, ".config"),
                            os.path.join(planted_home, ".config", "gcloud")) if not os.path.exists(d)]
    for d in new_dirs:
        os.mkdir(d, 0o755)
        os.chown(d, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    for f in made:
        write_owned(f, "x", sandbox.agent, mode=0o600)
    try:
        body = r'''
    H = P["home"]
    attempt("read ~/.config/plain.txt", lambda: read_file(H + "/.config/plain.txt"))
    attempt("read ~/.config/gcloud/key", lambda: read_file(H + "/.config/gcloud/key"))
    '''
        p, granted = sandbox.probe(body, {"home": planted_home}, "--read", planted_home)
        _check(p, granted)
        p, outside = sandbox.outside_probe(body, {"home": planted_home})
        _check(p, outside, "outside control")
        assert outside == {"read ~/.config/plain.txt": "ok", "read ~/.config/gcloud/key": "ok"}
        assert granted["read ~/.config/plain.txt"] == "ok", granted
        assert granted["read ~/.config/gcloud/key"] in DENIED, granted
    finally:
        for f in made:
            os.unlink(f)
        for d in reversed(new_dirs):
            shutil.rmtree(d, ignore_errors=True)


def test_carve_out_tilde_spelling(user_sandbox, planted_home):
    """`--read ~` (literally, expanded by confine from HOME) carves out the same."""
    body = r'''
    H = P["home"]
    attempt("read ~/notes.txt", lambda: read_file(H + "/notes.txt"))
    attempt("read ~/.ssh/id_rsa", lambda: read_file(H + "/.ssh/id_rsa"))
    '''
    p, r = user_sandbox.probe(body, {"home": planted_home}, "--read", "~")
    _check(p, r)
    assert r == {"read ~/notes.txt": "ok", "read ~/.ssh/id_rsa": "EACCES"}, r


def test_secret_grant_refused(sandbox, planted_home):
    """Granting a secret directly is refused (exit 125), not silently ignored."""
    p = sandbox.run(["true"], "--read", planted_home + "/.ssh")
    assert p.returncode == 125, p
    assert len(p.stderr.strip().splitlines()) == 1 and ".ssh" in p.stderr, p.stderr


def test_inherited_fd_closed(sandbox, outside_dir):
    """An fd opened on a writable file outside, inherited by confine, is not
    passed to the agent (only 0, 1, 2). Control: the same spawn without confine
    sees the fd and can write through it."""
    path = write_owned(os.path.join(outside_dir, "inherited"), "", sandbox.agent, 0o666)
    body = r'''
    fds = []
    for fd in range(3, 1024):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            pass
    R["open fds >= 3"] = fds
    def wr():
        os.write(P["fd"], b"escaped\n")
    attempt("write via inherited fd", wr)
    R["fd dir"] = sorted(int(x) for x in os.listdir("/proc/self/fd"))
    '''
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        target = fcntl.fcntl(fd, fcntl.F_DUPFD, 100)  # a number no one else uses
        os.set_inheritable(target, True)
        try:
            p, inside = sandbox.probe(body, {"fd": target}, pass_fds=(target,))
            _check(p, inside)
            p2, outside = sandbox.outside_probe(body, {"fd": target}, pass_fds=(target,))
            _check(p2, outside, "outside control")
        finally:
            os.close(target)
    finally:
        os.close(fd)
    assert target in outside["open fds >= 3"] and outside["write via inherited fd"] == "ok", \
        f"control: the fd should reach an unconfined child: {outside}"
    assert inside["open fds >= 3"] == [], inside
    assert inside["write via inherited fd"] == "EBADF", inside
    # listdir itself holds one fd (3) while listing
    assert inside["fd dir"] in ([0, 1, 2], [0, 1, 2, 3]), inside
    assert open(path).read() == "escaped\n"  # only the control wrote


def test_workdir_symlink_swap_after_start(sandbox, outside_dir):
    """Replacing a workdir subdirectory by a symlink to a directory outside does
    not extend the grant (Landlock binds rules to inodes, not path strings)."""
    body = r'''
    W, O = P["wd"], P["out"]
    if not os.path.islink(W + "/sub"):
        os.rename(W + "/sub", W + "/sub-old")
        os.symlink(O, W + "/sub")
    attempt("create through swapped symlink", lambda: opened(W + "/sub/pwn", os.O_WRONLY | os.O_CREAT))
    '''
    os.mkdir(os.path.join(sandbox.workdir, "sub"))
    os.chown(os.path.join(sandbox.workdir, "sub"), sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    # every layer: the directory outside is on a read-only mount (EROFS)
    p, r = sandbox.probe(body, {"wd": sandbox.workdir, "out": outside_dir})
    _check(p, r)
    assert r["create through swapped symlink"] in DENIED + (EROFS,), r
    assert not os.path.exists(os.path.join(outside_dir, "pwn"))
    # Landlock alone (no namespaces): its rules follow inodes, not the path string
    p, r = sandbox.without_namespaces().probe(body, {"wd": sandbox.workdir, "out": outside_dir})
    _check(p, r)
    assert r["create through swapped symlink"] in DENIED, r
    assert not os.path.exists(os.path.join(outside_dir, "pwn"))
    p, ctl = sandbox.outside_probe(body, {"wd": sandbox.workdir, "out": outside_dir})
    assert ctl["create through swapped symlink"] == "ok", f"control: {ctl}"


# --- identities with a real uid 0 agent: only the sandbox stands in the way ---------------

ROOT_FS_BODY = r'''
W = P["wd"]
def created(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    os.unlink(path)
attempt("open /etc/hostname for writing", lambda: opened("/etc/hostname", os.O_WRONLY | os.O_APPEND))
attempt("create a file in /etc", lambda: created("/etc/confine-probe-" + P["tag"]))
attempt("read /etc/shadow", lambda: read_file("/etc/shadow"))
attempt("read /etc/gshadow", lambda: read_file("/etc/gshadow"))
attempt("read a file in /root", lambda: read_file(P["rootfile"]))
attempt("open /proc/sys/kernel/hostname for writing", lambda: opened("/proc/sys/kernel/hostname", os.O_WRONLY))
attempt("open /usr/bin/env for writing", lambda: opened("/usr/bin/env", os.O_WRONLY | os.O_APPEND))
attempt("create /tmp/x", lambda: created("/tmp/x-confine-" + P["tag"]))
attempt("+read /etc/passwd", lambda: read_file("/etc/passwd"))
attempt("+create in the workdir", lambda: created(W + "/new"))
'''


ROOT_FS_WRITES = ("open /etc/hostname for writing", "create a file in /etc",
                  "open /proc/sys/kernel/hostname for writing", "open /usr/bin/env for writing",
                  "create /tmp/x")


def test_root_agent_fs(root_agent):
    """uid 0 owns /etc, /root and /etc/shadow: file permissions would allow all of
    this; the sandbox must not. Checked with every layer (writes may stop at the
    read-only host view, EROFS) and with Landlock alone (no namespaces: EACCES/
    EPERM). Control: the same calls as root outside."""
    rootfile = write_owned(f"/root/.confine-test-{_tag()}", "root secret\n", pwd.getpwuid(0), 0o600)
    tags = []
    try:
        runs = {}
        for layers, box in (("all", root_agent), ("landlock", root_agent.without_namespaces())):
            tags.append(_tag())
            params = {"wd": root_agent.workdir, "tag": tags[-1], "rootfile": rootfile}
            p, runs[layers] = box.probe(ROOT_FS_BODY, params)
            _check(p, runs[layers], f"probe ({layers} layers)")
        params["tag"] = _tag()
        p2, outside = root_agent.outside_probe(ROOT_FS_BODY, params)
        _check(p2, outside, "outside control")
    finally:
        os.unlink(rootfile)
    bad = []
    for layers, inside in runs.items():
        for k, v in inside.items():
            if k.startswith("+"):
                if v != "ok":
                    bad.append(f"{layers}: {k}: {v} (positive control)")
                continue
            if outside[k] != "ok":
                bad.append(f"{k}: control failed outside: {outside[k]}")
            want = DENIED + (EROFS,) if layers == "all" and k in ROOT_FS_WRITES else DENIED
            if v not in want:
                bad.append(f"{layers}: {k}: inside {v}")
    assert not bad, bad
    assert not any(os.path.exists(f"/etc/confine-probe-{t}") or os.path.exists(f"/tmp/x-confine-{t}")
                   for t in tags)
    assert runs["all"]["open /etc/hostname for writing"] == EROFS, "read-only host view"


def test_root_agent_shadow_readable_only_outside(root_agent):
    """confine exec --user root -- cat /etc/shadow fails; cat works outside."""
    inside = root_agent.run(["cat", "/etc/shadow"])
    outside = root_agent.outside(["cat", "/etc/shadow"])
    assert outside.returncode == 0 and "root:" in outside.stdout
    assert inside.returncode != 0 and "root:" not in inside.stdout
    assert "Permission denied" in inside.stderr, inside.stderr


def _block_devices() -> list[str]:
    names = set()
    with open("/proc/partitions") as f:
        for line in f.readlines()[2:]:
            parts = line.split()
            if len(parts) == 4:
                names.add(parts[3])
    if os.path.isdir("/sys/block"):
        names.update(os.listdir("/sys/block"))
    return sorted(f"/dev/{n}" for n in names
                  if os.path.exists(f"/dev/{n}") and stat.S_ISBLK(os.stat(f"/dev/{n}").st_mode))


BLK_BODY = r'''
for d in P["devs"]:
    # open only: nothing is ever read from or written to a device
    attempt(d + " O_RDONLY", lambda: opened(d, os.O_RDONLY))
    attempt(d + " O_WRONLY", lambda: opened(d, os.O_WRONLY))
'''


def test_block_devices_root_agent(root_agent):
    """Every block device (/dev/vda, loop, zram...) cannot be opened, neither for
    writing nor for reading, even by a uid 0 agent (owner of the node). Control:
    root outside opens them (those the host allows at all)."""
    devs = _block_devices()
    assert devs, "no block devices found"
    p, inside = root_agent.probe(BLK_BODY, {"devs": devs})
    _check(p, inside)
    p2, outside = root_agent.outside_probe(BLK_BODY, {"devs": devs})
    _check(p2, outside, "outside control")
    opened_outside = [k for k, v in outside.items() if v == "ok"]
    assert opened_outside, f"control: root could open no block device at all: {outside}"
    bad = {k: v for k, v in inside.items() if v not in DENIED}
    assert not bad, f"block devices opened inside: {bad}"
    for k in opened_outside:
        assert inside[k] == "EACCES", (k, inside[k])


def test_block_devices_agent(sandbox):
    devs = _block_devices()
    p, inside = sandbox.probe(BLK_BODY, {"devs": devs})
    _check(p, inside)
    bad = {k: v for k, v in inside.items() if v not in DENIED}
    assert not bad, f"block devices opened inside: {bad}"
    assert len(inside) == 2 * len(devs)


def test_disk_group_member_cannot_open_block_device(confine_bin, test_user):
    """The account is in the `disk` group and a (detached) loop device is
    group-disk rw, so file permissions allow it: outside it opens for reading
    and writing; inside neither (started by the account itself, the group is
    kept, so only the sandbox stands in the way). In the agent's user namespace
    only the account's own uid and gid are mapped: getgroups() shows the kept
    group as the overflow gid, so a group-disk-only file in the workdir proves
    the group still counts for file permissions inside."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    dev = _free_loop()
    if dev is None:
        pytest.skip("no detached loop device")
    disk = grp.getgrnam("disk").gr_gid
    st = os.stat(dev)
    wd = make_workdir(test_user)
    try:
        os.chown(dev, 0, disk)
        os.chmod(dev, 0o660)
        gfile = os.path.join(wd, "group-disk-only")
        with open(gfile, "w") as f:
            f.write("g")
        os.chown(gfile, 0, disk)
        os.chmod(gfile, 0o040)   # readable through the disk group only
        sb = Sandbox("user", test_user, wd, groups=[disk])
        body = BLK_BODY + ('R["groups"] = os.getgroups()\n'
                           'attempt("+read a group-disk-only file", lambda: read_file(P["gfile"]))\n')
        params = {"devs": [dev], "gfile": gfile}
        p2, outside = sb.outside_probe(body, params)
        p, inside = sb.probe(body, params)
        p3, alone = sb.without_namespaces().probe(body, params)
    finally:
        os.chown(dev, st.st_uid, st.st_gid)
        os.chmod(dev, stat.S_IMODE(st.st_mode))
        shutil.rmtree(wd, ignore_errors=True)
    _check(p2, outside, "outside control")
    _check(p, inside)
    _check(p3, alone, "probe (Landlock alone)")
    overflow = int(open("/proc/sys/kernel/overflowgid").read())
    assert disk in outside["groups"] and inside["groups"] == [overflow], (outside, inside)
    assert disk in alone["groups"], alone
    for r in (outside, inside, alone):
        assert r["+read a group-disk-only file"] == "ok", f"the disk group is not effective: {r}"
    assert outside[dev + " O_RDONLY"] == "ok" and outside[dev + " O_WRONLY"] == "ok", outside
    for r in (inside, alone):
        assert r[dev + " O_RDONLY"] == "EACCES" and r[dev + " O_WRONLY"] == "EACCES", r


MKNOD_BODY = r'''
import stat
W = P["wd"]
def mk(name, mode, dev):
    p = W + "/" + name
    os.mknod(p, mode, dev)
    os.unlink(p)
def mknodat_raw():
    r = sysc(259, -100, (W + "/c2").encode(), stat.S_IFCHR | 0o600, os.makedev(1, 3))
    if r == "ok":
        os.unlink(W + "/c2")
    return r
attempt("mknod char 1:3", lambda: mk("c", stat.S_IFCHR | 0o600, os.makedev(1, 3)))
attempt("mknod block 7:0", lambda: mk("b", stat.S_IFBLK | 0o600, os.makedev(7, 0)))
attempt("mknodat char (raw syscall)", mknodat_raw)
attempt("+mkfifo", lambda: mk("fifo", stat.S_IFIFO | 0o600, 0))
'''


def _mknod_check(sb):
    p, inside = sb.probe(MKNOD_BODY, {"wd": sb.workdir})
    _check(p, inside)
    for k in ("mknod char 1:3", "mknod block 7:0", "mknodat char (raw syscall)"):
        assert inside[k] == "EPERM", (k, inside)
    assert inside["+mkfifo"] == "ok", inside
    return inside


def test_mknod_device(sandbox):
    _mknod_check(sandbox)


def test_mknod_device_root_agent(root_agent):
    """Control: root outside creates the device nodes (in the workdir, removed at once)."""
    _mknod_check(root_agent)
    p2, outside = root_agent.outside_probe(MKNOD_BODY, {"wd": root_agent.workdir})
    _check(p2, outside, "outside control")
    assert outside["mknod char 1:3"] == "ok" and outside["mknod block 7:0"] == "ok", outside


def test_shadow_unreadable_by_agent(sandbox):
    """/etc/shadow and friends for the workdir owner (file permissions already
    refuse it; test_root_agent_fs pairs the same reads with root outside)."""
    body = r"""
    for p in ("/etc/shadow", "/etc/gshadow", "/etc/sudoers"):
        if os.path.exists(p):
            attempt(p, lambda: read_file(p))
    attempt("+/etc/passwd", lambda: read_file("/etc/passwd"))
    """
    p, r = sandbox.probe(body)
    _check(p, r)
    assert r.pop("+/etc/passwd") == "ok"
    assert r and all(v == "EACCES" for v in r.values()), r


TERM_BODY = r"""
def spoof():
    fd = os.open(P["tty"], os.O_RDWR | os.O_NOCTTY)
    try:
        os.write(fd, P["msg"].encode())
    finally:
        os.close(fd)
attempt("open+write other terminal", spoof)
attempt("open other terminal for reading", lambda: opened(P["tty"], os.O_RDONLY | os.O_NOCTTY))
try:
    R["/dev/pts"] = sorted(os.listdir("/dev/pts"))
except OSError as e:
    R["/dev/pts"] = en(e.errno)
def new_pty():
    m, s = os.openpty()
    os.write(s, b"x")
    ok = os.read(m, 1) == b"x"
    os.close(m); os.close(s)
    return None if ok else "EIO"
attempt("+new pty from /dev/ptmx", new_pty)
"""


def _term_run(box, name, master, msg, outside=False):
    params = {"tty": name, "msg": msg}
    p, r = box.outside_probe(TERM_BODY, params) if outside else box.probe(TERM_BODY, params)
    _check(p, r, "outside control" if outside else "probe")
    time.sleep(0.1)
    try:
        arrived = os.read(master, 4096).decode(errors="replace")
    except BlockingIOError:
        arrived = ""
    return r, arrived


def test_other_terminals_of_the_user(sandbox):
    """Another terminal of the same account (an ssh session, a terminal window):
    /dev/pts/N owned by the agent's uid. Opening it would let the agent read
    the user's keystrokes there (e.g. a sudo password) and write fake output.
    Inside, /dev/pts is a new devpts instance: the host's terminals do not exist
    there (ENOENT), while new ptys work. Control: outside, the same account
    opens it and the write arrives.
    Without namespaces the host's /dev/pts is not granted as a whole: only the
    agent's own terminal is (EACCES for the other one). Known limit: a new pty's
    slave lies in the same /dev/pts, so new ptys fail there too (EACCES)."""
    master, slave = os.openpty()
    os.set_blocking(master, False)
    name = os.ttyname(slave)
    os.chown(name, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
    os.chmod(name, 0o620)
    try:
        outside, arrived_ctl = _term_run(sandbox, name, master, "CONTROL\n", outside=True)
        inside, arrived = _term_run(sandbox, name, master, "SPOOFED\n")
        alone, arrived_alone = _term_run(sandbox.without_namespaces(), name, master, "DEGRADED\n")
    finally:
        os.close(slave)
        os.close(master)
    assert outside["open+write other terminal"] == "ok" and "CONTROL" in arrived_ctl, "control"
    assert "SPOOFED" not in arrived, f"the agent wrote to another terminal {name}: {arrived!r}"
    assert inside["open+write other terminal"] == "ENOENT", inside
    assert inside["open other terminal for reading"] == "ENOENT", inside
    assert os.path.basename(name) not in inside["/dev/pts"], inside
    assert inside["+new pty from /dev/ptmx"] == "ok", inside
    assert "DEGRADED" not in arrived_alone, f"the agent wrote to another terminal: {alone}"
    assert alone["open+write other terminal"] == "EACCES", alone
    assert alone["open other terminal for reading"] == "EACCES", alone
    assert alone["+new pty from /dev/ptmx"] == "EACCES", alone


SHM_BODY = r"""
attempt("read a host /dev/shm file", lambda: read_file(P["path"]))
attempt("write a host /dev/shm file", lambda: opened(P["path"], os.O_WRONLY | os.O_APPEND))
attempt("create in host /dev/shm", lambda: opened(P["new"], os.O_WRONLY | os.O_CREAT))
try:
    R["listing"] = sorted(os.listdir("/dev/shm"))
except OSError as e:
    R["listing"] = en(e.errno)
"""


def test_host_dev_shm_not_shared(sandbox):
    """/dev/shm is the host's: a file there (same account, outside the sandbox)
    must be neither readable nor writable from inside, and the agent must not
    leave files there. Inside, /dev/shm is a private tmpfs: the host file does
    not exist there (ENOENT), and what the agent creates (POSIX shared memory,
    semaphores) lives in it and never reaches the host. Control: outside, the
    same account reads and writes it.
    Without namespaces the host's /dev/shm is not granted at all (EACCES)."""
    path = f"/dev/shm/confine-test-{_tag()}"
    write_owned(path, "shm secret", sandbox.agent, 0o600)
    new = path + "-new"
    params = {"path": path, "new": new}
    try:
        p2, outside = sandbox.outside_probe(SHM_BODY, params)
        if os.path.exists(new):
            os.unlink(new)
        p, inside = sandbox.probe(SHM_BODY, params)
        left = os.path.exists(new)
        p3, alone = sandbox.without_namespaces().probe(SHM_BODY, params)
        left_alone = os.path.exists(new)
    finally:
        for f in (path, new):
            if os.path.exists(f):
                os.unlink(f)
    _check(p2, outside, "outside control")
    _check(p, inside)
    _check(p3, alone, "probe (Landlock alone)")
    del outside["listing"]
    assert all(v == "ok" for v in outside.values()), f"control: {outside}"
    assert inside["read a host /dev/shm file"] == "ENOENT", inside
    assert inside["write a host /dev/shm file"] == "ENOENT", inside
    # creating works, in the agent's private tmpfs: nothing appears on the host
    assert inside["create in host /dev/shm"] == "ok", inside
    assert not left, "a file created inside appeared in the host's /dev/shm"
    assert inside["listing"] == [os.path.basename(new)], inside["listing"]
    del alone["listing"]
    assert alone == {k: "EACCES" for k in alone} and not left_alone, alone


# =====================================================================================
# Privileges: capabilities, no_new_privs, securebits, setuid binaries, groups
# =====================================================================================

STATUS_BODY = r'''
st = {}
with open("/proc/self/status") as f:
    for line in f:
        k, _, v = line.partition(":")
        st[k] = v.strip()
for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Groups", "Uid", "Gid"):
    R[k] = st.get(k)
libc.prctl.restype = ctypes.c_int
R["securebits"] = libc.prctl(27, 0, 0, 0, 0)
import resource
R["RLIMIT_CORE"] = list(resource.getrlimit(resource.RLIMIT_CORE))
R["setuid(0)"] = sysc(105, 0)
R["setgid(0)"] = sysc(106, 0)
'''


def test_capabilities_nnp(sandbox):
    p, inside = sandbox.probe(STATUS_BODY)
    _check(p, inside)
    p2, outside = sandbox.outside_probe(STATUS_BODY)
    _check(p2, outside)
    zero = "0000000000000000"
    assert outside["NoNewPrivs"] == "0" and outside["CapBnd"] != zero, "control"
    assert inside["NoNewPrivs"] == "1"
    assert inside["Seccomp"] == "2"
    for k in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        assert inside[k] == zero, (k, inside[k])
    # Started as root, or (started by the account) inside the user namespace where
    # the child first holds a full namespaced set: the bounding set is emptied and
    # the securebits locked either way.
    assert inside["CapBnd"] == zero, inside["CapBnd"]
    assert inside["securebits"] == 0xef, hex(inside["securebits"])
    assert inside["Uid"].split()[0] == str(sandbox.agent.pw_uid)
    assert inside["Groups"] == "", inside["Groups"]
    # In the user namespace of an unprivileged launch only the account's own ids
    # are mapped: uid/gid 0 do not exist there (EINVAL); as root, no CAP_SETUID.
    unmapped = "EINVAL" if sandbox.mode == "user" else "EPERM"
    assert inside["setuid(0)"] == unmapped and inside["setgid(0)"] == unmapped, inside
    # without namespaces, the capability drop alone refuses them (EPERM)
    p3, alone = sandbox.without_namespaces().probe(STATUS_BODY)
    _check(p3, alone, "probe (no namespaces)")
    assert alone["setuid(0)"] == "EPERM" and alone["setgid(0)"] == "EPERM", alone
    assert alone["CapEff"] == zero and alone["NoNewPrivs"] == "1", alone
    assert inside["RLIMIT_CORE"] == [0, 0], "core dumps (memory with secrets) must be off"


def test_root_agent_has_no_capabilities(root_agent):
    p, inside = root_agent.probe(STATUS_BODY)
    _check(p, inside)
    p2, outside = root_agent.outside_probe(STATUS_BODY)
    _check(p2, outside)
    zero = "0000000000000000"
    assert outside["CapEff"] != zero, "control: root outside has capabilities"
    assert inside["Uid"].split() == ["0"] * 4
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert inside[k] == zero, (k, inside[k])
    assert inside["securebits"] == 0xef and inside["NoNewPrivs"] == "1"


def test_supplementary_groups_dropped(root_sandbox):
    """root starting confine while in the disk and adm groups: the agent has none."""
    cmd = root_sandbox.exec_cmd(["grep", "^Groups:", "/proc/self/status"])
    ctl = ["setpriv", "--groups=4,6", "--", "grep", "^Groups:", "/proc/self/status"]
    outside = subprocess.run(ctl, capture_output=True, text=True)
    assert outside.stdout.split() == ["Groups:", "4", "6"], outside.stdout
    p = subprocess.run(["setpriv", "--groups=4,6", "--"] + cmd, capture_output=True, text=True,
                       cwd=root_sandbox.workdir)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["Groups:"], p.stdout


def test_setuid_binary_grants_nothing(sandbox):
    """A setuid-root copy of `id` in the workdir: euid 0 outside, nothing inside."""
    dst = os.path.join(sandbox.workdir, "suid-id")
    shutil.copy("/usr/bin/id", dst)
    os.chown(dst, 0, 0)
    os.chmod(dst, 0o4755)
    outside = sandbox.outside([dst, "-u"])
    assert outside.stdout.strip() == "0", f"control: setuid works outside: {outside}"
    inside = sandbox.run([dst, "-u"])
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.strip() == str(sandbox.agent.pw_uid), inside.stdout
    # the system's setuid tools do not help either
    su = sandbox.run(["sh", "-c", "mount -t tmpfs none /mnt; echo rc=$?"])
    assert "rc=0" not in su.stdout


# =====================================================================================
# Kernel surface: mounts, namespaces, modules, bpf, ... (seccomp + dropped caps)
# =====================================================================================

KERNEL_BODY = r'''
import mmap
def buf(n):
    return ctypes.create_string_buffer(n)
NX = b"/nonexistent-confine-probe"
def raw_clone(flags):
    sys.stdout.flush()
    r = libc.syscall(ctypes.c_long(56), ctypes.c_long(flags | 17), ctypes.c_long(0),
                     ctypes.c_void_p(None), ctypes.c_void_p(None), ctypes.c_long(0))
    if r == 0:
        os._exit(0)
    if r < 0:
        return en(ctypes.get_errno())
    os.waitpid(r, 0)
    return "ok"
def int80_getpid():
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    # push rbx; mov eax, 20 (i386 getpid); int 0x80; pop rbx; ret
    m.write(b"\x53\xb8\x14\x00\x00\x00\xcd\x80\x5b\xc3")
    f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
    return "ok" if f() == os.getpid() else "EINVAL"
def persona(v):
    old = libc.personality(0xffffffff)
    r = sysc(135, v)
    libc.personality(old)
    return r
R["mount"] = sysc(165, b"none", NX, b"tmpfs", 0, None)
R["umount2"] = sysc(166, NX, 0)
R["pivot_root"] = sysc(155, NX, NX)
R["chroot"] = sysc(161, NX)
R["open_tree"] = sysc(428, -100, NX, 0)
R["move_mount"] = sysc(429, -1, b"", -1, b"", 0xffffffff)
R["fsopen (bad flags)"] = sysc(430, b"tmpfs", 0xffff)
R["fsmount"] = sysc(432, -1, 0xffff, 0)
R["fspick"] = sysc(433, -100, NX, 0)
R["mount_setattr"] = sysc(442, -100, NX, 0xffffffff, None, 0)
R["swapon"] = sysc(167, NX, 0xffffffff)
R["swapoff"] = sysc(168, NX)
R["reboot (bad magic)"] = sysc(169, 0, 0, 0, None)
R["kexec_load"] = sysc(246, 0, 0, None, 0xffffffff)
R["kexec_file_load"] = sysc(320, -1, -1, 0, b"", 0xffffffff)
R["init_module"] = sysc(175, None, 0, b"")
R["finit_module"] = sysc(313, -1, b"", 0)
R["delete_module"] = sysc(176, b"confine_nonexistent_mod", 0)
R["bpf"] = sysc(321, 9999, buf(128), 128)
R["perf_event_open"] = sysc(298, None, 0, -1, -1, 0xffffffff)
R["userfaultfd (user-mode only)"] = sysc(323, 1)
R["io_uring_setup"] = sysc(425, 1, buf(120))
R["io_uring_enter"] = sysc(426, -1, 0, 0, 0, None, 0)
R["io_uring_register"] = sysc(427, -1, 0, None, 0)
R["keyctl (get user keyring id)"] = sysc(250, 0, -4, 0)
R["add_key (unknown type)"] = sysc(248, b"confine-no-such-type", b"x", b"x", 1, -4)
R["request_key"] = sysc(249, b"user", b"confine-nonexistent", None, 0)
R["unshare(CLONE_NEWUSER)"] = in_child(lambda: sysc(272, 0x10000000))
R["unshare(CLONE_NEWNET) in a new userns"] = in_child(lambda: sysc(272, 0x50000000))
R["unshare(CLONE_NEWNS)"] = in_child(lambda: sysc(272, 0x00020000))
R["setns"] = sysc(308, -1, 0)
R["clone(CLONE_NEWUSER)"] = raw_clone(0x10000000)
R["clone(CLONE_NEWUSER|CLONE_NEWNET)"] = raw_clone(0x50000000)
R["clone3"] = sysc(435, None, 0)
R["syslog (buffer size)"] = sysc(103, 10, None, 0)
R["syslog (read all)"] = sysc(103, 3, buf(4096), 4096)
R["iopl(4)"] = sysc(172, 4)
R["ioperm"] = sysc(173, 0, 0, 1)
R["personality(ADDR_NO_RANDOMIZE)"] = persona(0x0040000)
R["personality(READ_IMPLIES_EXEC)"] = persona(0x0400000)
R["personality(ADDR_NO_RANDOMIZE | 1<<32)"] = persona(0x0040000 | (1 << 32))
R["name_to_handle_at"] = sysc(303, -100, b"/etc/passwd", buf(136), ctypes.byref(ctypes.c_int()), 0)
R["open_by_handle_at"] = sysc(304, -100, buf(136), 0)
R["acct"] = sysc(163, NX)
R["quotactl"] = sysc(179, 0, None, 0, None)
R["settimeofday(NULL, NULL)"] = sysc(164, None, None)
R["settimeofday (invalid)"] = sysc(164, ctypes.create_string_buffer(struct.pack("qq", 0, 2000000)), None)
R["clock_settime (invalid)"] = sysc(227, 0, ctypes.create_string_buffer(struct.pack("qq", 0, 2000000000)))
R["adjtimex (read)"] = sysc(159, buf(208))
R["clock_adjtime (read)"] = sysc(305, 0, buf(208))
R["sethostname (too long)"] = sysc(170, b"x", 99999)
R["x32 getpid"] = in_child(lambda: sysc(39 | 0x40000000))
R["int 0x80 getpid"] = in_child(int80_getpid)
# positive controls
R["+personality(query)"] = sysc(135, 0xffffffff)
R["+personality(PER_LINUX)"] = sysc(135, 0)
R["+fork"] = in_child(lambda: None)
R["+getpid"] = sysc(39)
'''

KERNEL_EXPECT = {k: "EPERM" for k in (
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen (bad flags)",
    "fsmount", "fspick", "mount_setattr", "swapon", "swapoff", "reboot (bad magic)", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf", "perf_event_open",
    "userfaultfd (user-mode only)", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl (get user keyring id)", "add_key (unknown type)", "request_key",
    "unshare(CLONE_NEWUSER)", "unshare(CLONE_NEWNET) in a new userns", "unshare(CLONE_NEWNS)",
    "setns", "clone(CLONE_NEWUSER)", "clone(CLONE_NEWUSER|CLONE_NEWNET)",
    "syslog (buffer size)", "syslog (read all)", "iopl(4)", "ioperm",
    "personality(ADDR_NO_RANDOMIZE)", "personality(READ_IMPLIES_EXEC)",
    "personality(ADDR_NO_RANDOMIZE | 1<<32)", "name_to_handle_at", "open_by_handle_at", "acct",
    "quotactl", "settimeofday(NULL, NULL)", "settimeofday (invalid)", "clock_settime (invalid)",
    "adjtimex (read)", "clock_adjtime (read)", "sethostname (too long)")}
KERNEL_EXPECT.update({
    "clone3": "ENOSYS",                 # libc falls back to clone(), whose flags are checked
    "x32 getpid": "signal:31",          # SIGSYS: the process is killed
    "int 0x80 getpid": "signal:31",
    "+personality(query)": "ok", "+personality(PER_LINUX)": "ok", "+fork": "ok", "+getpid": "ok",
})


def test_kernel_surface_denied(sandbox):
    p, inside = sandbox.probe(KERNEL_BODY)
    _check(p, inside)
    assert set(inside) == set(KERNEL_EXPECT)
    bad = _mismatches(inside, KERNEL_EXPECT)
    assert not bad, "\n".join(bad)
    # Control: outside, as the same account, most of these calls behave
    # differently (the rest are capability-gated for this account; the root
    # agent test pairs every one of them with root outside).
    p2, outside = sandbox.outside_probe(KERNEL_BODY)
    _check(p2, outside, "outside control")
    differ = [k for k in KERNEL_EXPECT if not k.startswith("+") and outside[k] != inside[k]]
    assert len(differ) >= len(KERNEL_EXPECT) // 2, (differ, outside)
    for k in ("x32 getpid", "int 0x80 getpid", "clone3", "unshare(CLONE_NEWUSER)",
              "clone(CLONE_NEWUSER)", "io_uring_setup", "userfaultfd (user-mode only)",
              "keyctl (get user keyring id)", "personality(ADDR_NO_RANDOMIZE)", "bpf",
              "perf_event_open", "mount", "chroot"):
        assert outside[k] != inside[k], f"control: {k} is {outside[k]} outside too"


def test_kernel_surface_root_agent(root_agent):
    """Each call, made by root outside with harmless arguments, is not EPERM (it
    succeeds or fails on its arguments); a uid 0 agent gets EPERM for all."""
    p, inside = root_agent.probe(KERNEL_BODY)
    _check(p, inside)
    bad = _mismatches(inside, KERNEL_EXPECT)
    assert not bad, "\n".join(bad)
    p2, outside = root_agent.outside_probe(KERNEL_BODY)
    _check(p2, outside, "outside control")
    same = {k: outside[k] for k in KERNEL_EXPECT if not k.startswith("+") and outside[k] == inside[k]}
    assert not same, f"control: these behave the same outside as root: {same}"


def test_namespace_and_mount_commands(sandbox):
    """The commands a user would type: unshare -U, unshare -n, mount, umount, chroot."""
    script = ("for c in 'unshare -U true' 'unshare -Ur true' 'unshare -n true' 'unshare -rn true' "
              "'mount -t tmpfs none mnt' 'umount /proc' '/usr/sbin/chroot / true'; do "
              "$c 2>/dev/null; echo \"$c=$?\"; done")
    os.mkdir(os.path.join(sandbox.workdir, "mnt"))
    inside = sandbox.run(["sh", "-c", script])
    outside = sandbox.outside(["sh", "-c", script])
    res_in = dict(l.split("=", 1) for l in inside.stdout.splitlines())
    res_out = dict(l.split("=", 1) for l in outside.stdout.splitlines())
    assert res_out["unshare -U true"] == "0" and res_out["unshare -rn true"] == "0", \
        f"control: user namespaces work outside: {res_out}"
    bad = {k: v for k, v in res_in.items() if v == "0"}
    assert not bad, f"succeeded inside: {bad}"


def test_namespace_and_mount_commands_root_agent(root_agent):
    mnt = os.path.join(root_agent.workdir, "mnt")
    os.mkdir(mnt)
    script = ("for c in 'unshare -n true' 'unshare -m true' 'unshare -U true' "
              "'mount -t tmpfs none mnt' '/usr/sbin/chroot / true'; do "
              "$c 2>/dev/null; echo \"$c=$?\"; done")
    inside = root_agent.run(["sh", "-c", script])
    res_in = dict(l.split("=", 1) for l in inside.stdout.splitlines())
    try:
        outside = root_agent.outside(["sh", "-c", script])
    finally:
        subprocess.run(["umount", mnt], capture_output=True)
    res_out = dict(l.split("=", 1) for l in outside.stdout.splitlines())
    assert all(v == "0" for v in res_out.values()), f"control: root outside: {res_out}"
    bad = {k: v for k, v in res_in.items() if v == "0"}
    assert not bad, f"succeeded inside as uid 0: {bad}"
    assert not os.path.ismount(mnt)


# --- raw-disk ioctls on an inherited block-device stdin (seccomp, masked compare) ----

BLK_IOCTL_BODY = r'''
names = {"BLKRRPART": 0x125F, "BLKFLSBUF": 0x1261, "BLKPG": 0x1269, "BLKDISCARD": 0x1277,
         "BLKSECDISCARD": 0x127D, "BLKZEROOUT": 0x127F}
rng = ctypes.create_string_buffer(16)   # {start 0, len 0}
pg = ctypes.create_string_buffer(24)
for n, v in names.items():
    arg = pg if n == "BLKPG" else rng
    R[n] = sysc(16, 0, v, arg)
    R[n + " | 1<<32"] = sysc(16, 0, v | (1 << 32), arg)
R["+BLKGETSIZE64"] = sysc(16, 0, 0x80081272, ctypes.create_string_buffer(8))
'''


def _free_loop():
    for n in range(8):
        dev = f"/dev/loop{n}"
        try:
            with open(f"/sys/block/loop{n}/size") as f:
                if f.read().strip() == "0" and os.path.exists(dev):
                    return dev
        except OSError:
            continue
    return None


def test_block_ioctls_on_inherited_fd(sandbox):
    """stdin is a (detached) loop device opened read-only before confine started:
    Landlock's IOCTL_DEV does not cover inherited fds, so seccomp must deny the
    raw-disk ioctls, also with high bits set. Control: outside the same ioctls
    fail only with the kernel's own errors (EBADF, EACCES, ...), never EPERM."""
    dev = _free_loop()
    if dev is None:
        pytest.skip("no detached loop device")
    fd = os.open(dev, os.O_RDONLY)
    try:
        p, inside = sandbox.probe(BLK_IOCTL_BODY, stdin=fd)
        _check(p, inside)
        p2, outside = sandbox.outside_probe(BLK_IOCTL_BODY, stdin=fd)
        _check(p2, outside, "outside control")
    finally:
        os.close(fd)
    assert outside["+BLKGETSIZE64"] == "ok" and inside["+BLKGETSIZE64"] == "ok"
    for k, v in inside.items():
        if k.startswith("+"):
            continue
        assert outside[k] != "EPERM", f"control: {k} is EPERM outside too"
        assert v == "EPERM", f"{k}: {v} inside (outside: {outside[k]})"


# =====================================================================================
# Processes: signals, ptrace, /proc of processes outside
# =====================================================================================

PROC_BODY = r'''
T, OUT = P["pid"], P.get("outside", False)
# the confine supervisor's host pid, written on stdin by the test (inside a pid
# namespace getppid() is the namespace's own init, not the supervisor)
SUP = int(sys.stdin.readline()) if P.get("sup_on_stdin") else os.getppid()
R["parent is the supervisor"] = os.getppid() == SUP
R["visible pids"] = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())
def attach(pid):
    r = sysc(101, 16, pid, 0, 0)        # PTRACE_ATTACH
    if r == "ok":
        os.waitpid(pid, 0x40000000)     # __WALL: wait for the attach stop
        sysc(101, 17, pid, 0, 0)        # PTRACE_DETACH
    return r
def vm_read(pid):
    local = ctypes.create_string_buffer(8)
    iov_l = struct.pack("QQ", ctypes.addressof(local), 8)
    iov_r = struct.pack("QQ", 0x10000, 8)   # unmapped: EFAULT if the call is allowed at all
    return sysc(310, pid, ctypes.create_string_buffer(iov_l), 1, ctypes.create_string_buffer(iov_r), 1, 0)
def pidfd_then(pid, what):
    fd = libc.syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(0))
    if fd < 0:
        return "pidfd_open:" + en(ctypes.get_errno())
    try:
        if what == "signal":
            return sysc(424, fd, 0, None, 0)
        r = libc.syscall(ctypes.c_long(438), ctypes.c_long(fd), ctypes.c_long(0), ctypes.c_long(0))
        if r < 0:
            return en(ctypes.get_errno())
        os.close(r)
        return "ok"
    finally:
        os.close(fd)
attempt("kill(outside, 0)", lambda: os.kill(T, 0))
if not OUT:  # the control must not kill the process
    attempt("kill(outside, SIGTERM)", lambda: os.kill(T, signal.SIGTERM))
    attempt("kill(outside, SIGKILL)", lambda: os.kill(T, signal.SIGKILL))
    attempt("kill(supervisor, 0)", lambda: os.kill(SUP, 0))
R["pidfd_send_signal(outside, 0)"] = pidfd_then(T, "signal")
R["pidfd_getfd(outside)"] = pidfd_then(T, "getfd")
R["ptrace(ATTACH, outside)"] = attach(T)
R["process_vm_readv(outside)"] = vm_read(T)
attempt("read /proc/PID/environ", lambda: read_file("/proc/%d/environ" % T))
attempt("list /proc/PID/cwd", lambda: os.listdir("/proc/%d/cwd/" % T) and None)
attempt("list /proc/PID/root", lambda: os.listdir("/proc/%d/root/" % T) and None)
attempt("readlink /proc/PID/fd/0", lambda: os.readlink("/proc/%d/fd/0" % T) and None)
attempt("open /proc/PID/mem", lambda: opened("/proc/%d/mem" % T, os.O_RDONLY))
# positive controls: a child inside the sandbox
pid = os.fork()
if pid == 0:
    import time
    time.sleep(30)
    os._exit(0)
attempt("+read /proc/child/environ", lambda: read_file("/proc/%d/environ" % pid))
R["+ptrace(ATTACH, child)"] = attach(pid)
attempt("+kill(child, SIGTERM)", lambda: os.kill(pid, signal.SIGTERM))
os.waitpid(pid, 0)
'''

PROC_EXPECT = {   # Landlock alone (no namespaces): scope and ptrace rules say no
    "kill(outside, 0)": "EPERM", "kill(outside, SIGTERM)": "EPERM", "kill(outside, SIGKILL)": "EPERM",
    "pidfd_send_signal(outside, 0)": "EPERM", "pidfd_getfd(outside)": "EPERM",
    "ptrace(ATTACH, outside)": "EPERM", "process_vm_readv(outside)": "EPERM",
    "read /proc/PID/environ": DENIED, "list /proc/PID/cwd": DENIED, "list /proc/PID/root": DENIED,
    "readlink /proc/PID/fd/0": DENIED, "open /proc/PID/mem": DENIED, "kill(supervisor, 0)": "EPERM",
    "+read /proc/child/environ": "ok", "+ptrace(ATTACH, child)": "ok", "+kill(child, SIGTERM)": "ok",
    "parent is the supervisor": True,
}
# Every layer: in the agent's pid namespace, with its own /proc, processes
# outside do not exist (ESRCH, ENOENT) before Landlock is asked.
PROC_EXPECT_NS = dict(PROC_EXPECT, **{
    "kill(outside, 0)": "ESRCH", "kill(outside, SIGTERM)": "ESRCH", "kill(outside, SIGKILL)": "ESRCH",
    "pidfd_send_signal(outside, 0)": "pidfd_open:ESRCH", "pidfd_getfd(outside)": "pidfd_open:ESRCH",
    "ptrace(ATTACH, outside)": "ESRCH", "process_vm_readv(outside)": "ESRCH",
    "read /proc/PID/environ": "ENOENT", "list /proc/PID/cwd": "ENOENT",
    "list /proc/PID/root": "ENOENT", "readlink /proc/PID/fd/0": "ENOENT",
    "open /proc/PID/mem": "ENOENT", "kill(supervisor, 0)": "ESRCH",
    "parent is the supervisor": False,   # the parent is the namespace's init, pid 1
})


def _probe_told_supervisor(box, body, params):
    """Run a probe that reads the confine supervisor's host pid from stdin."""
    p = box.popen([PY, "-c", probe_code(body, dict(params, sup_on_stdin=True))],
                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # env/setpriv exec into confine: the Popen pid is the supervisor's
        out, err = p.communicate(f"{p.pid}\n", timeout=60)
    finally:
        p.kill()
        p.wait()
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), last_json(out)


def test_processes_outside_untouchable(sandbox, outside_sleeper):
    """`sleep` runs outside as the agent's own uid: no signal, ptrace, /proc access
    from inside, neither to it nor to the confine supervisor; all of it works from
    outside (control); a child inside can be traced and killed (positive
    control). With every layer the outside processes do not exist in the
    agent's pid namespace (ESRCH/ENOENT); with Landlock alone (no namespaces)
    its scope and ptrace rules refuse them (EPERM/EACCES)."""
    params = {"pid": outside_sleeper}
    p, inside = _probe_told_supervisor(sandbox, PROC_BODY, params)
    _check(p, inside)
    assert _alive(outside_sleeper), "the outside process was killed from inside"
    p3, alone = _probe_told_supervisor(sandbox.without_namespaces(), PROC_BODY, params)
    _check(p3, alone, "probe (Landlock alone)")
    assert _alive(outside_sleeper), "the outside process was killed from inside (Landlock alone)"
    ns = sandbox.layers == "all"          # a host condition without namespaces: Landlock's
    bad = _mismatches(inside, PROC_EXPECT_NS if ns else PROC_EXPECT)
    bad += ["Landlock alone: " + b for b in _mismatches(alone, PROC_EXPECT)]
    assert not bad, "\n".join(bad)
    # the host's processes are invisible inside (own /proc), visible without namespaces
    if ns:
        assert outside_sleeper not in inside["visible pids"] and 1 in inside["visible pids"], inside
    assert outside_sleeper in alone["visible pids"], alone["visible pids"]
    p2, outside = sandbox.outside_probe(PROC_BODY, {"pid": outside_sleeper, "outside": True})
    _check(p2, outside, "outside control")
    for k in ("kill(outside, 0)", "pidfd_send_signal(outside, 0)", "pidfd_getfd(outside)",
              "ptrace(ATTACH, outside)", "read /proc/PID/environ", "list /proc/PID/cwd",
              "readlink /proc/PID/fd/0", "open /proc/PID/mem"):
        assert outside[k] == "ok", f"control: {k} works outside: {outside[k]}"
    assert outside["process_vm_readv(outside)"] == "EFAULT", outside
    assert _alive(outside_sleeper)


ROOT_SIG_BODY = r"""
attempt("kill(root process, 0)", lambda: os.kill(P["pid"], 0))
attempt("kill(pid 1, 0)", lambda: os.kill(1, 0))
attempt("read /proc/PID/environ", lambda: read_file("/proc/%d/environ" % P["pid"]))
R["ptrace(ATTACH)"] = sysc(101, 16, P["pid"], 0, 0)
if R["ptrace(ATTACH)"] == "ok":
    sysc(101, 17, P["pid"], 0, 0)
R["pid 1 cmdline"] = open("/proc/1/cmdline", "rb").read().decode(errors="replace")
"""


def test_root_agent_cannot_signal_root_processes(root_agent, root_sleeper):
    """A uid 0 agent and root's processes (the same uid): no signal, no ptrace,
    no /proc/PID/environ. With every layer they do not exist in the agent's pid
    namespace, where pid 1 is confine's own init (signalling it is harmless:
    the kernel ignores signals it has no handler for); with Landlock alone
    (no namespaces) its scope and ptrace rules refuse them, host init included."""
    params = {"pid": root_sleeper}
    p, inside = root_agent.probe(ROOT_SIG_BODY, params)
    _check(p, inside)
    p3, alone = root_agent.without_namespaces().probe(ROOT_SIG_BODY, params)
    _check(p3, alone, "probe (Landlock alone)")
    p2, outside = root_agent.outside_probe(ROOT_SIG_BODY, params)
    _check(p2, outside)
    host_init = outside.pop("pid 1 cmdline")
    assert all(v == "ok" for v in outside.values()), f"control: {outside}"
    assert alone.pop("pid 1 cmdline") == host_init, "control: without namespaces pid 1 is the host's"
    assert alone == {"kill(root process, 0)": "EPERM", "kill(pid 1, 0)": "EPERM",
                     "read /proc/PID/environ": "EACCES", "ptrace(ATTACH)": "EPERM"}, alone
    ns_init = inside.pop("pid 1 cmdline")
    assert ns_init != host_init and "confine" in ns_init, ns_init
    assert inside == {"kill(root process, 0)": "ESRCH", "kill(pid 1, 0)": "ok",
                      "read /proc/PID/environ": "ENOENT", "ptrace(ATTACH)": "ESRCH"}, inside
    assert _alive(root_sleeper)


INIT_BODY = r"""
def environ(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return "LEAKED" if P["canary"].encode() in f.read() else "no canary"
R["own environment"] = "LEAKED" if P["canary"] in os.environ.get("OPENAI_API_KEY", "") else "no canary"
attempt("read the parent's environ", lambda: environ(os.getppid()))
r = sysc(101, 0x4206, os.getppid(), 0, 0)      # PTRACE_SEIZE: does not stop it
if r == "ok":
    sysc(101, 17, os.getppid(), 0, 0)
R["ptrace the parent"] = r
"""


def test_agent_cannot_read_or_trace_confines_own_processes(request, sandbox):
    """The environment confine was started with (API keys the allowlist keeps
    from the agent) must not be readable through confine's own processes, and
    the agent must not be able to trace them. Without namespaces the agent's
    parent is the supervisor, outside its Landlock domain (EACCES/EPERM). In a
    pid namespace the parent is confine's init (pid 1), forked from the
    supervisor and inside the agent's domain: it must not be readable either.
    KNOWN CONFINE BUG (started unprivileged): the init stays dumpable, so the
    agent reads its /proc/1/environ (the launcher's full environment) and can
    ptrace-stop it, so confine never ends and left-over processes keep running.
    (Fixed: the init makes itself non-dumpable before forking the agent.)"""
    canary = "sk-confine-canary-" + _tag()
    env = [f"OPENAI_API_KEY={canary}"]
    p3, alone = sandbox.without_namespaces().probe(INIT_BODY, {"canary": canary}, env_extra=env)
    _check(p3, alone, "probe (no namespaces)")
    assert alone == {"own environment": "no canary", "read the parent's environ": "EACCES",
                     "ptrace the parent": "EPERM"}, alone
    p, inside = sandbox.probe(INIT_BODY, {"canary": canary}, env_extra=env)
    _check(p, inside)
    assert inside["own environment"] == "no canary", inside
    assert inside["read the parent's environ"] in DENIED, inside
    assert inside["ptrace the parent"] in DENIED, inside


def test_kill_command_outside(sandbox, outside_sleeper):
    """`kill` typed in a confined shell fails; the process survives. Every layer:
    no such process (pid namespace); Landlock alone: not permitted (scope)."""
    for box, msg in ((sandbox, "No such process"), (sandbox.without_namespaces(), "ermitted")):
        r = box.run(["sh", "-c", f"kill -9 {outside_sleeper}; echo rc=$?"])
        assert r.stdout == "rc=1\n" and msg in r.stderr, (box.layers, r.stdout, r.stderr)
        assert _alive(outside_sleeper)
    r = sandbox.outside(["kill", "-0", str(outside_sleeper)])
    assert r.returncode == 0, "control"


# =====================================================================================
# Network
# =====================================================================================

NET_BODY = r'''
PORT, ABS = P["port"], P["abstract"].encode()
def tcp_connect(host, port, fam=socket.AF_INET):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
    finally:
        s.close()
def tcp_fastopen(port, msg=False):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)   # blocking: connect, then send
    try:   # MSG_FASTOPEN: an implicit connect that Landlock's connect hook does not see
        if msg:
            s.sendmsg([b"x"], [], 0x20000000, ("127.0.0.1", port))
        else:
            s.sendto(b"x", 0x20000000, ("127.0.0.1", port))
    finally:
        s.close()
def tcp_bind(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
    finally:
        s.close()
def udp_send():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(b"x", ("127.0.0.1", P["udp"]))
    finally:
        s.close()
def sock(fam, typ, proto=0):
    socket.socket(fam, typ, proto).close()
def raw_socket(fam, typ, proto=0):
    fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(fam), ctypes.c_long(typ), ctypes.c_long(proto))
    if fd < 0:
        return en(ctypes.get_errno())
    os.close(fd)
    return "ok"
def abstract_connect(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_UNIX, kind)
    try:
        if kind == socket.SOCK_STREAM:
            s.connect(b"\0" + ABS)
        else:
            s.sendto(b"x", b"\0" + ABS + b"-dgram")
    finally:
        s.close()
def abstract_self():
    name = b"\0" + ABS + b"-inside-%d" % os.getpid()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(name)
    srv.listen(1)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(name)
    c.close(); srv.close()
attempt("TCP connect 127.0.0.1:listener", lambda: tcp_connect("127.0.0.1", PORT))
attempt("TCP connect ::ffff:127.0.0.1:listener", lambda: tcp_connect("::ffff:127.0.0.1", PORT, socket.AF_INET6))
attempt("TCP sendto MSG_FASTOPEN 127.0.0.1:listener", lambda: tcp_fastopen(PORT))
attempt("TCP sendmsg MSG_FASTOPEN 127.0.0.1:listener", lambda: tcp_fastopen(PORT, msg=True))
attempt("TCP bind 127.0.0.1:free port", lambda: tcp_bind(P["free"]))
attempt("TCP bind 127.0.0.1:0", lambda: tcp_bind(0))
attempt("UDP socket+sendto", udp_send)
attempt("UDP6 socket", lambda: sock(socket.AF_INET6, socket.SOCK_DGRAM))
attempt("UDP socket SOCK_NONBLOCK|SOCK_CLOEXEC", lambda: sock(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC))
attempt("ICMP ping socket", lambda: sock(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP))
attempt("raw IP socket", lambda: sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
attempt("packet socket", lambda: sock(17, socket.SOCK_RAW, 0))
R["packet socket, family | 1<<32"] = raw_socket(17 | (1 << 32), 3, 0)
attempt("MPTCP socket", lambda: sock(socket.AF_INET, socket.SOCK_STREAM, 262))
attempt("SCTP socket", lambda: sock(socket.AF_INET, socket.SOCK_STREAM, 132))
attempt("vsock socket", lambda: sock(40, socket.SOCK_STREAM))
attempt("AF_ALG socket", lambda: sock(38, socket.SOCK_SEQPACKET))
attempt("abstract unix connect (outside listener)", abstract_connect)
attempt("abstract unix sendto (outside dgram)", lambda: abstract_connect(socket.SOCK_DGRAM))
attempt("+abstract unix socket inside", abstract_self)
attempt("+TCP socket()", lambda: sock(socket.AF_INET, socket.SOCK_STREAM))
attempt("+unix socketpair", lambda: [s.close() for s in socket.socketpair()] and None)
'''

NET_EXPECT = {
    "TCP connect 127.0.0.1:listener": "EACCES",
    "TCP connect ::ffff:127.0.0.1:listener": "EACCES",
    # the unix-socket mediator drops the address of a stream sendto: EINVAL, no SYN
    "TCP sendto MSG_FASTOPEN 127.0.0.1:listener": ("EACCES", "EPERM", "EOPNOTSUPP", "EINVAL"),
    "TCP sendmsg MSG_FASTOPEN 127.0.0.1:listener": ("EACCES", "EPERM", "EOPNOTSUPP", "EINVAL"),
    "TCP bind 127.0.0.1:free port": "EACCES",
    "TCP bind 127.0.0.1:0": "EACCES",
    "UDP socket+sendto": "EPERM",
    "UDP6 socket": "EPERM",
    "UDP socket SOCK_NONBLOCK|SOCK_CLOEXEC": "EPERM",
    "ICMP ping socket": "EPERM",
    "raw IP socket": "EPERM",
    "packet socket": "EPERM",
    "packet socket, family | 1<<32": "EPERM",
    "MPTCP socket": "EPERM",
    "SCTP socket": "EPERM",
    "vsock socket": "EPERM",
    "AF_ALG socket": "EPERM",
    "abstract unix connect (outside listener)": "EPERM",
    "abstract unix sendto (outside dgram)": "EPERM",
    "+abstract unix socket inside": "ok",
    "+TCP socket()": "ok",
    "+unix socketpair": "ok",
}
# With every layer the default profile (no TCP port) has a network namespace of its
# own: outside abstract names do not exist there. Landlock's scoping alone refuses
# them with EPERM (checked too, in test_network_denied).
ABSTRACT = ("abstract unix connect (outside listener)", "abstract unix sendto (outside dgram)")
NET_EXPECT_NETNS = dict(NET_EXPECT, **{k: "ECONNREFUSED" for k in ABSTRACT})
# Work outside as the unprivileged account (the rest need CAP_NET_RAW / kernel support;
# the root agent test pairs them with root).
NET_USER_CONTROLS = ("TCP connect 127.0.0.1:listener", "TCP sendto MSG_FASTOPEN 127.0.0.1:listener",
                     "TCP sendmsg MSG_FASTOPEN 127.0.0.1:listener",
                     "TCP bind 127.0.0.1:free port", "TCP bind 127.0.0.1:0", "UDP socket+sendto",
                     "UDP socket SOCK_NONBLOCK|SOCK_CLOEXEC", "abstract unix connect (outside listener)",
                     "abstract unix sendto (outside dgram)", "TCP connect ::ffff:127.0.0.1:listener")


@pytest.fixture
def listeners():
    """TCP listener on 127.0.0.1, a UDP socket, abstract unix stream + dgram
    listeners, all in the test process (outside any sandbox)."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    name = "confine-test-" + _tag()
    ab = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ab.bind(b"\0" + name.encode())
    ab.listen(16)
    abd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    abd.bind(b"\0" + name.encode() + b"-dgram")
    tcp2 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp2.bind(("127.0.0.1", 0))
    tcp2.listen(16)
    free = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    free.bind(("127.0.0.1", 0))
    free_port = free.getsockname()[1]
    free.close()
    params = {"port": tcp.getsockname()[1], "udp": udp.getsockname()[1], "abstract": name,
              "free": free_port, "port2": tcp2.getsockname()[1]}
    yield params, {"tcp": tcp, "udp": udp, "abstract": ab, "abstract-dgram": abd, "tcp2": tcp2}
    for s in (tcp, udp, ab, abd, tcp2):
        s.close()


def _arrived(socks) -> list[str]:
    """What reached the outside listeners (nothing may, from inside)."""
    got = []
    for name, s in socks.items():
        s.setblocking(False)
        try:
            if s.type == socket.SOCK_STREAM:
                c, _ = s.accept()
                c.close()
            else:
                s.recv(100)
            got.append(name)
        except BlockingIOError:
            pass
    return got


INET_SOCKETS = ("UDP socket+sendto", "UDP6 socket", "UDP socket SOCK_NONBLOCK|SOCK_CLOEXEC",
                "ICMP ping socket", "raw IP socket", "MPTCP socket", "SCTP socket",
                "+TCP socket()")


def _condition_abi(sb) -> int | None:
    """The Landlock ABI a tests/conditions launcher caps the run at, if any."""
    w = list(getattr(sb, "wrap", ()))
    return int(w[w.index("--abi") + 1]) if "--abi" in w else None


def _net_expect(sb, expect: dict, alone: bool) -> dict:
    """What the network probe meets under a host condition: below ABI 4 seccomp
    refuses IPv4/IPv6 sockets outright (EACCES: no port is granted and Landlock
    cannot filter TCP); below ABI 6 without namespaces abstract addresses are
    refused altogether, the run's own too (a named difference)."""
    abi, out = _condition_abi(sb), dict(expect)
    if abi is not None and abi < 4:
        out.update({k: "EACCES" for k in INET_SOCKETS})
    if abi is not None and abi < 6 and (alone or sb.layers != "all"):
        out["+abstract unix socket inside"] = "EPERM"
    return out


def test_network_denied(sandbox, listeners):
    listeners, socks = listeners
    p, inside = sandbox.probe(NET_BODY, listeners)
    _check(p, inside)
    # no namespaces (tests/conditions' no-userns): no network namespace of its own either
    bad = _mismatches(inside, _net_expect(sandbox, NET_EXPECT_NETNS if sandbox.layers == "all"
                                          else NET_EXPECT, False))
    assert _arrived(socks) == [], "a connection or datagram from inside reached a listener"
    p3, alone = sandbox.without_namespaces().probe(NET_BODY, listeners)
    _check(p3, alone, "probe (Landlock alone)")
    bad += ["Landlock alone: " + b for b in _mismatches(alone, _net_expect(sandbox, NET_EXPECT,
                                                                           True))]
    assert _arrived(socks) == [], "a connection from inside (Landlock alone) reached a listener"
    p2, outside = sandbox.outside_probe(NET_BODY, listeners)
    _check(p2, outside, "outside control")
    for k in NET_USER_CONTROLS:
        assert outside[k] == "ok", f"control: {k} works outside: {outside[k]}"
    assert not bad, "\n".join(bad)


def test_network_root_agent(root_agent, listeners):
    listeners, socks = listeners
    p, inside = root_agent.probe(NET_BODY, listeners)
    _check(p, inside)
    assert _arrived(socks) == [], "a connection or datagram from inside reached a listener"
    p2, outside = root_agent.outside_probe(NET_BODY, listeners)
    _check(p2, outside, "outside control")
    for k in ("raw IP socket", "packet socket", "packet socket, family | 1<<32") + NET_USER_CONTROLS:
        assert outside[k] == "ok", f"control: {k} works outside as root: {outside[k]}"
    bad = _mismatches(inside, NET_EXPECT_NETNS)
    assert not bad, "\n".join(bad)


LISTEN_CODE = r"""
import json, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
try:
    s.listen(1)                     # no bind(): the kernel picks an ephemeral port
except OSError as e:
    print(json.dumps({"listen": e.errno}), flush=True)
    sys.exit(0)
print(json.dumps({"listen": "ok", "port": s.getsockname()[1]}), flush=True)
s.settimeout(10)
try:
    c, _ = s.accept()
    print(json.dumps({"accepted": c.recv(100).decode()}), flush=True)
except OSError as e:
    print(json.dumps({"accepted": None, "error": str(e)}), flush=True)
"""


def _listen_and_connect(cmd, cwd):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        first = json.loads(p.stdout.readline() or "{}")
        if first.get("listen") == "ok":
            with socket.create_connection(("127.0.0.1", first["port"]), timeout=5) as c:
                c.sendall(b"inbound")
        out, err = p.communicate(timeout=15)
    finally:
        p.kill()
        p.wait()
    return first, last_json(out)


def test_tcp_listen_without_bind(sandbox):
    """listen() on an unbound TCP socket auto-binds an ephemeral port, without
    bind(). With no bind_tcp grant the agent must not accept inbound TCP
    connections. Control: outside, the same program accepts one."""
    first_out, second_out = _listen_and_connect(
        sandbox.outside_cmd([PY, "-c", LISTEN_CODE]), sandbox.workdir)
    assert second_out == {"accepted": "inbound"}, f"control: {first_out} {second_out}"
    first, second = _listen_and_connect(sandbox.exec_cmd([PY, "-c", LISTEN_CODE]), sandbox.workdir)
    assert first.get("listen") != "ok", \
        f"a confined agent with no network grants listens on TCP port {first.get('port')} " \
        f"and accepted an inbound connection: {second}"


def test_connect_tcp_profile_grant(sandbox, listeners):
    """Positive control: a profile granting connect_tcp to one listener's port
    makes that connect work; a second listener on another port stays
    unreachable, also through TCP Fast Open (sendto/sendmsg with MSG_FASTOPEN
    connect without connect(), which Landlock's connect hook does not see)."""
    listeners, socks = listeners
    prof_dir = tempfile.mkdtemp(prefix="confine-prof-", dir="/tmp")
    os.chmod(prof_dir, 0o755)
    prof = os.path.join(prof_dir, "tcp.yaml")
    with open(prof, "w") as f:
        f.write(f"extends: default\nnetwork:\n  connect_tcp: [{listeners['port']}]\n")
    os.chmod(prof, 0o644)
    body = r"""
    def tcp_connect(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect(("127.0.0.1", port))
        finally:
            s.close()
    def tcp_fastopen(port, msg=False):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if msg:
                s.sendmsg([b"x"], [], 0x20000000, ("127.0.0.1", port))
            else:
                s.sendto(b"x", 0x20000000, ("127.0.0.1", port))
        finally:
            s.close()
    attempt("granted port", lambda: tcp_connect(P["port"]))
    attempt("other port", lambda: tcp_connect(P["port2"]))
    attempt("other port, TCP Fast Open (sendto)", lambda: tcp_fastopen(P["port2"]))
    attempt("other port, TCP Fast Open (sendmsg)", lambda: tcp_fastopen(P["port2"], True))
    """
    try:
        p, plain = sandbox.probe(body, listeners)
        _check(p, plain)
        assert _arrived(socks) == [], "nothing may arrive without a grant"
        p, r = sandbox.probe(body, listeners, "-p", prof)
        _check(p, r)
        arrived = _arrived(socks)
        p, outside = sandbox.outside_probe(body, listeners)
        _check(p, outside)
        _arrived(socks)
    finally:
        shutil.rmtree(prof_dir, ignore_errors=True)
    assert all(v == "ok" for v in outside.values()), f"control: {outside}"
    assert plain["granted port"] == "EACCES", plain
    assert r["granted port"] == "ok", r
    assert r["other port"] == "EACCES", r
    assert "tcp2" not in arrived, f"a connection reached the non-granted port: {r}"
    assert arrived == ["tcp"], arrived


# =====================================================================================
# Terminal: TIOCSTI / TIOCLINUX on the controlling terminal
# =====================================================================================

TTY_BODY = r'''
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
def sti(fd, req, ch):
    c = ctypes.c_char(ch)
    return sysc(16, fd, req, ctypes.byref(c))
R["isatty"] = os.isatty(0)
R["TIOCSTI"] = sti(0, TIOCSTI, b"Q")
R["TIOCSTI | 1<<32"] = sti(0, TIOCSTI | (1 << 32), b"W")
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    R["+open /dev/tty"] = "ok"
    R["TIOCSTI on /dev/tty"] = sti(fd, TIOCSTI, b"E")
    os.close(fd)
except OSError as e:
    R["+open /dev/tty"] = en(e.errno)
sub = ctypes.c_char(b"\x03")   # TIOCL_PASTESEL
R["TIOCLINUX"] = sysc(16, 0, TIOCLINUX, ctypes.byref(sub))
'''

DRAIN = r'''
import os, select, termios
fd = 0
old = termios.tcgetattr(fd)
new = termios.tcgetattr(fd)
new[3] &= ~(termios.ICANON | termios.ECHO)
new[6][termios.VMIN] = 0
new[6][termios.VTIME] = 0
termios.tcsetattr(fd, termios.TCSANOW, new)
data = b""
while select.select([fd], [], [], 0.3)[0]:
    d = os.read(fd, 1024)
    if not d:
        break
    data += d
termios.tcsetattr(fd, termios.TCSANOW, old)
print("DRAINED=" + repr(data.decode("latin-1")))
'''


def _tty_run(cmd: list[str], cwd: str):
    line = shlex.join(cmd) + "; " + shlex.join([PY, "-c", DRAIN])
    status, out = pty_run(["sh", "-c", line], timeout=30, cwd=cwd)
    text = out.decode(errors="replace").replace("\r", "")
    # echoed injected bytes may precede the JSON on its line
    data = last_json("\n".join(l[l.index("{"):] for l in text.splitlines() if "{" in l))
    drained = [l for l in text.splitlines() if l.startswith("DRAINED=")]
    return data, drained[-1][len("DRAINED="):] if drained else None, text


def test_tiocsti_blocked_under_pty(sandbox):
    """confine runs on a pty (its controlling terminal). Pushing input into it
    (TIOCSTI, also with high bits set, also via /dev/tty) fails and nothing
    reaches the shell that runs next; the same probe outside injects."""
    code = probe_code(TTY_BODY)
    inside, drained_in, text = _tty_run(sandbox.exec_cmd([PY, "-c", code]), sandbox.workdir)
    assert inside is not None, text
    outside, drained_out, text2 = _tty_run(sandbox.outside_cmd([PY, "-c", code]), sandbox.workdir)
    assert outside is not None, text2
    assert outside["TIOCSTI"] == "ok" and outside["TIOCSTI | 1<<32"] == "ok", \
        f"control: TIOCSTI works outside: {outside}"
    assert "Q" in drained_out and "W" in drained_out, f"control: injected bytes arrive: {drained_out}"
    assert outside["TIOCLINUX"] != "EPERM"
    assert inside["isatty"] is True and inside["+open /dev/tty"] == "ok", inside
    for k in ("TIOCSTI", "TIOCSTI | 1<<32", "TIOCSTI on /dev/tty", "TIOCLINUX"):
        assert inside[k] == "EPERM", (k, inside)
    assert drained_in == "''", f"bytes reached the terminal after confine exited: {drained_in}"
