"""Run by /usr/bin/python3 (AppArmor's python module is a Debian package, not in
the test venv): which AppArmor globs match which paths, using AppArmor's own
matcher. stdin: {"patterns": [...], "paths": [...]}; stdout: matrix of bools."""
import json
import sys

from apparmor.aare import AARE

req = json.load(sys.stdin)
compiled = [AARE(p, True) for p in req["patterns"]]
json.dump([[c.match(path) for path in req["paths"]] for c in compiled], sys.stdout)
