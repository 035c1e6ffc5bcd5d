"""OCI seccomp: the JSON has the shape Docker, containerd and CRI-O read, holds
exactly the rules `confine exec` loads, and a filter built from it the way a
runtime builds one (libseccomp) makes the same decisions in the kernel."""
from __future__ import annotations

import ctypes
import errno
import json
import os

import pytest

from confine.export import oci
from confine.kernel import seccomp

from .conftest import BUILTIN

ACTIONS = {"SCMP_ACT_ERRNO"}
OPS = set(oci.OPS.values())


@pytest.mark.parametrize("name", BUILTIN)
def test_structure(policies, name):
    prof = json.loads(oci.render(policies[name]))
    assert prof["defaultAction"] == "SCMP_ACT_ALLOW"
    assert "architectures" not in prof  # containerd rejects both fields at once
    assert [a["architecture"] for a in prof["archMap"]] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]
    assert all(a["subArchitectures"] == [] for a in prof["archMap"])
    assert prof["syscalls"]
    for e in prof["syscalls"]:
        assert set(e) <= {"names", "action", "errnoRet", "args", "comment"}, e
        assert e["names"] and all(isinstance(n, str) and n for n in e["names"])
        assert e["action"] in ACTIONS and isinstance(e["errnoRet"], int) and e["errnoRet"] > 0
        for a in e.get("args", []):
            assert set(a) == {"index", "value", "valueTwo", "op"}
            assert 0 <= a["index"] <= 5 and a["op"] in OPS
            assert 0 <= a["value"] < 2**64 and 0 <= a["valueTwo"] < 2**64


def _from_json(prof):
    """The JSON read back into confine's rule model (what a runtime would load)."""
    out = []
    for e in prof["syscalls"]:
        args = []
        for a in e.get("args", []):
            op = {v: k for k, v in oci.OPS.items()}[a["op"]]
            args.append(seccomp.ArgMatch(a["index"], op, a["valueTwo"], a["value"])
                        if op == "masked_eq" else seccomp.ArgMatch(a["index"], op, a["value"]))
        out += [seccomp.Rule(n, e["errnoRet"], tuple(args)) for n in e["names"]]
    return out


def _key(r):
    return (r.syscall, r.errno, r.args)


@pytest.mark.parametrize("name", BUILTIN)
def test_same_rules_as_confine_exec(policies, name):
    policy = policies[name]
    mine = sorted(map(_key, _from_json(json.loads(oci.render(policy)))), key=repr)
    theirs = sorted(map(_key, seccomp.rules_for(policy.seccomp.deny, policy.seccomp.unsafe_allow)),
                    key=repr)
    assert mine == theirs


def test_profile_deny_and_unsafe_allow(tmp_path):
    from confine.export import source
    p = tmp_path / "custom.yaml"
    p.write_text("extends: default\nseccomp:\n  deny: [ptrace]\n  unsafe_allow: [io_uring]\n")
    prof = json.loads(oci.render(source.load_policy(str(p))))
    names = {n for e in prof["syscalls"] for n in e["names"]}
    assert "ptrace" in names and "io_uring_setup" not in names


# --- in the kernel ---------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
PROBES = {  # name -> (syscall name, args)
    "unshare_user": ("unshare", (0x10000000,)),
    "socket_packet": ("socket", (17, 3, 0)),
    "socket_udp": ("socket", (2, 2, 0)),
    "socket_tcp": ("socket", (2, 1, 0)),
    "socket_unix": ("socket", (1, 1, 0)),
    "tiocsti_high_bits": ("ioctl", (0, 0x100005412, 0)),
    "clone3": ("clone3", (0, 0)),
    "personality_no_aslr": ("personality", (0x0040000,)),
    "personality_query": ("personality", (0xFFFFFFFF,)),
    "keyctl": ("keyctl", (0, 0, 0, 0, 0)),
    "mount": ("mount", (0, 0, 0, 0, 0)),
    "getpid": ("getpid", ()),
}


def _run_probes(build) -> dict:
    """Fork; the child loads the filter and reports each probe's errno (0 = allowed)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            build().load()
            out = {}
            for name, (sc, args) in PROBES.items():
                nr = seccomp.syscall_number(sc)
                ctypes.set_errno(0)
                rc = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_ulong(a) for a in args])
                out[name] = 0 if rc >= 0 else ctypes.get_errno()
                if sc == "socket" and rc >= 0:
                    os.close(rc)
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def _runtime_filter(prof):
    """What runc/crun do with the profile, through libseccomp."""
    import pyseccomp as sc
    f = sc.SyscallFilter(sc.ALLOW)
    for e in prof["syscalls"]:
        for n in e["names"]:
            try:
                nr = sc.resolve_syscall(sc.Arch.NATIVE, n)
            except Exception:
                continue
            if nr < 0:
                continue  # runtimes skip names this libseccomp or arch lacks
            args = []
            for a in e.get("args", []):
                op = getattr(sc, a["op"].replace("SCMP_CMP_", ""))
                args.append(sc.Arg(a["index"], op, a["value"], a["valueTwo"])
                            if op == sc.MASKED_EQ else sc.Arg(a["index"], op, a["value"]))
            f.add_rule(sc.ERRNO(e["errnoRet"]), nr, *args)
    return f


def test_kernel_decisions_match_confine_exec(policies):
    policy = policies["default"]
    prof = json.loads(oci.render(policy))
    via_json = _run_probes(lambda: _runtime_filter(prof))
    via_confine = _run_probes(lambda: seccomp.build(
        seccomp.rules_for(policy.seccomp.deny, policy.seccomp.unsafe_allow)))
    assert via_json == via_confine
    e = errno.errorcode
    assert {k: e.get(v, "ok") for k, v in via_json.items() if v} == {
        "unshare_user": "EPERM", "socket_packet": "EPERM", "socket_udp": "EPERM",
        "tiocsti_high_bits": "EPERM", "clone3": "ENOSYS", "personality_no_aslr": "EPERM",
        "keyctl": "EPERM", "mount": "EPERM"}
