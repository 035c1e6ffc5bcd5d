"""confine's lines stay out of a full-screen program's screen (issue 22 item 3).

A program that puts the terminal in raw mode and on the alternate screen (what an
agent's UI does) runs confined in a tmux pane and triggers a refusal. While it holds the
terminal the pane shows no `confine:` text; after it exits, the held line is said before
the summary. The control: the same program without raw mode gets the line at once.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time

import pytest
from conftest import PY

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed here")

PROGRAM = r'''
import os, sys, termios, time, tty
raw = sys.argv[1] == "raw"
fd = sys.stdin.fileno()
old = termios.tcgetattr(fd)
if raw:
    tty.setraw(fd)
    sys.stdout.write("\x1b[?1049h\x1b[H")
sys.stdout.write("FULLSCREEN\r\n")
sys.stdout.flush()
try:
    open(".git/hooks/pre-commit", "w")
except OSError as e:
    sys.stdout.write("TRIED %s\r\n" % e.errno)
sys.stdout.flush()
end = time.monotonic() + 60
while not os.path.exists("go") and time.monotonic() < end:
    time.sleep(0.05)
termios.tcsetattr(fd, termios.TCSADRAIN, old)
if raw:
    sys.stdout.write("\x1b[?1049l")
print("DONE", flush=True)
'''


def _tmux(label: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", label, *args], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def _wait(label: str, pred, what: str, timeout: float = 30.0, history: bool = False) -> str:
    """The pane's screen once pred holds (history: with the lines scrolled off it, as
    when the agent leaves its alternate screen and more lines follow)."""
    end = time.monotonic() + timeout
    while True:
        screen = _tmux(label, "capture-pane", "-p", "-t", "s", *(["-S", "-"] if history else []))
        if pred(screen):
            return screen
        assert time.monotonic() < end, f"{what} never seen; screen:\n{screen}"
        time.sleep(0.1)


@pytest.mark.parametrize("mode", ["raw", "cooked"])
def test_lines_wait_while_the_terminal_is_raw(sandbox, test_user, mode):
    sb = sandbox
    os.makedirs(os.path.join(sb.workdir, ".git", "hooks"))
    for d in (".git", ".git/hooks"):
        os.chown(os.path.join(sb.workdir, d), test_user.pw_uid, test_user.pw_gid)
    cmd = shlex.join(sb.exec_cmd([PY, "-c", PROGRAM, mode]))
    label = f"confine-raw-{os.getpid()}-{sb.mode}-{mode}"
    _tmux(label, "-f", "/dev/null", "new-session", "-d", "-s", "s", "-x", "200", "-y", "50",
          "-c", sb.workdir, cmd)
    try:
        _tmux(label, "set-option", "-t", "s", "remain-on-exit", "on")
        _wait(label, lambda s: "TRIED 13" in s, "the refused create")
        time.sleep(1.0)     # the supervisor says the line as it judges the call: ample time
        during = _tmux(label, "capture-pane", "-p", "-t", "s")
        if mode == "raw":
            assert "confine" not in during, during
        else:  # the control: the same refusal is on the screen at once
            assert "confine: denied: create" in during and ".git/hooks/pre-commit" in during, during
        open(os.path.join(sb.workdir, "go"), "w").close()
        after = _wait(label, lambda s: "DONE" in s and "refused during the run" in s,
                      "the end of the run", history=True)
        # said once, at the end, with the refusal named
        assert after.count("confine: denied: create") == 1, after
        assert ".git/hooks/pre-commit" in after, after
        assert ("held while the agent's full-screen program" in after) == (mode == "raw"), after
    finally:
        subprocess.run(["tmux", "-L", label, "kill-server"], capture_output=True, timeout=30)
