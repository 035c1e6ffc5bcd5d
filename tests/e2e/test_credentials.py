"""Credentials the agent never holds (issue 24 items 1, 4): real runs of the installed confine.

Threat: the real value of a token reaching the agent (its environment, /proc, a file it
can read, an error line, the log), or a minted token outliving its run. Each case runs
as root with --user confine-test and as the account itself. The controls: a variable
passed the old way (--env) is found by the same scan inside, so the scan can see a
value; the placeholders are there and have the value's shape.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import string
import subprocess
import textwrap
import time

import pytest
from conftest import PY, Sandbox, make_workdir

DUMP = textwrap.dedent("""
    import glob, json, os
    seen = []
    for p in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):
        try:
            seen.append(open(p, 'rb').read().decode('utf-8', 'replace'))
        except OSError:
            pass
    out = {'env': dict(os.environ), 'proc': seen}
    open('dump.json', 'w').write(json.dumps(out))
    print('dumped', len(seen))
""")


def _token(prefix: str = "ghp_", n: int = 36) -> str:
    return prefix + "".join(secrets.choice(string.ascii_letters + string.digits)
                            for _ in range(n))


@pytest.fixture(params=["root", "user"])
def csb(request, confine_bin, test_user, outside_dir):
    if os.geteuid() != 0:
        pytest.skip("needs root (the test account's processes)")
    wd = make_workdir(test_user)
    opts = ("--user", test_user.pw_name) if request.param == "root" else ()
    sb = Sandbox(request.param, test_user, wd, opts=opts)
    sb.launcher = 0 if request.param == "root" else test_user.pw_uid     # type: ignore[attr-defined]
    sb.out = outside_dir                                                  # type: ignore[attr-defined]
    yield sb
    import shutil
    shutil.rmtree(wd, ignore_errors=True)


def _owned(sb, path: str, text: str, mode: int = 0o600) -> str:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    os.chown(path, sb.launcher, sb.launcher if sb.launcher == 0 else sb.pw.pw_gid)
    return path


def _profile(sb, body: str) -> str:
    return _owned(sb, os.path.join(sb.out, "creds.yaml"), textwrap.dedent(body), 0o644)


def _pending_dir(sb) -> str:
    if sb.launcher == 0:
        return "/var/lib/confine/credentials"
    return os.path.join(sb.pw.pw_dir, ".local/state/confine/credentials")


def test_the_value_never_reaches_the_agent(csb):
    sb = csb
    a, b, c, control = _token(), _token("sk-ant-api03-", 40), _token("glpat-", 20), _token()
    secret_file = _owned(sb, os.path.join(sb.out, "token"), b + "\n")
    prof = _profile(sb, f"""
        extends: default
        network:
          allow: [forge.example]
        credentials:
          - name: FORGE_TOKEN
            from_env: REAL_FORGE
            hosts: [forge.example]
          - name: API_KEY
            from_file: {secret_file}
            hosts: [{{host: forge.example, methods: [GET], paths: [/api/]}}]
            headers: [x-api-key]
          - name: CMD_TOKEN
            from_command: [/bin/echo, {c}]
            hosts: ["forge.example:8443"]
        """)
    log = os.path.join(sb.out, "run.jsonl")
    # --env FORGE_TOKEN passes the caller's own FORGE_TOKEN (another value): the
    # credential wins, and says so
    p = sb.run([PY, "-c", DUMP], "-p", prof, "--log", log, "--env", "CONTROL",
               "--env", "FORGE_TOKEN",
               env_extra=[f"REAL_FORGE={a}", f"CONTROL={control}", f"FORGE_TOKEN={_token()}"])
    assert p.returncode == 0, p.stderr
    assert "FORGE_TOKEN: the credential's placeholder replaces the value from" in p.stderr
    with open(os.path.join(sb.workdir, "dump.json")) as f:
        text = f.read()
    dump = json.loads(text)
    # the control: a value passed the old way is found by the same scan, in /proc too
    assert dump["env"]["CONTROL"] == control
    assert any(control in s for s in dump["proc"]), "the /proc scan saw nothing"
    for name, value in (("FORGE_TOKEN", a), ("API_KEY", b), ("CMD_TOKEN", c)):
        ph = dump["env"][name]
        assert ph != value and len(ph) == len(value), name
        assert ph[:4] == value[:4]                        # the known prefix is kept
        assert value not in text, f"{name}'s value reached the agent"
    with open(log) as f:
        logged = f.read()
    assert '"action":"bound"' in logged and "FORGE_TOKEN" in logged
    for value in (a, b, c):
        assert value not in logged and value not in p.stdout + p.stderr


def test_mint_then_revoke_at_exit_whatever_the_status(csb):
    sb = csb
    value = _token()
    minted, revoked = os.path.join(sb.out, "minted"), os.path.join(sb.out, "revoked")
    prof = _profile(sb, f"""
        extends: default
        credentials:
          - name: TASK_TOKEN
            mint: [/bin/sh, -c, 'echo run >> {minted}; echo {value}; echo 2030-01-01T00:00:00Z']
            revoke: [/bin/sh, -c, 'cat >> {revoked}']
            hosts: [forge.example]
        """)
    p = sb.run(["/bin/sh", "-c", 'test -n "$TASK_TOKEN" && exit 3'], "-p", prof)
    assert p.returncode == 3, p.stderr                    # the agent's own status
    assert open(minted).read() == "run\n"
    assert open(revoked).read() == value + "\n"
    left = [n for n in os.listdir(_pending_dir(sb)) if "TASK_TOKEN" in n] \
        if os.path.isdir(_pending_dir(sb)) else []
    assert left == []


def test_revoke_left_by_a_killed_supervisor_runs_at_the_next_start(csb):
    sb = csb
    value = _token()
    revoked = os.path.join(sb.out, "revoked")
    prof = _profile(sb, f"""
        extends: default
        credentials:
          - name: KILLED_TOKEN
            mint: [/bin/echo, {value}]
            revoke: [/bin/sh, -c, 'cat >> {revoked}']
            hosts: [forge.example]
        """)
    started = os.path.join(sb.workdir, "started")
    proc = sb.popen(["/bin/sh", "-c", "touch started; exec sleep 30"], "-p", prof,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 20
        while not os.path.exists(started) and time.monotonic() < end:
            time.sleep(0.05)
        assert os.path.exists(started), "the agent never started"
        recs = [n for n in os.listdir(_pending_dir(sb)) if "-KILLED_TOKEN-" in n]
        assert len(recs) == 1                             # written before the agent started
        st = os.stat(os.path.join(_pending_dir(sb), recs[0]))
        assert st.st_mode & 0o777 == 0o600 and st.st_uid == sb.launcher
        assert os.stat(_pending_dir(sb)).st_mode & 0o777 == 0o700
        os.kill(proc.pid, signal.SIGKILL)                 # the supervisor: no revoke from it
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not os.path.exists(revoked)
    # the next start of the same person, any profile
    p = sb.run(["/bin/true"])
    assert p.returncode == 0, p.stderr
    assert open(revoked).read() == value + "\n"
    assert "credential KILLED_TOKEN: revoked now" in p.stderr
    assert value not in p.stderr
    assert not [n for n in os.listdir(_pending_dir(sb)) if "-KILLED_TOKEN-" in n]


def test_bad_input_is_one_line_naming_line_and_key(csb):
    sb = csb
    prof = _profile(sb, """
        extends: default
        credentials:
          - name: GH
            from_command: gh auth token
            hosts: [github.com]
        """)
    p = sb.run(["/bin/true"], "-p", prof)
    assert p.returncode == 125
    assert p.stderr.strip().count("\n") == 0
    assert "creds.yaml:5: credentials[GH].from_command: must be a command as a non-empty list" \
        in p.stderr
    p = sb.run(["/bin/true"], "--credential", "GH_TOKEN")
    assert p.returncode == 125 and "--credential GH_TOKEN: name the hosts" in p.stderr
    p = sb.run(["/bin/true"], "--credential", "NOT_SET_HERE=github.com")
    assert p.returncode == 125
    assert "credential NOT_SET_HERE: the environment variable NOT_SET_HERE is not set" \
        in p.stderr
    # the control: set, the same flag runs and the agent holds a placeholder only
    value = _token()
    p = sb.run(["/bin/sh", "-c", 'printf %s "$NOW_SET"'], "--credential", "NOW_SET=github.com",
               env_extra=[f"NOW_SET={value}"])
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) == len(value) and p.stdout != value and p.stdout.startswith("ghp_")


def test_the_supervisor_s_environment_is_not_readable_without_namespaces(user_sandbox,
                                                                          outside_dir):
    """Without a pid namespace the agent sees every process of the host, the supervisor
    (whose environment holds the value) included: Landlock keeps its environ closed."""
    sb = user_sandbox.without_namespaces()
    sb.launcher, sb.out = sb.pw.pw_uid, outside_dir          # type: ignore[attr-defined]
    a, control = _token(), _token()
    prof = _profile(sb, """
        extends: default
        credentials:
          - name: FORGE_TOKEN
            from_env: REAL_FORGE
            hosts: [forge.example]
        """)
    p = sb.run([PY, "-c", DUMP], "-p", prof, "--env", "CONTROL",
               env_extra=[f"REAL_FORGE={a}", f"CONTROL={control}"])
    assert p.returncode == 0, p.stderr
    with open(os.path.join(sb.workdir, "dump.json")) as f:
        text = f.read()
    dump = json.loads(text)
    assert any(control in s for s in dump["proc"])             # its own environ: readable
    assert any("creds.yaml" in s for s in dump["proc"]), "the supervisor was not in view"
    assert a not in text
    # the control: outside, the same account reads a process's environ holding the value
    out = sb.outside(["/bin/sh", "-c", 'cat /proc/self/environ | tr "\\0" "\\n"'],
                     env_extra=[f"REAL_FORGE={a}"])
    assert a in out.stdout


def test_approver_is_taken_for_a_credential_that_asks(user_sandbox, outside_dir):
    sb = user_sandbox
    sb.launcher, sb.out = sb.pw.pw_uid, outside_dir          # type: ignore[attr-defined]
    value = _token()
    for decision, status in (("ask", 0), ("allow", 125)):
        prof = _profile(sb, f"""
            extends: default
            network:
              allow: [forge.example]
            credentials:
              - {{name: T, from_env: T, hosts: [forge.example], decision: {decision}}}
            """)
        p = sb.run(["/bin/true"], "-p", prof, "--approver", "/bin/true",
                   env_extra=[f"T={value}"])
        assert p.returncode == status, p.stderr
    assert "--approver only applies where something is asked" in p.stderr


def test_a_nested_run_gets_no_values_of_its_own(csb):
    """Inside a run, an inner profile's from_command would run outside as the person
    (the outer supervisor makes the nested run): refused unless optional."""
    sb = csb
    from conftest import CONFINE
    inner = os.path.join(sb.workdir, "inner")
    os.mkdir(inner)
    os.chown(inner, sb.agent.pw_uid, sb.agent.pw_gid)
    marker = os.path.join(sb.out, "ran-outside")
    for name, optional in (("needed.yaml", "false"), ("optional.yaml", "true")):
        path = os.path.join(inner, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(f"""
                extends: strict
                credentials:
                  - name: INNER
                    from_command: [/bin/sh, -c, 'touch {marker}; echo v-1234567890']
                    optional: {optional}
                    hosts: [forge.example]
                """))
        os.chown(path, sb.agent.pw_uid, sb.agent.pw_gid)
    script = f"""
        {CONFINE} exec -w {inner} -p {inner}/needed.yaml -- /bin/true; echo "needed=$?"
        {CONFINE} exec -w {inner} --credential X=forge.example -- /bin/true; echo "flag=$?"
        {CONFINE} exec -w {inner} -p {inner}/optional.yaml -- /bin/sh -c 'echo "inner=${{INNER-unset}}"'
    """
    p = sb.run(["/bin/sh", "-c", textwrap.dedent(script)])
    assert p.returncode == 0, p.stderr
    assert "needed=125" in p.stdout and "flag=125" in p.stdout, (p.stdout, p.stderr)
    assert "credentials (INNER) are given by the outermost confine run only" in p.stderr
    assert "--credential is not supported in a nested run" in p.stderr
    assert "inner=unset" in p.stdout, (p.stdout, p.stderr)     # the control: it ran
    assert not os.path.exists(marker)
