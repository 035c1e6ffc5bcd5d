"""What `confine exec` imports before it confines (cli/fast.py's run: the API and
runtime.launch) leaves out what a run does not need: click, PyYAML, the probe and the exporters
(OpenSSL, through hashlib, is loaded: avoiding it measured no saving, bench/tricks.py). And importing confine does not change the program's collector:
on as it was, nothing left frozen (confine/__init__.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import confine

# the confine these tests import (installed, or the checkout in the unit tier)
_ROOT = os.path.dirname(os.path.dirname(confine.__file__))
NOT_ON_EXEC = ("click", "yaml", "confine.probe",
               "confine.export", "confine.cli.main")


def _python(code: str) -> dict:
    out = subprocess.run([sys.executable, "-I", "-c",
                          f"import sys; sys.path.insert(0, {_ROOT!r})\n" + code],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_exec_path_imports() -> None:
    got = _python("import gc, json\n"
                  "import confine.cli.fast, confine.api, confine.runtime.launch\n"
                  f"print(json.dumps(sorted(set({NOT_ON_EXEC!r}) & set(sys.modules))))")
    assert got == []


def test_import_leaves_the_collector_as_it_was() -> None:
    got = _python("import gc, json\n"
                  "import confine\n"
                  "print(json.dumps([gc.isenabled(), gc.get_freeze_count()]))")
    assert got == [True, 0]
    got = _python("import gc, json\n"
                  "gc.disable()\n"
                  "import confine\n"
                  "print(json.dumps([gc.isenabled(), gc.get_freeze_count()]))")
    assert got == [False, 0]
    # what the program froze stays frozen (gc.get_objects lists no frozen object)
    got = _python("import gc, json\n"
                  "keep = [[] for _ in range(1000)]\n"
                  "gc.freeze()\n"
                  "import confine\n"
                  "ids = {id(o) for o in gc.get_objects()}\n"
                  "print(json.dumps([id(k) in ids for k in keep].count(True)))")
    assert got == 0


def test_the_builtin_profiles_are_found_without_importlib_resources() -> None:
    """The approval engine, built on every run, finds the shipped profiles (never
    edited) from the package's own file: importlib.resources and the zipfile it
    brings cost every start ~4-5 ms."""
    got = _python("import json\n"
                  "import confine.cli.fast, confine.api, confine.runtime.launch\n"
                  "from confine.approval.profile import _builtin_dirs\n"
                  "from confine.policy.load import builtin_dir\n"
                  "dirs = _builtin_dirs()\n"
                  "print(json.dumps([str(builtin_dir()) in dirs,\n"
                  "                  sorted({'importlib.resources', 'zipfile'} & set(sys.modules))]))")
    assert got == [True, []]
