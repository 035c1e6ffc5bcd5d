"""The shipped SELinux module linked with every module of Debian's reference policy and
expanded to a kernel policy (test_selinux.py's `linked`), made in the background
(tests/background.py).

make, semodule_link and semodule_expand (and the three sesearch calls of the control)
take some 20 s of one core and wait for nothing else. So they are submitted when
collection ends (test_selinux.start_early, called by tests/conftest.py), where a selected
test uses the linked policy and the tools are there, and the fixture waits for the
result: the same commands on the same inputs, done by the time tests/export runs. Where
they were not submitted (tools missing: the fixture's need() skips or fails first),
`result` runs them then.
"""
from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import background

from confine.export.selinux import MODULE

MAKEFILE = "/usr/share/selinux/devel/Makefile"
TOOLS = ("make", "semodule_link", "semodule_expand")
# test_sesearch_and_the_query_process_agree's control: what sesearch (setools' command
# line, 1-1.5 s a call) says of these, asked right after the expand
SESEARCH = (("confine_agent_t", "confine_agent_work_t", "file"),
            ("confine_agent_t", "shadow_t", "file"),
            ("unconfined_t", "confine_agent_t", "process"))


class Linking:
    """One background run of make (the refpolicy devel Makefile), semodule_link and
    semodule_expand, its output in a directory of its own."""

    def __init__(self, repo: Path, refpolicy: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="confine-selinux-link-"))
        shutil.copytree(repo / "selinux", self.dir / "src")
        mods = [str(refpolicy / "base.pp")] + sorted(
            str(p) for p in refpolicy.glob("*.pp") if p.name != "base.pp")
        src, out = self.dir / "src", self.dir
        steps = [["make", "-C", str(src), "-f", MAKEFILE, f"{MODULE}.pp"],
                 ["semodule_link", "-o", str(out / "all.lnk"), *mods, str(src / f"{MODULE}.pp")],
                 ["semodule_expand", str(out / "all.lnk"), str(out / "policy.bin")]]
        script = "set -e\n" + "".join(f"echo {shlex.quote('+ ' + s[0])}\n{shlex.join(s)}\n"
                                      for s in steps)
        for i, (src_t, tgt_t, cls) in enumerate(SESEARCH if shutil.which("sesearch") else ()):
            q = ["sesearch", "-A", "-s", src_t, "-t", tgt_t, "-c", cls, str(out / "policy.bin")]
            script += f"echo '+ sesearch'\n{shlex.join(q)} > {shlex.quote(str(out / f'q{i}'))}\n"
        self.log = out / "log"

        def start() -> subprocess.Popen:
            with open(self.log, "w") as log:
                return subprocess.Popen(background.low(["sh", "-c", script]), stdout=log,
                                        stderr=log, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        self.job = background.submit(background.Job(start))

    def wait(self) -> Path:
        rc = self.job.wait(timeout=600)
        assert rc == 0, self.log.read_text()[-3000:]
        return self.dir / "policy.bin"

    def sesearch(self) -> list[str]:
        """sesearch's output for each of SESEARCH."""
        self.wait()
        return [(self.dir / f"q{i}").read_text() for i in range(len(SESEARCH))]

    def stop(self) -> None:
        background.drop(self.job)
        shutil.rmtree(self.dir, ignore_errors=True)


_started: Linking | None = None


def can_start(refpolicy: Path) -> bool:
    return (refpolicy / "base.pp").is_file() and Path(MAKEFILE).is_file() and all(
        shutil.which(t) for t in TOOLS)


def start(repo: Path, refpolicy: Path) -> None:
    global _started
    if _started is None:
        _started = Linking(repo, refpolicy)


def result(repo: Path, refpolicy: Path) -> Path:
    """The expanded policy (policy.bin): the background run's, or one made now."""
    start(repo, refpolicy)
    assert _started is not None
    return _started.wait()


def sesearch() -> list[str]:
    assert _started is not None, "the linked fixture made no policy"
    return _started.sesearch()


def stop() -> None:
    global _started
    if _started is not None:
        _started.stop()
        _started = None
