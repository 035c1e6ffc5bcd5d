#!/usr/bin/env python3
"""bench/run.py: every figure of issue 13, side by side in one run.

    bench/setup.sh                       # once, as root: bwrap, firejail, sandlock, confine-test,
                                         # this checkout's confine in /var/tmp/confine-bench/confine
    python3 bench/run.py [--quick] [--only NAME...] [--markdown docs/benchmarks.md] [--json FILE]

Sections (names for --only): cold (cold start of /bin/true), workdir (start+exit with a
large workdir), warm (spawns from the Python API), file and connect (per mediated call),
native (the same file calls through a compiled prototype of the mediator, bench/native_hop.py),
gateway (the egress gateway vs direct), tls (TLS terminated for the credential swap vs
direct TLS and the plain tunnel, bench/tls_swap.py), tar, clone, npm, make, venv (real
work as the unprivileged account, bare vs confined, on tmpfs and on disk); `work` selects the five real-work rows.

Compared: bare (unconfined), confine, bubblewrap, firejail and sandlock, each where
installed ("not installed" otherwise). Inputs (trees, archives, repositories, packages,
wheels) are made once under the cache (/var/tmp/confine-bench, CONFINE_BENCH_CACHE) and
reused; the tmpfs rows use a tmpfs mounted at $CACHE/tmpfs (left mounted). Everything is
offline: no traffic but loopback (npm is pointed at 127.0.0.1:9, pip gets --no-index, git
clones a local path).

Run as root: confine starts as root and runs the agent as confine-test (`--user`); bare
rows run as confine-test too. --quick (small N, small trees, one rep) takes about two
minutes and is for smoke-testing; only the full run is for comparison.
After a code change, `--install` reinstalls the checkout into the cache's venv (the
measurements run the installed copy, as users would); run.py warns when it is stale.
"""
from __future__ import annotations

import argparse
import base64
import ctypes
import datetime
import glob
import hashlib
import io
import json
import math
import os
import platform
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import textwrap
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import connect_mediation  # noqa: E402
import file_mediation  # noqa: E402
import gateway as gateway_bench  # noqa: E402
import native_hop  # noqa: E402
import tls_swap as tls_bench  # noqa: E402

CACHE = os.environ.get("CONFINE_BENCH_CACHE", "/var/tmp/confine-bench")
USER = "confine-test"
PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")
PATH = "/usr/local/bin:/usr/bin:/bin"
MARK_START, MARK_END = "<!-- bench:start -->", "<!-- bench:end -->"
WORK = ("tar", "clone", "npm", "make", "venv")
SECTIONS = ("cold", "workdir", "warm", "file", "connect", "native", "gateway", "tls", *WORK)
NOT_INSTALLED = "not installed"
CONFINE_COLD = "confine exec -w small -- /bin/true"

# Issue 13's goals for real work: confined wall / bare wall.
WORK_GOAL = {"npm": 1.3, "clone": 1.5, "tar": 3.0, "make": 1.05, "venv": 1.2}
# Issue 26's goals for an exclusive workdir (--exclusive-workdir): exclusive wall / bare wall.
EXCLUSIVE_GOAL = {"tar": {"tmpfs": 1.5}, "clone": {"tmpfs": 1.5, "disk": 1.5}, "npm": {"disk": 1.15}}
MEDIATION_GOAL_US = 80.0
# Issue 26 item 2: per mediated file call, one hop.
ONE_HOP_GOAL_US = 40.0
WORKDIR_GOAL_MS = 50.0
COLD_GOAL_X_PYTHON = 3.0

# name: (quick, full)
SIZES = {
    "cold_runs": (5, 20), "warm_rounds": (8, 30), "warm_warmup": (2, 5),
    "mediation_calls": (300, 2000), "reps": (1, 3), "native_rounds": (3, 7),
    "tree_pkgs": ((500, 3000), (5000, 30000)),   # 13 entries per package: 6.5k/39k, 65k/390k
    "tar_pkgs": (500, 5000),                     # 10 files, 3 dirs per package: 5k / 50k files
    "git_files": (500, 2700), "npm_pkgs": (12, 48), "npm_files": (20, 40),
    "c_files": (60, 500), "wheels": (4, 10),
}


OVERRIDE = {}


def size(name, quick):
    return OVERRIDE.get(name, SIZES[name][0 if quick else 1])


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# --- machine facts --------------------------------------------------------------------------

def landlock_abi():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        r = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        return int(r) if r > 0 else None
    except OSError:
        return None


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "kernel": platform.release(), "landlock_abi": landlock_abi(),
            "python": platform.python_version() if sys.executable == PY else _out([PY, "-c",
                      "import platform; print(platform.python_version())"]),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load": os.getloadavg()[0]}


def _out(argv, **kw):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


# --- the tools ------------------------------------------------------------------------------

def source_hash():
    h = hashlib.sha256()
    files = sorted(glob.glob(os.path.join(ROOT, "confine", "**", "*.py"), recursive=True)
                   + glob.glob(os.path.join(ROOT, "profiles", "*.yaml")) + [os.path.join(ROOT, "pyproject.toml")])
    for p in files:
        h.update(os.path.relpath(p, ROOT).encode() + b"\0")
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def bench_prefix():
    return os.path.join(CACHE, "confine")


def stamp_install():
    with open(os.path.join(bench_prefix(), ".bench-source"), "w") as f:
        f.write(source_hash() + "\n")


def install_checkout():
    log(f"installing this checkout into {bench_prefix()} (install.sh) ...")
    env = dict(os.environ, CONFINE_NO_LINK="1", CONFINE_PREFIX=bench_prefix())
    subprocess.run([os.path.join(ROOT, "install.sh")], env=env, check=True, stdout=subprocess.DEVNULL)
    stamp_install()


def find_confine(explicit):
    """(path to confine, a note on where it came from)."""
    if explicit:
        return explicit, "given with --confine"
    if os.environ.get("CONFINE"):
        return os.environ["CONFINE"], "$CONFINE"
    mine = os.path.join(bench_prefix(), "bin", "confine")
    if os.access(mine, os.X_OK):
        try:
            with open(os.path.join(bench_prefix(), ".bench-source")) as f:
                fresh = f.read().strip() == source_hash()
        except OSError:
            fresh = False
        return mine, "this checkout" if fresh else "STALE: the checkout changed since; rerun with --install"
    found = shutil.which("confine")
    if found:
        return found, "confine on PATH (not necessarily this checkout: run bench/setup.sh)"
    return None, NOT_INSTALLED


def venv_site(prefix):
    hits = glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages"))
    return hits[0] if hits else None


def tools(confine):
    sandlock_py = os.path.join(CACHE, "sandlock", "bin", "python")
    has_sandlock = os.access(sandlock_py, os.X_OK) and subprocess.run(
        [sandlock_py, "-c", "import sandlock"], capture_output=True).returncode == 0
    return {
        "confine": confine,
        "bwrap": shutil.which("bwrap"),
        "firejail": shutil.which("firejail"),
        "sandlock": venv_site(os.path.join(CACHE, "sandlock")) if has_sandlock else None,
        "npm": shutil.which("npm"), "cc": shutil.which("cc"), "make": shutil.which("make"),
        "git": shutil.which("git"), "tar": shutil.which("tar"),
    }


