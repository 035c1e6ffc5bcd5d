"""systemd: the generated unit passes `systemd-analyze verify`, scores at most
1.5 on `systemd-analyze security --offline=true` for every built-in profile,
and a real systemd (booted as PID 1 of private namespaces, with only this
unit) runs the command through confine inside it."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time

import pytest

from confine.export import systemd

from .conftest import BUILTIN, need

LIMIT = 1.5


def make_unit(policy, workdir, confine, argv, name="agent-test", **kw):
    return systemd.unit(policy, name=name, workdir=workdir, argv=argv, confine=confine,
                        profile_ref=policy.name, **kw)


def analyze(*args):
    return subprocess.run([need("systemd-analyze"), *args], capture_output=True, text=True)


@pytest.mark.parametrize("name", BUILTIN)
def test_unit_verifies_and_scores(tmp_path, policies, workdir, confine_bin, name):
    unit = tmp_path / "agent-test.service"
    unit.write_text(make_unit(policies[name], workdir, confine_bin, ["/usr/bin/true"]))
    r = analyze("verify", str(unit))
    assert r.returncode == 0, r.stdout + r.stderr
    r = analyze("security", "--offline=true", str(unit))
    m = re.search(r"Overall exposure level for agent-test\.service: (\d+\.\d)", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) <= LIMIT, r.stdout
    # The same bound through the verb's own threshold (0-100 scale).
    assert analyze("security", "--offline=true", f"--threshold={int(LIMIT * 10)}",
                   str(unit)).returncode == 0


def test_unit_settings(policies, workdir, confine_bin):
    text = make_unit(policies["default"], workdir, confine_bin, ["make", "test"])
    lines = text.splitlines()
    assert (f"ExecStart={confine_bin} exec -p default -w {workdir} "
            "--degrade mount_namespace -- make test") in lines
    for want in ("NoNewPrivileges=yes", "CapabilityBoundingSet=", "ProtectSystem=strict",
                 "ProtectHome=tmpfs", f"BindPaths={workdir}", "PrivateNetwork=yes",
                 "IPAddressDeny=any", "SystemCallArchitectures=native",
                 "RestrictAddressFamilies=AF_UNIX", "RestrictNamespaces=yes",
                 "PrivateDevices=yes", "InaccessiblePaths=-/etc/shadow"):
        assert want in lines, want
    assert not any(line.startswith("User=root") for line in lines)
    net = make_unit(policies["claude-code"], workdir, confine_bin, ["claude"],
                    allow_ip=("10.0.0.0/8",))
    assert "PrivateNetwork=yes" not in net and "IPAddressAllow=10.0.0.0/8" in net
    assert "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK" in net


def test_exec_start_quoting():
    assert systemd.quote("plain") == "plain"
    assert systemd.quote("a b") == '"a b"'
    assert systemd.quote("100%") == "100%%"
    assert systemd.quote("$HOME") == "$$HOME"
    assert systemd.quote('say "hi"\n') == '"say \\"hi\\"\\n"'


# --- run under a real systemd ----------------------------------------------------------------

PROBE = textwrap.dedent("""
    import json, os, errno
    out = {"uid": os.getuid()}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("NoNewPrivs", "Seccomp", "Seccomp_filters", "CapEff", "CapBnd"):
            out[k] = v.strip()
    try:
        open("/etc/confine-export-test", "w")
        out["etc"] = "written"
    except OSError as e:
        out["etc"] = errno.errorcode[e.errno]
    out["ifaces"] = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
    try:  # systemd leaves /var/log readable; only Landlock (confine) refuses it
        os.listdir("/var/log")
        out["var_log"] = "listed"
    except OSError as e:
        out["var_log"] = errno.errorcode[e.errno]
    json.dump(out, open("result.json", "w"))
    print("100% done")
