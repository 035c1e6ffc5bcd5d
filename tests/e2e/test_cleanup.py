"""The run's TMPDIR is removed whatever the agent left in it (issue 10, item 15).

A 1,200-level directory chain, with levels the agent made unreadable and
unwritable and a symlink out of it, once turned the agent's exit status into
125 (recursive rmtree: RecursionError) and left the directory on the host.
Control: the agent's own view of TMPDIR (it made the chain there) and a file
outside it that a symlink in the chain points at, which must survive.
"""
from __future__ import annotations

import os
import textwrap

from conftest import PY


def test_deep_tmp_tree_is_removed_and_the_status_kept(sandbox, outside_dir):
    victim = os.path.join(outside_dir, "victim")
    with open(victim, "w") as f:
        f.write("keep\n")
    code = textwrap.dedent(f"""
        import os
        tmp = os.environ["TMPDIR"]
        os.chdir(tmp)
        for i in range(1200):
            os.mkdir("d")
            os.chdir("d")
        os.symlink({victim!r}, "out")
        os.symlink({outside_dir!r}, "outdir")
        os.chdir(tmp)
        os.chmod("d/d/d", 0)
        os.chmod("d/d", 0o500)
        print(tmp, flush=True)
        raise SystemExit(5)
    """)
    p = sandbox.run([PY, "-c", code])
    tmp = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    assert tmp.startswith("/tmp/confine-"), (p.stdout, p.stderr)
    assert p.returncode == 5, p.stderr
    assert "internal error" not in p.stderr and "could not remove" not in p.stderr, p.stderr
    assert not os.path.lexists(tmp)
    with open(victim) as f:
        assert f.read() == "keep\n"
    assert os.listdir(outside_dir) == ["victim"]