def versions(t):
    v = {}
    if t["confine"]:
        v["confine"] = _out([t["confine"], "--version"]).split()[-1:] or ["?"]
        v["confine"] = v["confine"][0]
    if t["bwrap"]:
        v["bwrap"] = _out([t["bwrap"], "--version"]).replace("bubblewrap ", "")
    if t["firejail"]:
        first = _out([t["firejail"], "--version"]).splitlines()
        v["firejail"] = first[0].split()[-1] if first else "?"
    if t["sandlock"]:
        v["sandlock"] = _out([PY, "-I", "-c", f"import sys; sys.path.insert(0, {t['sandlock']!r}); "
                              "from importlib.metadata import version; print(version('sandlock'))"])
    commit = _out(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = _out(["git", "-C", ROOT, "status", "--porcelain", "--", "confine", "profiles"])
    v["commit"] = commit + ("+changes" if dirty else "")
    return v


# --- users, directories ---------------------------------------------------------------------

def ensure_user():
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        log(f"creating the account {USER} (useradd --create-home, as tests do)")
        subprocess.run(["useradd", "--create-home", USER], check=True)
        return pwd.getpwnam(USER)


def chown_tree(path, pw):
    subprocess.run(["chown", "-R", f"{pw.pw_uid}:{pw.pw_gid}", path], check=True)


def mkdir_for(path, pw, mode=0o755):
    os.makedirs(path, exist_ok=True)
    os.chmod(path, mode)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def tmpfs_root():
    """A tmpfs of our own under the cache (mounted once, left for later runs); /dev/shm otherwise."""
    d = os.path.join(CACHE, "tmpfs")
    os.makedirs(d, exist_ok=True)
    if not os.path.ismount(d):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8g,mode=0755", "confine-bench", d],
                           capture_output=True, text=True)
        if r.returncode:
            log(f"cannot mount a tmpfs at {d} ({r.stderr.strip()}); using /dev/shm")
            d = os.path.join("/dev/shm", "confine-bench")
            os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    return d


def user_env(pw, home, tmp):
    return {"PATH": PATH, "HOME": home, "USER": pw.pw_name, "LOGNAME": pw.pw_name, "LANG": "C.UTF-8",
            "TMPDIR": tmp}


# --- inputs, made once ----------------------------------------------------------------------

def _done(path):
    return os.path.exists(path + ".done")


def _mark(path):
    with open(path + ".done", "w") as f:
        f.write(datetime.datetime.now(datetime.timezone.utc).isoformat() + "\n")


def make_tree(pkgs, pw):
    """A workdir: git init + 10 files + node_modules of `pkgs` packages, 13 entries each."""
    d = os.path.join(CACHE, "trees", f"w{pkgs}")
    if _done(d):
        return d
    log(f"making a workdir of {pkgs * 13 + 10:,} entries (once) in {d}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    subprocess.run(["git", "init", "-q", d], check=True)
    for i in range(10):
        with open(os.path.join(d, f"file{i}.txt"), "w") as f:
            f.write(f"{i}\n")
    nm = os.path.join(d, "node_modules")
    os.mkdir(nm)
    for p in range(pkgs):
        base = os.path.join(nm, f"pkg{p}")
        os.mkdir(base)
        os.mkdir(os.path.join(base, "lib"))
        os.mkdir(os.path.join(base, "dist"))
        for name in ("package.json", "index.js", "README.md", "lib/a.js", "lib/b.js", "lib/c.js", "lib/d.js",
                     "dist/a.js", "dist/b.js", "dist/c.js"):
            with open(os.path.join(base, name), "w") as f:
                f.write("x\n")
    chown_tree(d, pw)
    _mark(d)
    return d


def small_tree(pw):
    d = os.path.join(CACHE, "trees", "small")
    if not _done(d):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        subprocess.run(["git", "init", "-q", d], check=True)
        for i in range(10):
            with open(os.path.join(d, f"file{i}.txt"), "w") as f:
                f.write(f"{i}\n")
        chown_tree(d, pw)
        _mark(d)
    return d


def inputs_dir():
    d = os.path.join(CACHE, "inputs")
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o755)
    return d


def make_tar(pkgs):
    path = os.path.join(inputs_dir(), f"nm{pkgs * 10}.tar")
    if _done(path):
        return path
    log(f"making {path} ({pkgs * 10:,} files, {pkgs * 3:,} dirs; once)")
    now = time.time()

    def entry(name, data=None):
        ti = tarfile.TarInfo(name)
        ti.mtime, ti.uid, ti.gid = now, 0, 0
        if data is None:
            ti.type, ti.mode = tarfile.DIRTYPE, 0o755
            tf.addfile(ti)
        else:
            ti.size, ti.mode = len(data), 0o644
            tf.addfile(ti, io.BytesIO(data))
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        entry("node_modules")
        for p in range(pkgs):
            b = f"node_modules/pkg{p}"
            entry(b)
            entry(b + "/lib")
            entry(b + "/dist")
            for name in ("package.json", "index.js", "README.md", "lib/a.js", "lib/b.js", "lib/c.js", "lib/d.js",
                         "dist/a.js", "dist/b.js", "dist/c.js"):
                entry(f"{b}/{name}", f"// {p} {name}\nmodule.exports = {p};\n".encode())
    os.chmod(path, 0o644)
    _mark(path)
    return path


