"""The credential swap in a real run (issue 24 item 2): `confine exec` with a profile binding
FORGE_TOKEN to allowed.test; the origin (egress_servers.py, 1.1.1.1:443 in the test's own
network namespace, its certificate given as network.upstream_ca) sees the real value,
although the agent holds only the placeholder; the same header toward another allowed
host is refused with a `confine:` line; the value is in no file the agent wrote, not in
its environment and not in --log. As root with --user and as the unprivileged account.

Needs the `credentials:` profile section (credentials/run.py and policy/credentials.py,
from the credentials branch): skipped where the loader does not know it.
"""
from __future__ import annotations

import os
import secrets
import string
import subprocess
import tempfile
import textwrap

import pytest
from conftest import Sandbox, make_workdir
from test_egress import NS_A, net  # noqa: F401 - the fixture, reused

from confine.policy import load

pytestmark = pytest.mark.skipif("credentials" not in load.SCHEMA,
                                reason="no credentials: section in this build (the credentials branch)")

SH = r'''
curl -sS -H "Authorization: Bearer $FORGE_TOKEN" https://allowed.test/ > bound.txt; echo "bound=$?"
curl -sS -H "Authorization: Bearer $FORGE_TOKEN" https://other.test/ > other.txt; echo "other=$?"
curl -sS https://other.test/ > control.txt; echo "control=$?"
env > env.txt
'''


@pytest.mark.parametrize("mode", ["root", "user"])
def test_the_bound_host_gets_the_value_no_other_host_does(mode, net, test_user):  # noqa: F811
    sb = Sandbox(mode, test_user, make_workdir(test_user))
    value = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    logdir = tempfile.mkdtemp(prefix="confine-tls-log-")
    os.chown(logdir, sb.pw.pw_uid, sb.pw.pw_gid)
    logf = os.path.join(logdir, "run.jsonl")
    prof = os.path.join(logdir, "forge.yaml")
    with open(prof, "w") as f:
        f.write(textwrap.dedent(f"""
        extends: default
        network:
          allow: [allowed.test, other.test]
          upstream_ca: [{net.ca}]
        credentials:
          - name: FORGE_TOKEN
            from_env: REAL_FORGE_TOKEN
            hosts: [allowed.test]
        """))
    if mode == "user":    # the launcher's own profile
        os.chown(prof, sb.pw.pw_uid, sb.pw.pw_gid)
    m = net.mark()
    p = subprocess.run(["ip", "netns", "exec", NS_A] + sb.exec_cmd(["sh", "-c", SH], "-p", prof, "--log", logf,
                                                                     env_extra=[f"REAL_FORGE_TOKEN={value}"]),
                       capture_output=True, text=True, timeout=60, cwd=sb.workdir)
    assert "bound=0" in p.stdout and "control=0" in p.stdout, (p.stdout, p.stderr)
    got = [e for e in net.since(m) if e["ev"] == "request"]
    # the bound host saw the value; the other host saw no request carrying anything
    assert [(e["host"], e["auth"]) for e in got] == [("allowed.test", f"Bearer {value}"), ("other.test", None)]
    wd = sb.workdir
    with open(os.path.join(wd, "bound.txt")) as f:
        assert "hello from allowed.test" in f.read()
    with open(os.path.join(wd, "other.txt")) as f:
        assert "confine: attempted disclosure: the placeholder of FORGE_TOKEN" in f.read()
    assert "confine: egress:" in p.stderr and "attempted disclosure" in p.stderr, p.stderr
    with open(os.path.join(wd, "env.txt")) as f:
        env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
    ph = env["FORGE_TOKEN"]
    assert ph != value and len(ph) == len(value) and env["GIT_SSL_CAINFO"] == env["SSL_CERT_FILE"]
    for root, _dirs, files in os.walk(wd):
        for n in files:
            with open(os.path.join(root, n), "rb") as f:
                assert value.encode() not in f.read(), n
    with open(logf) as f:
        logged = f.read()
    assert value not in logged and "credential_use" in logged and '"terminated":true' in logged
    assert value not in p.stdout + p.stderr