""")


def _pid1(unshare: subprocess.Popen) -> int | None:
    try:
        with open(f"/proc/{unshare.pid}/task/{unshare.pid}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if kids else None
    except OSError:
        return None


def run_under_systemd(unit_dir, unit_name, timeout=90):
    """Boot systemd as PID 1 of new pid/mount/net/uts/ipc namespaces with only
    unit_dir on its unit path, start unit_name, wait for it to finish, return
    `systemctl show` properties. Logs go to unit_dir/console and unit_dir/log."""
    for t in ("sysinit", "basic", "shutdown", "multi-user", "network-online"):
        (unit_dir / f"{t}.target").write_text(f"[Unit]\nDescription=stub {t}\n")
    dropin = unit_dir / f"{unit_name}.d"
    dropin.mkdir()
    # The harness's own additions: logs in a file, and the unit kept loaded
    # after it exits so its exit status can be read.
    (dropin / "harness.conf").write_text(f"[Service]\nStandardOutput=append:{unit_dir}/log\n"
                                         f"StandardError=append:{unit_dir}/log\n"
                                         "RemainAfterExit=yes\n")
    (unit_dir / "console").write_text("")
    script = ('mount --bind "$1" /dev/console && exec env -i container=confine-test '
              'SYSTEMD_UNIT_PATH="$2" /lib/systemd/systemd --system --unit="$3" '
              '--log-target=console --log-level=info')
    proc = subprocess.Popen(["unshare", "--pid", "--fork", "--mount", "--mount-proc", "--net",
                             "--uts", "--ipc", "sh", "-c", script, "sh",
                             str(unit_dir / "console"), str(unit_dir), unit_name],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid1 = None
    props = {}
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(0.5)
            pid1 = pid1 or _pid1(proc)
            if pid1 is None:
                continue
            r = subprocess.run(["nsenter", "-t", str(pid1), "-m", "-p", "systemctl", "show",
                                unit_name, "-p", "ActiveState", "-p", "Result", "-p",
                                "ExecMainStatus", "-p", "ExecMainCode"],
                               capture_output=True, text=True)
            props = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
            if props.get("ExecMainCode") not in (None, "0"):  # 0: has not exited yet
                return props
        raise AssertionError(f"unit did not finish in {timeout}s: {props}\n"
                             + (unit_dir / "console").read_text()[-3000:])
    finally:
        if pid1:
            os.kill(pid1, signal.SIGKILL)  # PID 1 of the namespace: takes everything with it
        proc.kill()
        proc.wait()


def test_command_runs_under_the_unit(tmp_path, policies, workdir, confine_bin):
    if os.geteuid() != 0:
        pytest.skip("booting systemd in private namespaces needs root")
    need("/lib/systemd/systemd"), need("unshare"), need("nsenter")
    unit_dir = tmp_path / "units"
    unit_dir.mkdir()
    unit_dir.chmod(0o755)
    text = make_unit(policies["default"], workdir, confine_bin, ["/usr/bin/python3", "-c", PROBE])
    (unit_dir / "agent-test.service").write_text(text)
    props = run_under_systemd(unit_dir, "agent-test.service")
    log = (unit_dir / "log").read_text() if (unit_dir / "log").exists() else ""
    assert props.get("Result") == "success" and props.get("ExecMainStatus") == "0", (props, log)
    assert "100% done" in log
    res = json.loads(open(os.path.join(workdir, "result.json")).read())
    assert res["uid"] == os.stat(workdir).st_uid != 0
    assert res["NoNewPrivs"] == "1" and res["Seccomp"] == "2"
    assert int(res["CapEff"], 16) == 0 and int(res["CapBnd"], 16) == 0
    # Read-only system from systemd (EROFS), before Landlock (EACCES) gets to say no.
    assert res["etc"] == "EROFS"
    # PrivateNetwork: loopback only.
    assert res["ifaces"] == ["lo"]
    # And confine's own layer inside it.
    assert res["var_log"] == "EACCES"