def make_git_repo(nfiles, pw):
    path = os.path.join(inputs_dir(), f"repo{nfiles}.git")
    if _done(path):
        return path
    log(f"making {path} ({nfiles:,} files, packed; once)")
    src = path + ".src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(src)
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.invalid", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@example.invalid")
    subprocess.run(["git", "init", "-q", src], check=True)
    for i in range(nfiles):
        sub = os.path.join(src, f"dir{i % 50}", f"sub{i % 7}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"file{i}.c"), "w") as f:
            f.write(f"/* file {i} */\nint f{i}(void) {{ return {i}; }}\n" + "// padding\n" * (i % 40))
    subprocess.run(["git", "-C", src, "add", "-A"], check=True)
    subprocess.run(["git", "-C", src, "commit", "-qm", "bench"], check=True, env=env)
    subprocess.run(["git", "clone", "-q", "--bare", "--no-local", src, path], check=True)
    subprocess.run(["git", "-C", path, "gc", "-q"], check=True)
    shutil.rmtree(src)
    chown_tree(path, pw)   # git refuses repositories owned by another user (safe.directory)
    _mark(path)
    return path


def _tgz(path, files):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo("package/" + name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            tf.addfile(ti, io.BytesIO(data))


def make_npm(npkgs, nfiles):
    """Local tarballs (npm's `package/` layout), installed through `file:` dependencies."""
    d = os.path.join(inputs_dir(), f"npm{npkgs}x{nfiles}")
    if _done(d):
        return d
    log(f"making {d} ({npkgs} local packages of {nfiles} files; once)")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    deps = {}
    for p in range(npkgs):
        name = f"bench-pkg{p}"
        files = {"package.json": json.dumps({"name": name, "version": "1.0.0", "main": "index.js"}).encode(),
                 "index.js": f"module.exports = {p};\n".encode(), "README.md": b"bench\n"}
        for i in range(nfiles - 3):
            files[f"lib/m{i % 4}/sub{i % 3}/f{i}.js"] = f"exports.v = {i};\n".encode()
        tgz = os.path.join(d, f"{name}-1.0.0.tgz")
        _tgz(tgz, files)
        deps[name] = "file:" + tgz
    with open(os.path.join(d, "package.json"), "w") as f:
        json.dump({"name": "bench-app", "version": "1.0.0", "private": True, "dependencies": deps}, f)
    subprocess.run(["chmod", "-R", "a+rX", d], check=True)
    _mark(d)
    return d


def make_c(nfiles):
    d = os.path.join(inputs_dir(), f"c{nfiles}")
    if _done(d):
        return d
    log(f"making {d} ({nfiles} C files and a Makefile; once)")
    shutil.rmtree(d, ignore_errors=True)
    src = os.path.join(d, "src")
    os.makedirs(src)
    for i in range(nfiles):
        with open(os.path.join(src, f"f{i}.c"), "w") as f:
            f.write(f"#include <string.h>\nint f{i}(const char *s) {{ return (int)strlen(s) + {i}; }}\n")
    with open(os.path.join(src, "main.c"), "w") as f:
        f.write("".join(f"int f{i}(const char *);\n" for i in range(nfiles)))
        f.write("int main(void) { int s = 0;\n" + "".join(f" s += f{i}(\"x\");\n" for i in range(nfiles))
                + " return s == 0; }\n")
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write(textwrap.dedent(f"""\
            SRC := {src}
            OBJS := $(patsubst $(SRC)/%.c,%.o,$(wildcard $(SRC)/*.c))
            prog: $(OBJS)
            \t$(CC) -o $@ $^
            %.o: $(SRC)/%.c
            \t$(CC) -O1 -c -o $@ $<
            """))
    subprocess.run(["chmod", "-R", "a+rX", d], check=True)
    _mark(d)
    return d


def _wheel(path, name, deps, nmods):
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/__init__.py": f"VALUE = {name!r}\n".encode()}
    for i in range(nmods):
        files[f"{name}/m{i}.py"] = f"def f():\n    return {i}\n".encode()
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(f"Requires-Dist: {x}\n" for x in deps)
    files[f"{dist}/METADATA"] = meta.encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: confine-bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for n, data in files.items():
        digest = hashlib.sha256(data).digest()
        record.append(f"{n},sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in files.items():
            z.writestr(n, data)


def make_wheels(n):
    d = os.path.join(inputs_dir(), f"wheels{n}")
    if _done(d):
        return d
    log(f"making {d} ({n} tiny wheels, each requiring the previous one; once)")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for i in range(n):
        name = f"benchwheel{i}"
        _wheel(os.path.join(d, f"{name}-1.0-py3-none-any.whl"), name, [f"benchwheel{i - 1}"] if i else [], 30)
    subprocess.run(["chmod", "-R", "a+rX", d], check=True)
    _mark(d)
    return d


# --- timing ---------------------------------------------------------------------------------

def spawn_s(argv, env=None):
    """Wall seconds from posix_spawn to reaped exit; output to /dev/null."""
    fa = [(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0), (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)]
    t = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env if env is not None else os.environ, file_actions=fa)
    _, st = os.waitpid(pid, 0)
    dt = time.perf_counter() - t
    if os.waitstatus_to_exitcode(st) != 0:
        raise RuntimeError(f"exit {os.waitstatus_to_exitcode(st)}: {' '.join(argv)}")
    return dt


def stats(xs):
    xs = sorted(xs)
    p90 = xs[max(0, math.ceil(0.9 * len(xs)) - 1)]   # nearest rank
    return {"median": statistics.median(xs), "p90": p90, "min": xs[0], "max": xs[-1], "n": len(xs)}


def interleaved(cands, runs, warmup):
    """cands: {label: argv}. Rounds in rotated order; {label: stats in ms} or an error string."""
    times = {k: [] for k in cands}
    errors = {}
    labels = list(cands)
    for r in range(warmup + runs):
        order = labels[r % len(labels):] + labels[:r % len(labels)]
        for k in order:
            if k in errors:
                continue
            try:
                dt = spawn_s(cands[k])
            except (RuntimeError, OSError) as e:
                errors[k] = str(e)
                continue
            if r >= warmup:
                times[k].append(dt * 1000)
    return {k: (errors[k] if k in errors else stats(times[k])) for k in cands}


# --- sections -------------------------------------------------------------------------------

def cold_cands(t, small):
    c = {"bare /bin/true": ["/bin/true"], "python3 -I -c pass": [PY, "-I", "-c", "pass"]}
    c[CONFINE_COLD] = [t["confine"], "exec", "-w", small, "--user", USER, "--", "/bin/true"] if t["confine"] else None
    bw = [t["bwrap"], "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"]
    c["bwrap --unshare-all --ro-bind / / ..."] = bw if t["bwrap"] else None
    fj = [t["firejail"], "--quiet", "--noprofile", "--net=none", "/bin/true"]
    c["firejail --noprofile --net=none"] = fj if t["firejail"] else None
    # sandlock has no launcher binary: a cold start is an interpreter, its import and one run.
    c["sandlock (python3 -I, import, Sandbox.run)"] = ([PY, "-I", "-c", SANDLOCK_COLD % (t["sandlock"], small, small)]
                                                       if t["sandlock"] else None)
    return c


SANDLOCK_POLICY = ('Sandbox(fs_writable=[%r], fs_readable=["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", '
                   '"/dev"], cwd=%r, clean_env=True)')
SANDLOCK_COLD = ("import sys; sys.path.insert(0, %r); from sandlock import Sandbox; "
                 "r = " + SANDLOCK_POLICY + ".run(['/bin/true']); sys.exit(0 if r.success else 1)")


def section_cold(t, small, quick):
    cands = cold_cands(t, small)
    live = {k: v for k, v in cands.items() if v}
    res = interleaved(live, size("cold_runs", quick), 2)
    return {k: res.get(k, NOT_INSTALLED) for k in cands}


def section_workdir(t, small, pw, quick):
    if not t["confine"]:
        return {"confine": NOT_INSTALLED}
    sizes = size("tree_pkgs", quick)
    trees = {"small": small}
    for p in sizes:
        trees[f"{p * 13 + 10:,} entries"] = make_tree(p, pw)
    cands = {k: [t["confine"], "exec", "-w", d, "--user", USER, "--", "/bin/true"] for k, d in trees.items()}
    runs = size("cold_runs", quick) if quick else max(5, size("cold_runs", quick) // 2)
    # The warm-up run keeps the workdir's directory index: these are second runs, the goal's figure.
    res = interleaved(cands, runs, 1)
    first = {}
    for k, d in trees.items():
        times = []
        for _ in range(max(3, runs // 2)):
            drop_index(d)
            try:
                times.append(spawn_s(cands[k]) * 1000)
            except (RuntimeError, OSError) as e:
                first[k] = str(e)
                break
        first.setdefault(k, stats(times))
    out = {"trees": res, "first": first, "largest": f"{sizes[-1] * 13 + 10:,} entries",
           "largest_entries": sizes[-1] * 13 + 10}
    return out


INDEX_DIR = "/var/lib/confine/index"


def drop_index(workdir):
    """Remove the directory index confine keeps for `workdir` (a first run again)."""
    key = os.fsencode(os.path.realpath(workdir))
    for n in os.listdir(INDEX_DIR) if os.path.isdir(INDEX_DIR) else ():
        p = os.path.join(INDEX_DIR, n)
        try:
            with open(p, "rb") as f:
                if key in f.read():
                    os.unlink(p)
        except OSError:
            pass


WARM = r'''
import json, os, subprocess, sys, time, statistics
cfg = json.loads(sys.argv[1])
for p in cfg["paths"]:
    sys.path.insert(0, p)
W, user = cfg["workdir"], cfg["user"]
cands = {}
cands["subprocess.run(/bin/true)"] = lambda: subprocess.run(["/bin/true"], capture_output=True, timeout=30)
if cfg["bwrap"]:
    bw = [cfg["bwrap"], "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "/bin/true"]
    cands["bubblewrap via subprocess.run"] = lambda: subprocess.run(bw, capture_output=True, timeout=30, check=True)
errors = {}
if cfg["confine"]:
    import confine
    def crun():
        if confine.run(["/bin/true"], workdir=W, user=user) != 0:
            raise RuntimeError("status")
    cands["confine.run"] = crun
    if hasattr(confine, "Sandbox"):
        # The prepared object of issue 13, goal 3, with capture and a timeout (goal 3
        # includes both).
        try:
            sb = confine.Sandbox(workdir=W, user=user)
            for kw in ({"capture": True, "timeout": 30}, {"timeout": 30}, {}):
                try:
                    sb.run(["/bin/true"], **kw)
                    break
                except TypeError:
                    continue
            def srun(kw=kw):
                r = sb.run(["/bin/true"], **kw)
                st = r if isinstance(r, int) else getattr(r, "returncode", getattr(r, "status", 0))
                if st != 0:
                    raise RuntimeError("status %r" % (st,))
            cands["confine.Sandbox(...).run"] = srun
        except Exception as e:
            errors["confine.Sandbox(...).run"] = "%s: %s" % (type(e).__name__, e)
if cfg["sandlock"]:
    from sandlock import Sandbox
    def slrun():
        r = Sandbox(fs_writable=[W], fs_readable=["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", "/dev"],
                    cwd=W, clean_env=True).run(["/bin/true"], timeout=30)
        if not r.success:
            raise RuntimeError("sandlock run failed")
    cands["sandlock Sandbox(...).run"] = slrun
times = {k: [] for k in cands}
labels = list(cands)
for r in range(cfg["warmup"] + cfg["rounds"]):
    order = labels[r % len(labels):] + labels[:r % len(labels)]
    for k in order:
        if k in errors:
            continue
        t = time.perf_counter()
        try:
            cands[k]()
        except Exception as e:
            errors[k] = "%s: %s" % (type(e).__name__, e)
            continue
        if r >= cfg["warmup"]:
            times[k].append((time.perf_counter() - t) * 1000)
print(json.dumps({"times": times, "errors": errors}))
'''


def section_warm(t, small, quick):
    paths = []
    if t["confine"]:
        site = venv_site(os.path.dirname(os.path.dirname(os.path.realpath(t["confine"]))))
        if site:
            paths.append(site)
    if t["sandlock"]:
        paths.append(t["sandlock"])
    cfg = {"paths": paths, "workdir": small, "user": USER, "bwrap": t["bwrap"], "confine": bool(t["confine"]),
           "sandlock": bool(t["sandlock"]), "rounds": size("warm_rounds", quick), "warmup": size("warm_warmup", quick)}
    p = subprocess.run([PY, "-I", "-c", WARM, json.dumps(cfg)], capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise RuntimeError(f"warm spawn loop failed: {p.stderr.strip()[-2000:]}")
    data = json.loads(p.stdout.splitlines()[-1])
    out = {k: stats(v) for k, v in data["times"].items() if v}
    out.update(data["errors"])
    for k in ("confine.run", "bubblewrap via subprocess.run", "sandlock Sandbox(...).run"):
        out.setdefault(k, NOT_INSTALLED)
    return out


def section_file(t, base, quick):
    if not t["confine"]:
        return NOT_INSTALLED
    return file_mediation.measure(size("mediation_calls", quick), confine=t["confine"], user=USER, parent=base,
                                  git=False)


def section_connect(t, base, quick):
    if not t["confine"]:
        return NOT_INSTALLED
    return connect_mediation.measure(size("mediation_calls", quick), confine=t["confine"], user=USER, parent=base)


def section_native(base, quick):
    """bench/native/hop.c's modes, interleaved, as the account (no confine involved)."""
    return native_hop.measure(size("mediation_calls", quick), size("native_rounds", quick), user=USER, parent=base)


def section_gateway(t, quick, bench=gateway_bench):
    """The egress gateway against a direct connection on loopback (bench/gateway.py), run by
    the Python of the confine install (it imports confine.gateway); `bench`: the module
    measuring (bench/tls_swap.py for the credential swap's TLS termination)."""
    if not t["confine"]:
        return NOT_INSTALLED
    py = os.path.join(os.path.dirname(os.path.realpath(t["confine"])), "python")
    if not os.access(py, os.X_OK):
        py = os.path.join(os.path.dirname(t["confine"]), "python")
    if not os.access(py, os.X_OK):
        return "no python beside confine"
    out = {"loopback": bench.measure(py, quick)}
    if os.geteuid() == 0 and shutil.which("tc") and shutil.which("ip"):
        # the realistic path: the origin behind a veth shaped to 1 Gbit/s (this machine only)
        out["link"] = bench.measure(py, quick, link=LINK_RATE)
    return out


LINK_RATE = "1gbit"


# --- real work ------------------------------------------------------------------------------

WRAP = 's=$(date +%s%N); "$@" >/dev/null || exit $?; e=$(date +%s%N); echo "@@inner $((e-s))"'


def workload(name, t, pw, quick):
    """(argv run in a fresh workdir, setup(wd) outside the timing, inputs dir to grant) or a skip reason."""
    if name == "tar":
        if not t["tar"]:
            return "no tar"
        arc = make_tar(size("tar_pkgs", quick))
        return ["tar", "xf", arc], None, os.path.dirname(arc), f"`tar xf` of {size('tar_pkgs', quick) * 10:,} files"
    if name == "clone":
        if not t["git"]:
            return "no git"
        repo = make_git_repo(size("git_files", quick), pw)
        return (["git", "clone", "-q", "--no-local", repo, "r"], None, os.path.dirname(repo),
                f"`git clone` of {size('git_files', quick):,} files")
    if name == "npm":
        if not t["npm"]:
            return "npm not installed"
        d = make_npm(size("npm_pkgs", quick), size("npm_files", quick))

        def setup(wd):
            shutil.copy(os.path.join(d, "package.json"), wd)
            with open(os.path.join(wd, ".npmrc"), "w") as f:   # nothing but loopback, even by mistake
                f.write("registry=http://127.0.0.1:9/\noffline=true\naudit=false\nfund=false\n"
                        "update-notifier=false\ncache=${PWD}/.npm-cache\n")
        n = size("npm_pkgs", quick) * size("npm_files", quick)
        return (["npm", "install", "--offline", "--no-audit", "--no-fund", "--no-update-notifier",
                 "--cache", ".npm-cache", "--loglevel=error"], setup, d,
                f"`npm install` of {size('npm_pkgs', quick)} local packages ({n:,} files)")
    if name == "make":
        if not (t["cc"] and t["make"]):
            return "no cc or make"
        d = make_c(size("c_files", quick))
        return (["make", "-j2", "-s", "-f", os.path.join(d, "Makefile")], None, d,
                f"`make -j2` of {size('c_files', quick)} C files + link")
    if name == "venv":
        if subprocess.run([PY, "-c", "import venv, ensurepip"], capture_output=True).returncode:
            return f"{PY} has no venv/ensurepip (python3-venv)"
        d = make_wheels(size("wheels", quick))
        n = size("wheels", quick)
        script = (f"{PY} -m venv .venv && .venv/bin/pip install -q --no-index --find-links {d} --no-cache-dir "
                  f"--disable-pip-version-check benchwheel{n - 1}")
        return ["/bin/sh", "-c", script], None, d, f"`python3 -m venv` + `pip install` of {n} local wheels"
    raise ValueError(name)


def run_once(argv, wd, side, t, pw, grant):
    """side: bare, confined (the default mode) or exclusive (--exclusive-workdir)."""
    # The bare side's TMPDIR is where confine puts its private one (/tmp), whatever the workdir's disk.
    tmp = mkdir_for(os.path.join("/tmp", "confine-bench-" + os.path.basename(wd)), pw, 0o700)
    wrapped = ["/bin/sh", "-c", WRAP, "sh", *argv]
    confined = side != "bare"
    if confined:
        mode = ["--exclusive-workdir"] if side == "exclusive" else []
        cmd = [t["confine"], "exec", "-w", wd, "--user", USER, "--read", grant, *mode, "--", *wrapped]
        kw = {}
        env = {"PATH": PATH, "LANG": "C.UTF-8", "HOME": "/root"}
    else:
        cmd = wrapped
        kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        env = user_env(pw, pw.pw_dir, tmp)
    os.sync()   # the previous rep's writeback (and its removal) not billed to this one
    start = time.perf_counter()
    p = subprocess.run(cmd, cwd=wd, env=env, capture_output=True, text=True, timeout=3600, **kw)
    wall = time.perf_counter() - start
    shutil.rmtree(tmp, ignore_errors=True)
    m = re.search(r"@@inner (\d+)", p.stdout)
    if p.returncode or not m:
        raise RuntimeError(f"{side} {' '.join(argv)}: exit {p.returncode}: "
                           f"{p.stderr.strip()[-1500:]}")
    return wall, int(m.group(1)) / 1e9


def section_work(name, t, pw, bases, quick):
    w = workload(name, t, pw, quick)
    if isinstance(w, str):
        return {"skipped": w}
    argv, setup, grant, label = w
    out = {"label": label, "goal": WORK_GOAL[name]}
    for fs, base in bases.items():
        scratch = mkdir_for(os.path.join(base, "work"), pw)
        res = {"bare": [], "confined": [], "inner": [], "exclusive": [], "inner_exclusive": []}
        sides = ["bare", "confined"] if t["confine"] else ["bare"]
        if t["confine"] and name in EXCLUSIVE_GOAL:
            sides.append("exclusive")
        # One untimed bare run first: page cache and binaries warm for both sides.
        wd = mkdir_for(os.path.join(scratch, f"{name}-warmup"), pw)
        if setup:
            setup(wd)
            chown_tree(wd, pw)
        try:
            run_once(argv, wd, "bare", t, pw, grant)
        finally:
            shutil.rmtree(wd, ignore_errors=True)
        for rep in range(size("reps", quick)):
            for side in (sides if rep % 2 == 0 else sides[::-1]):
                wd = mkdir_for(os.path.join(scratch, f"{name}-{side[0]}{rep}"), pw)
                if setup:
                    setup(wd)
                    chown_tree(wd, pw)
                try:
                    wall, inner = run_once(argv, wd, side, t, pw, grant)
                finally:
                    shutil.rmtree(wd, ignore_errors=True)
                res[side].append(wall)
                if side == "confined":
                    res["inner"].append(inner)
                elif side == "exclusive":
                    res["inner_exclusive"].append(inner)
        r = {k: statistics.median(v) for k, v in res.items() if v}
        if "confined" in r:
            r["ratio"] = r["confined"] / r["bare"]
        if "exclusive" in r:
            r["ratio_exclusive"] = r["exclusive"] / r["bare"]
        out[fs] = r
        log(f"  {name} on {fs}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
    return out


# --- report ---------------------------------------------------------------------------------

def fmt_ms(s):
    if isinstance(s, str):
        return (s if len(s) < 70 else s[:67] + "..."), ""
    return f"{s['median']:.1f}", f"{s['p90']:.1f}"


def goals(R):
    """[(goal, target, measured, ratio or None)]; ratio = measured / target, <= 1 meets it."""
    g = []
    cold = R.get("cold")
    if cold:
        c, py, fj = (cold.get(CONFINE_COLD), cold.get("python3 -I -c pass"),
                     cold.get("firejail --noprofile --net=none"))
        if isinstance(c, dict) and isinstance(py, dict):
            tgt = COLD_GOAL_X_PYTHON * py["median"]
            g.append(("1. cold start `confine exec -- /bin/true`", f"<= 3 x python3 -I ({tgt:.0f} ms)",
                      f"{c['median']:.0f} ms", c["median"] / tgt))
        if isinstance(c, dict) and isinstance(fj, dict):
            g.append(("1. ... and ahead of firejail", f"<= firejail ({fj['median']:.0f} ms)", f"{c['median']:.0f} ms",
                      c["median"] / fj["median"]))
    wd = R.get("workdir")
    if wd and "trees" in wd:
        small, big = wd["trees"].get("small"), wd["trees"].get(wd["largest"])
        if isinstance(small, dict) and isinstance(big, dict):
            added = big["median"] - small["median"]
            full = wd["largest_entries"] >= 390_000
            est = "" if full else f" (about +{added * 390_000 / wd['largest_entries']:.0f} ms at 390k, linearly)"
            g.append((f"2. start+exit, workdir of {wd['largest']}", "<= +50 ms" + ("" if full else " at 390k"),
                      f"+{added:.0f} ms{est}", added / WORKDIR_GOAL_MS if full else None))
    warm = R.get("warm")
    if warm:
        sl = warm.get("sandlock Sandbox(...).run")
        mine_k = "confine.Sandbox(...).run" if isinstance(warm.get("confine.Sandbox(...).run"), dict) else "confine.run"
        mine = warm.get(mine_k)
        if isinstance(mine, dict) and isinstance(sl, dict):
            g.append((f"3. warm spawn `{mine_k}`", f"<= sandlock ({sl['median']:.1f} ms)", f"{mine['median']:.1f} ms",
                      mine["median"] / sl["median"]))
    f = R.get("file")
    if isinstance(f, dict):
        worst = max((v["per_mediated_call"], k) for k, v in f["calls"].items() if v["per_mediated_call"] is not None)
        g.append(("4. per mediated file call (worst kind)", "<= +80 us", f"+{worst[0]:.0f} us ({worst[1]})",
                  worst[0] / MEDIATION_GOAL_US))
    c = R.get("connect")
    if isinstance(c, dict):
        g.append(("4. per mediated unix connect", "<= +80 us", f"+{c['added']:.0f} us", c["added"] / MEDIATION_GOAL_US))
    nat = R.get("native")
    if isinstance(nat, dict) and "summary" in nat:
        # the same kinds of call on both sides: Python's one hop against the compiled floor
        kinds = [k for k, v in nat["summary"].items() if v["mediated"]]
        if isinstance(f, dict):
            py = [(f["calls"][k]["per_mediated_call"], k) for k in kinds if k in f["calls"]]
            if py:
                worst = max(py)
                g.append(("issue 26: per mediated file call, confine (Python, one hop; the prototype's kinds)",
                          f"<= +{ONE_HOP_GOAL_US:.0f} us", f"+{worst[0]:.0f} us ({worst[1]})",
                          max(worst[0], 0.0) / ONE_HOP_GOAL_US))
        for mode, what in (("hop1", "compiled one-hop prototype"),
                           ("hop1steps", "compiled one-hop prototype + confine's per-call steps")):
            worst = max((nat["summary"][k][mode]["median"], k) for k in kinds)
            g.append((f"issue 26: per mediated file call, {what}", f"<= +{ONE_HOP_GOAL_US:.0f} us",
                      f"+{worst[0]:.0f} us ({worst[1]}; median of {nat['rounds']} rounds)",
                      max(worst[0], 0.0) / ONE_HOP_GOAL_US))
    gws = R.get("gateway")
    if isinstance(gws, dict):
        # issue 14's goals: throughput through the gateway, added connect latency; over a
        # network path (the shaped veth) where measured, loopback (CPU-bound) as the floor
        for where, gw in (("1 Gbit/s veth", gws.get("link")), ("loopback", gws.get("loopback"))):
            if not isinstance(gw, dict):
                continue
            g.append((f"issue 14: gateway throughput ({where})", ">= 0.90 x direct",
                      f"{gw['bulk_ratio']:.2f}x", 0.90 / gw["bulk_ratio"] if gw["bulk_ratio"] > 0 else None))
            g.append((f"issue 14: gateway added connect latency, median ({where})", "< 1 ms",
                      f"{gw['setup_added_ms']:+.3f} ms", max(gw["setup_added_ms"], 0.0) / 1.0))
    tls = R.get("tls")
    if isinstance(tls, dict):
        # issue 24's goals: TLS terminated for the credential swap against direct TLS
        for where, r in (("1 Gbit/s veth", tls.get("link")), ("loopback", tls.get("loopback"))):
            if not isinstance(r, dict):
                continue
            g.append((f"issue 24: TLS swap throughput ({where})", ">= 0.80 x direct",
                      f"{r['bulk_ratio']:.2f}x", 0.80 / r["bulk_ratio"] if r["bulk_ratio"] > 0 else None))
            g.append((f"issue 24: TLS swap added connection setup, median ({where})", "< 2 ms",
                      f"{r['setup_added_ms']:+.3f} ms", max(r["setup_added_ms"], 0.0) / 2.0))
    for name in WORK:
        w = R.get(name)
        if not isinstance(w, dict) or "skipped" in w:
            continue
        for fs in ("tmpfs", "disk"):
            if fs in w and "ratio" in w[fs]:
                r = w[fs]["ratio"]
                g.append((f"5. {name} ({fs})", f"<= {w['goal']}x", f"{r:.2f}x", r / w["goal"]))
        for fs, goal in EXCLUSIVE_GOAL.get(name, {}).items():
            if fs in w and "ratio_exclusive" in w[fs]:
                r = w[fs]["ratio_exclusive"]
                g.append((f"issue 26: {name} ({fs}), --exclusive-workdir", f"<= {goal}x", f"{r:.2f}x",
                          r / goal))
    return g


def render(R, M, V, quick, markdown, only=None):
    """The report as Markdown (README) or plain text (stdout): same tables."""
    L = []

    def table(head, rows):
        if markdown:
            L.append("| " + " | ".join(head) + " |")
            L.append("|" + "---|" * len(head))
            L.extend("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows)
        else:
            cols = [head, *rows]
            w = [max(len(str(r[i])) for r in cols) for i in range(len(head))]
            L.append("  ".join(str(h).ljust(w[i]) for i, h in enumerate(head)))
            L.append("  ".join("-" * x for x in w))
            L.extend("  ".join(str(c).ljust(w[i]) for i, c in enumerate(r)) for r in rows)
        L.append("")

    def title(s):
        L.append(f"**{s}**" if markdown else f"== {s}")
        L.append("")

    tv = ", ".join(f"{k} {v}" for k, v in V.items() if k not in ("commit", "confine from"))
    if "confine from" in V:
        tv += f"; confine measured: {V['confine from']}"
    note = "quick run, shared machine: not for comparison" if quick else "full run"
    if only:
        note += "; partial: " + ", ".join(n for n in SECTIONS if n in only) + " only"
    cmd = "python3 bench/run.py" + (" --quick" if quick else "") + (" --only " + " ".join(sorted(only)) if only else "")
    L.append((f"_Generated by `{cmd} --markdown docs/benchmarks.md`" if markdown else f"_{cmd}")
             + f" ({note}), {M['date']}: {M['cores']} cores ({M['cpu']}), kernel {M['kernel']}, Landlock ABI "
             f"{M['landlock_abi']}, Python {M['python']}, load average {M['load']:.2f} at start, "
             f"{M.get('load_end', M['load']):.2f} at the end; confine commit "
             f"{V.get('commit', '?')}; {tv}._")
    L.append("")
    G = goals(R)
    if G:
        title("Goals of issue 13 (ratio = measured / goal: 1 or less meets it)")
        table(["goal", "target", "measured", "ratio", ""],
              [(a, b, c, "-" if r is None else f"{r:.2f}", "-" if r is None else ("met" if r <= 1 else "not met"))
               for a, b, c, r in G])
    if "cold" in R:
        title("Cold start of `/bin/true`, ms (started as root; confine runs it as confine-test)")
        py = R["cold"].get("python3 -I -c pass")
        rows = []
        for k, s in R["cold"].items():
            med, p90 = fmt_ms(s)
            x = f"{s['median'] / py['median']:.1f}" if isinstance(s, dict) and isinstance(py, dict) else ""
            rows.append((k, med, p90, x))
        n = next((s["n"] for s in R["cold"].values() if isinstance(s, dict)), 0)
        table(["command", f"median (n={n})", "p90", "x python3 -I"], rows)
    if "workdir" in R and "trees" in R["workdir"]:
        title("Start + exit with a large workdir: `confine exec -w DIR -- /bin/true`, ms "
              "(second run: the directory index kept by the first; first run: no index)")
        small = R["workdir"]["trees"]["small"]
        first = R["workdir"].get("first", {})
        rows = []
        for k, s in R["workdir"]["trees"].items():
            med, p90 = fmt_ms(s)
            add = (f"{s['median'] - small['median']:+.0f}" if isinstance(s, dict) and isinstance(small, dict)
                   and k != "small" else "")
            f1 = first.get(k)
            fmed, _ = fmt_ms(f1) if f1 is not None else ("", "")
            fadd = (f"{f1['median'] - small['median']:+.0f}" if isinstance(f1, dict) and isinstance(small, dict)
                    and k != "small" else "")
            rows.append((k, med, p90, add, fmed, fadd))
        table(["workdir", "median", "p90", "added", "first run", "added (first run)"], rows)
    if "warm" in R:
        title("Warm spawn from the Python API: `/bin/true` in a loop, one process, ms")
        sl = R["warm"].get("sandlock Sandbox(...).run")
        rows = []
        for k, s in R["warm"].items():
            med, p90 = fmt_ms(s)
            x = f"{s['median'] / sl['median']:.2f}" if isinstance(s, dict) and isinstance(sl, dict) else ""
            rows.append((k, med, p90, x))
        table(["call", "median", "p90", "x sandlock"], rows)
    if "file" in R or "connect" in R:
        title("Per mediated call (us, as confine-test; `bench/file_mediation.py`, `bench/connect_mediation.py`)")
        rows = []
        if isinstance(R.get("file"), dict):
            for k, v in R["file"]["calls"].items():
                per = "" if v["per_mediated_call"] is None else f"+{v['per_mediated_call']:.0f}"
                rows.append((k, f"{v['bare']:.1f}", f"{v['confined']:.1f}", f"{v['added']:+.0f}", per))
        elif "file" in R:
            rows.append(("file calls", R["file"], "", "", ""))
        if isinstance(R.get("connect"), dict):
            c = R["connect"]
            rows.append(("connect() to a unix socket", f"{c['bare']:.1f}", f"{c['confined']:.1f}",
                         f"{c['added']:+.0f}", f"+{c['added']:.0f}"))
        elif "connect" in R:
            rows.append(("connect()", R["connect"], "", "", ""))
        table(["call", "bare", "confined", "added", "per mediated call"], rows)
    if "native" in R:
        nat = R["native"]
        title("Per mediated call: confine (Python, one hop) vs a compiled prototype (bench/native/hop.c), us")
        rows = []
        if isinstance(nat, dict) and "summary" in nat:
            calls = R["file"]["calls"] if isinstance(R.get("file"), dict) else {}
            for k, v in nat["summary"].items():
                if not v["mediated"]:
                    continue
                py = calls.get(k)
                rows.append((k, (f"{py['bare']:.1f} / " if py else "- / ") + f"{v['bare']:.1f}",
                             f"+{py['per_mediated_call']:.0f}" if py else "- (no file section)",
                             *(native_hop.cell(v.get(m)) for m in ("hop1", "hop2", "hop1steps"))))
        else:
            msg = nat.get("skipped", str(nat)) if isinstance(nat, dict) else str(nat)
            rows.append(("file calls", msg, "", "", "", ""))
        table(["call", "bare (Python / C, per op)", "confine added", "C hop1 added", "C hop2 added",
               "C hop1+steps added"], rows)
        if isinstance(nat, dict) and "rounds" in nat:
            L.append("Added per mediated call. confine: the per-call table above (`bench/file_mediation.py`). "
                     f"C (`bench/native_hop.py`, as confine-test): median (min..max) of {nat['rounds']} "
                     f"interleaved rounds of {nat['n']} calls, each against bare C in the same round; hop1: the "
                     "listener's owner performs the call and answers with ADDFD; hop2: through a broker process "
                     "(confine's path before issue 26); steps: a pidfd, the agent's cwd opened per call and a "
                     "protected-name check.")
            L.append("")
    if "gateway" in R:
        gws = R["gateway"]
        if not isinstance(gws, dict):
            title("Egress gateway vs direct")
            table(["measure", "direct", "through the gateway", "ratio / added"], [("gateway", gws, "", "")])
        for key, what in (("link", f"over a veth shaped to {LINK_RATE} (origin in a network namespace of "
                           "its own: a network path, on this machine only)"),
                          ("loopback", "on loopback (origin, gateway and client in their own processes; "
                           "the gateway's path crosses loopback twice, both CPU-bound: the floor)")):
            if isinstance(gws, dict) and isinstance(gws.get(key), dict):
                title(f"Egress gateway vs direct, {what} (`bench/gateway.py`)")
                table(["measure", "direct", "through the gateway", "ratio / added"],
                      gateway_bench.render(gws[key]))
    if "tls" in R:
        tls = R["tls"]
        if not isinstance(tls, dict):
            title("TLS swap vs direct")
            table(["measure", "direct", "tunnel", "swap", "ratio / added"], [("tls", tls, "", "", "")])
        for key, what in (("link", f"over a veth shaped to {LINK_RATE}"), ("loopback", "on loopback")):
            if isinstance(tls, dict) and isinstance(tls.get(key), dict):
                title(f"TLS terminated for the credential swap vs direct TLS and the plain tunnel, {what} "
                      "(`bench/tls_swap.py`)")
                table(["measure", "direct", "tunnel (no credentials)", "swap", "ratio / added"],
                      tls_bench.render(tls[key]))
    work = [n for n in WORK if n in R]
    if work:
        reps = size("reps", quick)
        title(f"Real work as confine-test, s (median of {reps}; ratio = confined wall / bare wall; inner = the "
              "command's own time inside confine)")
        rows = []
        for n in work:
            w = R[n]
            if "skipped" in w:
                rows.append((n, w["skipped"], "", "", "", "", "", "", f"{WORK_GOAL[n]}x"))
                continue
            cells = [w["label"]]
            for fs in ("tmpfs", "disk"):
                r = w.get(fs, {})
                cells += [f"{r['bare']:.2f}" if "bare" in r else "-",
                          f"{r['confined']:.2f} ({r['inner']:.2f})" if "confined" in r else "-",
                          f"**{r['ratio']:.2f}**" if markdown and "ratio" in r else
                          (f"{r['ratio']:.2f}" if "ratio" in r else "-")]
            rows.append((*cells, f"{w['goal']}x"))
        table(["workload", "tmpfs bare", "tmpfs confined (inner)", "ratio", "disk bare", "disk confined (inner)",
               "ratio", "goal"], rows)
        rows = []
        for n in work:
            w = R[n]
            if "skipped" in w or n not in EXCLUSIVE_GOAL:
                continue
            cells = [w["label"]]
            for fs in ("tmpfs", "disk"):
                r = w.get(fs, {})
                cells += [f"{r['exclusive']:.2f} ({r['inner_exclusive']:.2f})" if "exclusive" in r else "-",
                          f"**{r['ratio_exclusive']:.2f}**" if markdown and "ratio_exclusive" in r else
                          (f"{r['ratio_exclusive']:.2f}" if "ratio_exclusive" in r else "-")]
            rows.append((*cells, ", ".join(f"{fs} {g}x" for fs, g in EXCLUSIVE_GOAL[n].items())))
        if rows:
            title("The same work with an exclusive workdir (`--exclusive-workdir`: the workdir's file calls "
                  "unmediated, new protected names held at exit; docs/exclusive.md), s (ratio = exclusive wall / "
                  "the bare wall above)")
            table(["workload", "tmpfs exclusive (inner)", "ratio", "disk exclusive (inner)", "ratio", "goal"],
                  rows)
    if markdown:
        L.append("Confine starts as root with `--user confine-test` (the agent's account); bare rows run as "
                 "confine-test with the same minimal environment. bubblewrap: `bwrap --unshare-all --ro-bind / / "
                 "--dev /dev --proc /proc`; firejail: `--quiet --noprofile --net=none`; sandlock: "
                 "`Sandbox(fs_writable=[workdir], fs_readable=[/usr, /bin, /lib, /lib64, /etc, /proc, /dev], "
                 "clean_env=True)`, run as root: not the same policy (no user switch, no mount or pid namespace, no "
                 "secret carve-outs, no file mediation). "
                 "Inputs are made once under /var/tmp/confine-bench; nothing leaves the machine.")
        L.append("")
    return "\n".join(L).rstrip() + "\n"


def write_markdown(path, block):
    with open(path) as f:
        text = f.read()
    new = f"{MARK_START}\n{block}{MARK_END}"
    if MARK_START in text and MARK_END in text:
        a, rest = text.split(MARK_START, 1)
        _, b = rest.split(MARK_END, 1)
        text = a + new + b
    else:
        m = re.search(r"^## Benchmarks\n", text, re.M)
        if not m:
            text = text.rstrip() + "\n\n## Benchmarks\n\n" + new + "\n"
        else:
            nxt = re.search(r"^## ", text[m.end():], re.M)
            at = m.end() + (nxt.start() if nxt else len(text) - m.end())
            text = text[:at].rstrip() + "\n\n" + new + "\n\n" + text[at:]
    with open(path, "w") as f:
        f.write(text)


# --- main -----------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--quick", action="store_true", help="small N, small trees, one rep (about 2 minutes)")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=[*SECTIONS, "work"], help="run only these sections")
    ap.add_argument("--markdown", metavar="FILE", help="regenerate the block between the bench markers in FILE")
    ap.add_argument("--json", metavar="FILE", help="also write the raw results as JSON")
    ap.add_argument("--confine", metavar="PATH", help="the confine to measure (default: the cache's install)")
    ap.add_argument("--install", action="store_true", help="reinstall this checkout into the cache first")
    ap.add_argument("--reps", type=int, metavar="N", help="real-work repetitions (default 3, quick 1)")
    ap.add_argument("--runs", type=int, metavar="N", help="cold-start runs (default 20, quick 5)")
    ap.add_argument("--stamp-install", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.stamp_install:
        stamp_install()
        return 0
    if a.reps:
        OVERRIDE["reps"] = a.reps
    if a.runs:
        OVERRIDE["cold_runs"] = a.runs
    if os.geteuid() != 0:
        sys.exit("bench/run.py: run as root (the agent runs as confine-test; bare rows switch to it)")
    if a.install:
        install_checkout()
    only = set(a.only or SECTIONS)
    if "work" in only:
        only |= set(WORK)
    pw = ensure_user()
    os.makedirs(CACHE, exist_ok=True)
    os.chmod(CACHE, 0o755)
    confine, where = find_confine(a.confine)
    if confine and subprocess.run([confine, "--version"], capture_output=True).returncode:
        log(f"{confine} does not run: confine rows say 'not installed'")
        confine = None
    t = tools(confine)
    M = machine()
    V = versions(t)
    if where != "this checkout":
        V["confine from"] = where
    log(f"confine: {confine or NOT_INSTALLED} ({where})")
    for k in ("bwrap", "firejail", "sandlock", "npm", "cc"):
        log(f"{k}: {t[k] or NOT_INSTALLED}")
    if M["load"] > 1.0:
        log(f"load average {M['load']:.2f}: other work is running, numbers will be noisy")
    small = small_tree(pw)
    R = {}
    started = time.perf_counter()
    tmpfs = None

    def step(name, fn):
        if name not in only:
            return
        log(f"[{time.perf_counter() - started:6.1f} s] {name} ...")
        try:
            R[name] = fn()
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            log(f"{name} failed: {e}")
            R[name] = {"skipped": f"failed: {str(e).splitlines()[0][:200]}"} if name in WORK else f"failed: {e}"
    step("cold", lambda: section_cold(t, small, a.quick))
    step("workdir", lambda: section_workdir(t, small, pw, a.quick))
    step("warm", lambda: section_warm(t, small, a.quick))
    if only & {"file", "connect", "native", *WORK}:
        tmpfs = tmpfs_root()
    med_base = mkdir_for(os.path.join(tmpfs, "mediation"), pw) if tmpfs else None
    step("file", lambda: section_file(t, med_base, a.quick))
    step("connect", lambda: section_connect(t, med_base, a.quick))
    step("native", lambda: section_native(med_base, a.quick))
    step("gateway", lambda: section_gateway(t, a.quick))
    step("tls", lambda: section_gateway(t, a.quick, tls_bench))
    if only & set(WORK):
        bases = {"tmpfs": tmpfs, "disk": mkdir_for(os.path.join(CACHE, "disk"), pw)}
        for name in WORK:
            step(name, lambda name=name: section_work(name, t, pw, bases, a.quick))
    log(f"[{time.perf_counter() - started:6.1f} s] done")
    M["load_end"] = os.getloadavg()[0]
    partial = set(a.only) if a.only else None
    print(render(R, M, V, a.quick, markdown=False, only=partial))
    if a.markdown:
        write_markdown(a.markdown, render(R, M, V, a.quick, markdown=True, only=partial))
        log(f"{a.markdown}: benchmark block regenerated")
    for path in filter(None, (a.json, os.path.join(CACHE, "last-run.json"))):
        with open(path, "w") as f:
            json.dump({"machine": M, "versions": V, "quick": a.quick, "only": a.only, "results": R}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
