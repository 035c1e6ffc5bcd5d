"""Real-kernel tests for confine.kernel.caps (no mocks).

Every step that changes credentials runs in a forked child, which sends its
observations back to the test through a pipe as JSON; the assertions run in
the parent.  Root-only tests are skipped with a reason when not root.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
from childrun import fork_json

from confine.kernel import caps

NOBODY = 65534  # nobody / nogroup on Debian and Ubuntu
CAP_CHOWN = 0
CAP_SETUID = 7
CAP_NET_BIND_SERVICE = 10

IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(
    not IS_ROOT, reason="needs root: switching uid and locking securebits need CAP_SETUID/CAP_SETPCAP"
)


# --- helpers ----------------------------------------------------------------

def run_in_child(fn, timeout: float = 5.0) -> dict:
    """Run fn() in a forked child; return {"ok": True, "value": ...} or the error."""
    return fork_json(fn, timeout)


def value_of(res: dict):
    assert res["ok"], f"child failed: {res.get('tb') or res.get('msg')}"
    return res["value"]


def attempt(fn) -> int | None:
    """errno of fn()'s OSError, or None if it succeeded."""
    try:
        fn()
    except OSError as e:
        return e.errno
    return None


def parse_status(text: str) -> dict:
    """Uid/Gid lists, Cap* ints and NoNewPrivs from a /proc/PID/status text."""
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid"):
            out[key] = [int(x) for x in value.split()]
        elif key.startswith("Cap"):
            out[key] = int(value.strip(), 16)
        elif key == "NoNewPrivs":
            out[key] = int(value.strip())
    return out


def plain_switch_to_nobody() -> None:
    """Become nobody the ordinary way: the kernel's setuid fixup drops caps."""
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)


CAP_SETS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


