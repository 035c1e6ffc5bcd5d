"""Ordinary development work inside `confine exec` works: git, python, a venv
with pip, shell pipelines, a compiler, and interactive use on a terminal.

These are the positive half of the boundary: a sandbox that blocked
everything would pass test_exec_boundary.py and fail here.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest

try:  # tests/ as a package or as a plain directory
    from .conftest import PY, pty_run
except ImportError:
    from conftest import PY, pty_run

pytestmark = pytest.mark.usefixtures("confine_bin")


def _own(sandbox, *paths):
    for p in paths:
        for dirpath, dirnames, filenames in os.walk(p):
            os.chown(dirpath, sandbox.agent.pw_uid, sandbox.agent.pw_gid)
            for n in filenames:
                os.chown(os.path.join(dirpath, n), sandbox.agent.pw_uid, sandbox.agent.pw_gid)
        if os.path.isfile(p):
            os.chown(p, sandbox.agent.pw_uid, sandbox.agent.pw_gid)


def _write(sandbox, rel: str, text: str, mode=0o644) -> str:
    path = os.path.join(sandbox.workdir, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    os.chmod(path, mode)
    _own(sandbox, os.path.dirname(path))
    return path


def test_git_init_commit(sandbox, planted_home):
    """git uses ~/.gitconfig (granted read by the default profile) for the author."""
    _write(sandbox, "src/hello.py", "print('hello')\n")
    script = ("set -e; git init -q -b main; git add -A; git commit -qm 'first commit'; "
              "echo more >> src/hello.py; git commit -qam second; "
              "git log --format='%an <%ae> %s'; git status --porcelain; "
              "git branch -q feature; git checkout -q feature; git rev-parse --abbrev-ref HEAD")
    p = sandbox.run(["sh", "-c", script])
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == ["Confine Test <test@example.invalid> second",
                         "Confine Test <test@example.invalid> first commit"], p.stdout
    assert lines[-1] == "feature"
    assert os.path.isdir(os.path.join(sandbox.workdir, ".git", "objects"))


def test_python(sandbox):
    code = r'''
    import json, multiprocessing, os, sqlite3, subprocess, sys, tempfile, ssl, hashlib
    def sq(x):
        return x * x
    if __name__ == "__main__":
        with multiprocessing.Pool(2) as pool:       # semaphores in /dev/shm, fork
            squares = pool.map(sq, range(10))
        db = sqlite3.connect("data.db")
        db.execute("create table t (x)")
        db.executemany("insert into t values (?)", [(i,) for i in range(5)])
        db.commit()
        total = db.execute("select sum(x) from t").fetchone()[0]
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write("tmp")
        out = subprocess.run([sys.executable, "-c", "print(6*7)"], capture_output=True, text=True).stdout
        print(json.dumps({"squares": sum(squares), "sqlite": total, "sub": out.strip(),
                          "tmp": f.name.startswith(os.environ["TMPDIR"]),
                          "sha": hashlib.sha256(b"x").hexdigest()[:8]}))
    '''
    path = _write(sandbox, "prog.py", code)
    p = sandbox.run([PY, path])
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == ('{"squares": 285, "sqlite": 10, "sub": "42", "tmp": true, '
                                '"sha": "2d711642"}'), p.stdout


PYPROJECT = """\
[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "tinypkg"
version = "1.2.3"
"""

# A complete PEP 517 build backend in 30 lines: pip builds the wheel through it
# (no setuptools/wheel needed, no network, --no-build-isolation).
BACKEND = """\
import base64, hashlib, os, zipfile

NAME, VERSION = "tinypkg", "1.2.3"
DIST = f"{NAME}-{VERSION}.dist-info"
FILES = {
    f"{NAME}/__init__.py": None,
    f"{DIST}/METADATA": f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n",
    f"{DIST}/WHEEL": "Wheel-Version: 1.0\\nGenerator: backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
    f"{DIST}/entry_points.txt": f"[console_scripts]\\ntinypkg-cli = {NAME}:main\\n",
}

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for arc, text in FILES.items():
            data = open(arc, "rb").read() if text is None else text.encode()
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{arc},sha256={digest},{len(data)}")
        record.append(f"{DIST}/RECORD,,")
        z.writestr(f"{DIST}/RECORD", "\\n".join(record) + "\\n")
    return name
"""


def test_venv_pip_install_local_package(sandbox):
    """python3 -m venv in the workdir, then pip install of a package built from
    the workdir by its own PEP 517 backend, without network or build isolation;
    its console script runs."""
    _write(sandbox, "pkg/pyproject.toml", PYPROJECT)
    _write(sandbox, "pkg/backend.py", BACKEND)
    _write(sandbox, "pkg/tinypkg/__init__.py",
           "VALUE = 41 + 1\n\ndef main():\n    print('tinypkg-cli', VALUE)\n")
    script = ("set -e; python3 -m venv venv; "
              "venv/bin/pip install -q --no-index --no-build-isolation ./pkg; "
              "venv/bin/python -c 'import tinypkg; print(tinypkg.VALUE)'; "
              "venv/bin/tinypkg-cli; venv/bin/pip show tinypkg | grep ^Version")
    p = sandbox.run(["sh", "-c", script], "--env", "PIP_DISABLE_PIP_VERSION_CHECK=1", timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines() == ["42", "tinypkg-cli 42", "Version: 1.2.3"], p.stdout
    assert os.path.isfile(os.path.join(sandbox.workdir, "venv", "bin", "tinypkg-cli"))


def test_shell_pipeline(sandbox):
    script = ("set -e; seq 1 1000 | grep 7 | wc -l; "
              "printf 'b\\na\\nc\\n' | sort | tr -d '\\n' > sorted.txt; cat sorted.txt; echo; "
              "x=$(cd sub 2>/dev/null || mkdir sub && cd sub && pwd); basename \"$x\"; "
              "f=$(mktemp); echo tmp > \"$f\"; cat \"$f\"; "
              "cat <<EOF | sed 's/here/there/'\nhere-doc\nEOF\n"
              "find . -name '*.txt' | xargs cat | wc -c")
    p = sandbox.run(["bash", "-c", script])
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["271", "abc", "sub", "tmp", "there-doc", "3"], p.stdout
    p = sandbox.run(["bash", "-c", "set -o pipefail; diff <(echo a) <(echo a) && echo same"])
    assert p.returncode == 0 and p.stdout == "same\n", p


@pytest.mark.skipif(not shutil.which("gcc"), reason="gcc not installed")
def test_c_compiler(sandbox):
    _write(sandbox, "hello.c", '#include <stdio.h>\nint main(void){puts("compiled");return 0;}\n')
    p = sandbox.run(["sh", "-c", "gcc -O1 -o hello hello.c && ./hello"], timeout=120)
    assert p.returncode == 0 and p.stdout == "compiled\n", p.stderr


def test_interactive_shell_on_a_pty(sandbox):
    """bash -i on a pty inside confine: prompt, the terminal (fds 0-2 and
    /dev/tty), job control, Ctrl-C interrupts the foreground job only, raw
    mode, new ptys, exit status. (Markers are quoted in the typed commands so
    the terminal's echo does not match them.)
    /dev/pts inside is a new devpts instance: the agent's own terminal belongs
    to the host's instance, so `tty` cannot name it ("not a tty") although it
    works; a pty the agent opens is /dev/pts/N of its own instance."""
    raw = ("import sys,tty; tty.setraw(0); print('RAW-'+'READY', end='', flush=True); "
           "c = sys.stdin.read(1); tty.setcbreak(0); print(' RAW', repr(c))")
    newpty = ("import os; m, s = os.openpty(); print('NEWPTY', os.ttyname(s), "
              "os.isatty(0) and os.isatty(1))")
    inputs = [
        (b"$ ", b"echo $((6*7))\n"),
        (b"42", b"tty; [ -t 0 ] && [ -t 1 ] && echo TTY-\"FDS\"; echo DEV-\"TTY\" > /dev/tty\n"),
        (b"DEV-TTY", f"{PY} -c \"{newpty}\"\n".encode()),
        (b"NEWPTY", b"sleep 30 &\n"),
        (b"$ ", b"jobs; echo JOBS-\"DONE\"\n"),
        (b"JOBS-DONE", b"kill %1; wait; echo KIL\"LED\"\n"),
        (b"KILLED", b"sleep 30\n"),
        (0.5, b"\x03"),                      # terminal-generated SIGINT
        (b"$ ", b"echo \"rc=$?\"; echo after-\"interrupt\"\n"),
        (b"after-interrupt", f"{PY} -c \"{raw}\"\n".encode()),
        (b"RAW-READY", b"k"),
        (b"RAW 'k'", b"exit 3\n"),
    ]
    cmd = sandbox.exec_cmd(["bash", "--norc", "--noprofile", "-i"], env_extra=["TERM=xterm"])
    status, out = pty_run(cmd, inputs=inputs, timeout=30, cwd=sandbox.workdir)
    text = out.decode(errors="replace")
    assert "42" in text and "not a tty" in text, text
    assert "TTY-FDS" in text and "DEV-TTY" in text, text
    assert "NEWPTY /dev/pts/0 True" in text, text
    assert "Running" in text and "KILLED" in text, text
    assert "rc=130" in text and "after-interrupt" in text, text
    assert "RAW 'k'" in text, text
    assert status == 3, (status, text)


ACCEPT_SCRIPT = """\
t() {{ name=$1; shift; out=$("$@" 2>&1); rc=$?; echo "$name rc=$rc" $out; }}
t pwd pwd
t bashrc sh -c 'echo x >> {home}/.bashrc'
t tmpx sh -c 'echo x > /tmp/x-confine-accept'
t etc sh -c 'echo x > /etc/confine-accept'
t sshkey cat {home}/.ssh/id_rsa
t mount mount -t tmpfs none mnt
t vda python3 -c "import os; os.open('/dev/vda', os.O_WRONLY)"
t unshare unshare -U true
t kill kill -0 {pid}
t git sh -c 'git init -q && git add -A && git commit -qm x --allow-empty && echo committed'
t python python3 -c 'print(6*7)'
t write sh -c 'echo data > inwork && cat inwork'
"""


def test_acceptance_shell_session(sandbox, planted_home, outside_sleeper):
    """The issue's acceptance scenario, as a new user types it: `confine exec --
    bash` from the project directory (no -w). Each forbidden action fails with
    a clear error; git, python3 and writing in the workdir work.
    With every layer, writes outside meet the read-only host view ("Read-only
    file system") and processes outside do not exist in the agent's pid
    namespace ("No such process"); with Landlock alone (no namespaces) the same
    actions fail with "Permission denied" / "not permitted"."""
    os.mkdir(os.path.join(sandbox.workdir, "mnt"))
    # the user's real ~/.bashrc: ~ inside is the agent's own home (test_agent_home.py)
    script = ACCEPT_SCRIPT.format(pid=outside_sleeper, home=planted_home)
    for box, write_err, kill_err in (
            (sandbox, "Read-only file system", "No such process"),
            (sandbox.without_namespaces(), "Permission denied", "ermitted")):
        p = subprocess.run(box.cmd(["exec", *box.opts, "--", "bash", "-c", script]),
                           capture_output=True, text=True, cwd=sandbox.workdir, timeout=60)
        assert p.returncode == 0, p.stderr
        res = {l.split(" ", 1)[0]: l.split(" ", 1)[1] for l in p.stdout.splitlines()}
        why = (box.layers, res)
        assert res["pwd"] == f"rc=0 {sandbox.workdir}", res["pwd"]
        for name in ("bashrc", "tmpx", "etc"):
            assert not res[name].startswith("rc=0") and write_err in res[name], (name, why)
        assert not res["sshkey"].startswith("rc=0") and "Permission denied" in res["sshkey"], why
        assert not res["mount"].startswith("rc=0"), why
        assert not res["vda"].startswith("rc=0") and ("PermissionError" in res["vda"]
                                                     or "FileNotFoundError" in res["vda"]), why
        assert not res["unshare"].startswith("rc=0") and "Operation not permitted" in res["unshare"], why
        assert not res["kill"].startswith("rc=0") and kill_err in res["kill"], why
        assert res["git"] == "rc=0 committed", why
        assert res["python"] == "rc=0 42", why
        assert res["write"] == "rc=0 data", why
        assert not os.path.exists("/tmp/x-confine-accept") and not os.path.exists("/etc/confine-accept")
        with open(os.path.join(planted_home, ".bashrc")) as f:
            assert f.read() == "# test bashrc\n"
        shutil.rmtree(os.path.join(sandbox.workdir, ".git"))
        os.unlink(os.path.join(sandbox.workdir, "inwork"))