@pytest.fixture
def shared_tmp():
    """A temp dir that uid 65534 can traverse (pytest's tmp_path is 0700)."""
    d = tempfile.mkdtemp(prefix="confine-caps-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def suid_cat(shared_tmp):
    """A root-owned setuid copy of cat, proven to work here as a setuid binary.

    cat is used instead of id because `cat /proc/self/status` prints the exec'd
    process's own uids *and* capability sets.
    """
    path = os.path.join(shared_tmp, "cat")
    shutil.copy2("/usr/bin/cat", path)
    os.chown(path, 0, 0)
    os.chmod(path, 0o4755)

    # Control: an ordinary unprivileged process running it does get euid 0.
    # Otherwise (nosuid mount, NNP already set on pytest, ...) the real test
    # below would pass for the wrong reason.
    def control():
        plain_switch_to_nobody()
        return subprocess.run([path, "/proc/self/status"], capture_output=True, text=True, check=True).stdout
    st = parse_status(value_of(run_in_child(control)))
    if st["Uid"][1] != 0:
        pytest.skip(f"setuid bit has no effect in {shared_tmp} (nosuid mount or no_new_privs already set)")
    return path


# --- small pieces ---------------------------------------------------------------

def test_last_cap_matches_kernel():
    with open("/proc/sys/kernel/cap_last_cap") as f:
        assert caps.last_cap() == int(f.read())
    # The bounding set never holds a bit above last_cap.
    assert caps.status()["CapBnd"] >> (caps.last_cap() + 1) == 0


def test_status_agrees_with_capget():
    st = caps.status()
    assert set(st) >= {*CAP_SETS, "NoNewPrivs", "Seccomp"}
    assert (st["CapEff"], st["CapPrm"], st["CapInh"]) == caps.capget()


def test_securebits_constants():
    assert caps.LOCKED_SECUREBITS == 0xEF
    assert caps.LOCKED_SECUREBITS & caps.SECBIT_KEEP_CAPS == 0


def test_verify_dropped_reports_what_is_left():
    caps.verify_dropped({k: 0 for k in CAP_SETS})
    with pytest.raises(OSError) as ei:
        caps.verify_dropped({**{k: 0 for k in CAP_SETS}, "CapEff": 1 << CAP_SETUID})
    assert ei.value.errno == errno.EPERM and "CapEff=0x80" in str(ei.value)


def test_no_new_privs_set_and_read_back():
    def body():
        before = caps.get_no_new_privs()
        caps.set_no_new_privs()
        return before, caps.get_no_new_privs(), caps.status()["NoNewPrivs"]
    before, after, proc = value_of(run_in_child(body))
    assert after is True and proc == 1
    if not before:  # pytest itself may already run under NNP; then nothing to compare
        assert before is False


def test_dumpable_set_and_read_back():
    def body():
        caps.set_dumpable(False)
        off = caps.get_dumpable()
        caps.set_dumpable(True)
        return off, caps.get_dumpable()
    assert value_of(run_in_child(body)) == [False, True]


def test_pdeathsig_kills_child_when_parent_exits():
    """harness (subreaper) -> A -> B; B sets PDEATHSIG=SIGKILL; A exits; B must die.

    The harness is a child subreaper, so the orphaned B is reparented to it and
    it can waitpid() B: this also proves set_child_subreaper().
    """
    def harness():
        caps.set_child_subreaper()
        to_harness_r, to_harness_w = os.pipe()
        a = os.fork()
        if a == 0:  # A
            try:
                ready_r, ready_w = os.pipe()
                b = os.fork()
                if b == 0:  # B
                    try:
                        caps.set_pdeathsig(signal.SIGKILL)
                        os.write(ready_w, str(caps.get_pdeathsig()).encode())
                        time.sleep(30)
                    finally:
                        os._exit(0)
                sig = os.read(ready_r, 16).decode()  # B has its death signal set
                os.write(to_harness_w, f"{b} {sig}".encode())
            finally:
                os._exit(0)  # A exits: the kernel should now SIGKILL B
        os.close(to_harness_w)
        b_pid, b_sig = (int(x) for x in os.read(to_harness_r, 64).split())
        os.waitpid(a, 0)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            pid, st = os.waitpid(b_pid, os.WNOHANG)
            if pid:
                return {"pdeathsig": b_sig, "signaled": os.WIFSIGNALED(st),
                        "sig": os.WTERMSIG(st) if os.WIFSIGNALED(st) else None}
            time.sleep(0.01)
        os.kill(b_pid, signal.SIGKILL)
        os.waitpid(b_pid, 0)
        return {"pdeathsig": b_sig, "signaled": False, "sig": "still alive after 3s"}

    res = value_of(run_in_child(harness))
    assert res["pdeathsig"] == signal.SIGKILL
    assert res["signaled"] and res["sig"] == signal.SIGKILL, res


# --- root: switch user + drop everything ------------------------------------

@root_only
def test_switch_user_then_drop_all_zeroes_everything():
    def body():
        caps.set_pdeathsig(signal.SIGKILL)
        caps.switch_user(NOBODY, NOBODY)
        mid = caps.status()  # NO_SETUID_FIXUP: caps survive the uid change
        notes = caps.drop_all(privileged=True)
        return {
            "mid_eff": mid["CapEff"], "notes": notes, "status": caps.status(),
            "securebits": caps.get_securebits(), "resuid": os.getresuid(),
            "resgid": os.getresgid(), "groups": os.getgroups(),
            "pdeathsig": caps.get_pdeathsig(), "capget": caps.capget(),
        }
    r = value_of(run_in_child(body))
    assert r["mid_eff"] & (1 << caps.CAP_SETPCAP), "switch_user lost CAP_SETPCAP before drop_all"
    assert r["notes"] == []
    assert {k: r["status"][k] for k in CAP_SETS} == dict.fromkeys(CAP_SETS, 0)
    assert r["capget"] == [0, 0, 0]
    assert r["securebits"] == caps.LOCKED_SECUREBITS == 0xEF
    assert r["resuid"] == [NOBODY] * 3 and r["resgid"] == [NOBODY] * 3
    assert r["groups"] == []
    # The uid change reset the death signal in the kernel; switch_user restored it.
    assert r["pdeathsig"] == signal.SIGKILL


@root_only
def test_after_drop_nothing_can_be_regained():
    def body():
        caps.switch_user(NOBODY, NOBODY)
        caps.drop_all(privileged=True)
        return {
            "setuid(0)": attempt(lambda: os.setuid(0)),
            "setresuid(0,0,0)": attempt(lambda: os.setresuid(0, 0, 0)),
            "setgroups([0])": attempt(lambda: os.setgroups([0])),
            "PR_CAPBSET_DROP": attempt(caps.drop_bounding_set),
            "capset raise CAP_SETUID": attempt(
                lambda: caps.capset(1 << CAP_SETUID, 1 << CAP_SETUID, 0)),
            "capset raise inheritable": attempt(
                lambda: caps.capset(0, 0, 1 << CAP_NET_BIND_SERVICE)),
            "ambient raise": attempt(lambda: caps._prctl_call(
                "ambient", caps.PR_CAP_AMBIENT, caps.PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE)),
            "unlock securebits": attempt(lambda: caps.set_securebits(0)),
            "set KEEP_CAPS": attempt(
                lambda: caps.set_securebits(caps.LOCKED_SECUREBITS | caps.SECBIT_KEEP_CAPS)),
            "status": caps.status(),
        }
    r = value_of(run_in_child(body))
    st = r.pop("status")
    assert r == dict.fromkeys(r, errno.EPERM)
    assert {k: st[k] for k in CAP_SETS} == dict.fromkeys(CAP_SETS, 0)


@root_only
def test_setuid_root_binary_does_not_grant_root(suid_cat):
    """The launcher's steps 5-7: switch_user, drop_all, no_new_privs, then exec."""
    def body():
        caps.switch_user(NOBODY, NOBODY)
        caps.drop_all(privileged=True)
        caps.set_no_new_privs()
        return subprocess.run([suid_cat, "/proc/self/status"], capture_output=True,
                              text=True, check=True).stdout
    st = parse_status(value_of(run_in_child(body)))
    assert st["Uid"] == [NOBODY] * 4, st["Uid"]  # real, effective, saved, fs
    assert st["Gid"] == [NOBODY] * 4
    assert {k: st[k] for k in CAP_SETS} == dict.fromkeys(CAP_SETS, 0)
    assert st["NoNewPrivs"] == 1


@root_only
def test_setuid_root_binary_without_nnp_gets_euid0_but_no_caps(suid_cat):
    """Why no_new_privs is still needed after drop_all.

    Locked NOROOT and an empty bounding set keep the setuid-root exec from
    gaining any capability, but the setuid *bit* still makes euid 0 (enough to
    write root-owned 0644 files).  Only no_new_privs (previous test) stops that.
    """
    def body():
        caps.switch_user(NOBODY, NOBODY)
        caps.drop_all(privileged=True)
        return subprocess.run([suid_cat, "/proc/self/status"], capture_output=True,
                              text=True, check=True).stdout
    st = parse_status(value_of(run_in_child(body)))
    assert st["Uid"][0] == NOBODY and st["Uid"][1] == 0
    assert {k: st[k] for k in CAP_SETS} == dict.fromkeys(CAP_SETS, 0)


@root_only
def test_drop_all_staying_uid0_leaves_root_powerless(shared_tmp):
    """`--user root`: uid stays 0 but with no capabilities at all."""
    victim = os.path.join(shared_tmp, "other-users-secret")
    with open(victim, "w") as f:
        f.write("secret\n")
    os.chown(victim, NOBODY, NOBODY)
    os.chmod(victim, 0o600)
    with open(victim, "a"):  # control: root with caps can write it
        pass

    def body():
        notes = caps.drop_all(privileged=True)
        exec_status = subprocess.run(["/bin/cat", "/proc/self/status"], capture_output=True,
                                     text=True, check=True).stdout
        exec_id = subprocess.run(["/usr/bin/id", "-u"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        return {
            "notes": notes, "resuid": os.getresuid(), "status": caps.status(),
            "securebits": caps.get_securebits(),
            "write": attempt(lambda: open(victim, "a").close()),
            "read": attempt(lambda: open(victim).close()),
            "chown": attempt(lambda: os.chown(victim, 0, 0)),
            "exec_status": exec_status, "exec_id": exec_id,
        }
    r = value_of(run_in_child(body))
    assert r["notes"] == []
    assert r["resuid"] == [0, 0, 0]
    assert {k: r["status"][k] for k in CAP_SETS} == dict.fromkeys(CAP_SETS, 0)
    assert r["securebits"] == caps.LOCKED_SECUREBITS
    assert r["write"] == errno.EACCES  # no CAP_DAC_OVERRIDE
    assert r["read"] == errno.EACCES   # no CAP_DAC_READ_SEARCH
    assert r["chown"] == errno.EPERM   # no CAP_CHOWN
    # exec as uid 0 grants nothing: NOROOT is locked and the bounding set is empty.
    ex = parse_status(r["exec_status"])
    assert ex["Uid"] == [0, 0, 0, 0]
    assert {k: ex[k] for k in CAP_SETS} == dict.fromkeys(CAP_SETS, 0)
    assert r["exec_id"] == "0"


# --- unprivileged start --------------------------------------------------------

def test_drop_all_unprivileged_notes_bounding_set():
    """Started without root (as root: become nobody the plain way first)."""
    def body():
        before = None
        if IS_ROOT:
            eff, prm, _ = caps.capget()
            # An inheritable bit survives the plain uid switch (the fixup only
            # clears permitted/effective/ambient): drop_all must clear it.
            caps.capset(eff, prm, 1 << CAP_NET_BIND_SERVICE)
            plain_switch_to_nobody()
            before = caps.status()
        notes = caps.drop_all(privileged=False)
        return {"before": before, "notes": notes, "status": caps.status()}
    r = value_of(run_in_child(body))
    if IS_ROOT:
        assert r["before"]["CapInh"] == 1 << CAP_NET_BIND_SERVICE
        assert r["before"]["CapPrm"] == r["before"]["CapEff"] == 0
    st = r["status"]
    assert {k: st[k] for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")} == dict.fromkeys(
        ("CapInh", "CapPrm", "CapEff", "CapAmb"), 0)
    if r["notes"]:
        assert r["notes"] == [caps.BOUNDING_SET_NOTE]
        assert st["CapBnd"] != 0  # left as is, as the note says
    else:  # only possible if this process held CAP_SETPCAP
        assert st["CapBnd"] == 0
    if IS_ROOT:
        assert r["notes"] == [caps.BOUNDING_SET_NOTE]


def test_drop_all_privileged_fails_closed_without_setpcap():
    def body():
        if IS_ROOT:
            plain_switch_to_nobody()
        return {
            "drop_all": attempt(lambda: caps.drop_all(privileged=True)),
            "switch_user": attempt(lambda: caps.switch_user(0, 0)),
        }

    def body_msg():
        if IS_ROOT:
            plain_switch_to_nobody()
        caps.drop_all(privileged=True)

    if not IS_ROOT and caps.status()["CapEff"] & (1 << caps.CAP_SETPCAP):
        pytest.skip("this unprivileged process holds CAP_SETPCAP")
    assert value_of(run_in_child(body)) == {"drop_all": errno.EPERM, "switch_user": errno.EPERM}
    err = run_in_child(body_msg)
    assert not err["ok"] and err["errno"] == errno.EPERM
    assert "PR_CAPBSET_DROP" in err["msg"]  # the message names the failed step


@root_only
def test_securebits_set_read_back_and_lock():
    def body():
        caps.set_securebits(caps.SECBIT_KEEP_CAPS)
        a = caps.get_securebits()
        caps.set_securebits(caps.SECBIT_NOROOT | caps.SECBIT_NOROOT_LOCKED)
        b = caps.get_securebits()
        return a, b, attempt(lambda: caps.set_securebits(0))
    assert value_of(run_in_child(body)) == [
        caps.SECBIT_KEEP_CAPS, caps.SECBIT_NOROOT | caps.SECBIT_NOROOT_LOCKED, errno.EPERM]


# --- in_fs_identity: the agent home made as the agent, without a fork ----------

def _fs_ids() -> tuple[int, int, list[int]]:
    with open("/proc/thread-self/status") as f:
        st = parse_status(f.read())
    return st["Uid"][3], st["Gid"][3], os.getgroups()


@root_only
def test_in_fs_identity_judges_paths_as_the_account_and_ends_with_the_thread():
    """As root: inside, a root-only directory and a directory writable only by
    group 0 (root's own group) refuse a new file, the account's own directory
    takes one and it belongs to the account; an error inside reaches the caller;
    the calling thread keeps fsuid 0 throughout. Controls: the same creations
    from the calling thread (root) succeed."""
    if not caps.fs_identity_supported():
        pytest.skip(f"no setgroups number for {os.uname().machine}")
    from pathlib import Path
    tmp_path = Path(tempfile.mkdtemp(prefix="confine-fsid-"))   # /tmp: traversable by all
    try:
        _fs_identity_checks(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def _fs_identity_checks(tmp_path) -> None:
    root_only_dir = tmp_path / "root-only"
    root_only_dir.mkdir(mode=0o700)
    group0 = tmp_path / "group0"
    group0.mkdir()
    os.chown(group0, 0, 0)
    os.chmod(group0, 0o770)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    os.chown(mine, NOBODY, NOBODY)
    os.chmod(tmp_path, 0o755)

    def inside() -> dict:
        return {"ids": _fs_ids(),
                "root_only": attempt(lambda: os.close(os.open(root_only_dir / "x", os.O_CREAT | os.O_WRONLY, 0o600))),
                "group0": attempt(lambda: os.close(os.open(group0 / "x", os.O_CREAT | os.O_WRONLY, 0o600))),
                "mine": attempt(lambda: os.close(os.open(mine / "x", os.O_CREAT | os.O_WRONLY, 0o600)))}
    got = caps.in_fs_identity(NOBODY, NOBODY, inside)
    assert got["ids"] == (NOBODY, NOBODY, [])
    assert got["root_only"] == errno.EACCES
    assert got["group0"] == errno.EACCES
    assert got["mine"] is None
    st = os.stat(mine / "x")
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY)
    assert _fs_ids()[:2] == (0, 0)          # the caller's thread never changed
    # controls: root (this thread) may create in both
    for d in (root_only_dir, group0):
        os.close(os.open(d / "x", os.O_CREAT | os.O_WRONLY, 0o600))

    def fails() -> None:
        raise FileExistsError(errno.EEXIST, "planted")
    with pytest.raises(FileExistsError):
        caps.in_fs_identity(NOBODY, NOBODY, fails)
    assert _fs_ids()[:2] == (0, 0)


# --- thread_as: the mediator's reads of another uid's process ----------------

@root_only
def test_thread_as_reads_another_uid_without_cap_sys_ptrace():
    """Root without CAP_SYS_PTRACE (a container's default) cannot take a
    descriptor of, read the memory of, or open /proc/PID/cwd of a process of
    another uid; one thread that took that uid as its real and filesystem ids
    can, and the process's other threads stay root. Control: the same attempts
    from the main thread, refused."""
    import threading

    from confine.kernel import notify

    def body():
        eff, prm, inh = caps.capget()
        drop = ~(1 << caps.CAP_SYS_PTRACE)
        caps.capset(eff & drop, prm & drop, inh & drop)
        target = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, user=NOBODY,
                                  group=NOBODY, extra_groups=[], cwd="/")
        try:
            time.sleep(0.2)      # exec'd: dumpable again as its own user
            pidfd = notify.pidfd_open(target.pid)

            def tries():
                got = {}
                try:
                    os.close(notify.pidfd_getfd(pidfd, 0))
                    got["getfd"] = "ok"
                except OSError as e:
                    got["getfd"] = errno.errorcode[e.errno]
                try:
                    with open(f"/proc/{target.pid}/maps") as f:
                        start = int(f.readline().split("-")[0], 16)
                    got["mem"] = notify.read_mem(target.pid, start, 4).hex()
                except OSError as e:
                    got["mem"] = errno.errorcode[e.errno]
                try:
                    got["cwd"] = os.readlink(f"/proc/{target.pid}/cwd")
                except OSError as e:
                    got["cwd"] = errno.errorcode[e.errno]
                return got
            outside = tries()
            inside: dict = {}

            def thread():
                caps.thread_as(NOBODY, NOBODY)
                inside.update(tries())
                inside["ids"] = [os.getresuid(), os.getresgid()]
            t = threading.Thread(target=thread)
            t.start()
            t.join()
            return {"main": outside, "thread": inside,
                    "main_ids": [os.getresuid(), os.getresgid()]}
        finally:
            target.kill()
            target.wait()
    r = run_in_child(body, timeout=20)
    assert r["ok"], r
    v = r["value"]
    assert v["main"] == {"getfd": "EPERM", "mem": "EPERM", "cwd": "EACCES"}, v
    assert v["thread"]["getfd"] == "ok" and v["thread"]["cwd"] == "/", v
    assert v["thread"]["mem"] == b"\x7fELF".hex(), v
    assert v["thread"]["ids"] == [[NOBODY, 0, 0], [NOBODY, 0, 0]], v
    assert v["main_ids"] == [[0, 0, 0], [0, 0, 0]], v
