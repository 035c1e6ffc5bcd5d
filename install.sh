#!/bin/sh
# Install confine into its own virtualenv and put `confine` on PATH.
#   ./install.sh            as root: /opt/confine + /usr/local/bin/confine
#                           as a user: ~/.local/share/confine + ~/.local/bin/confine
#   ./install.sh --uninstall   removes what the same command installed (the virtualenv and
#                           the link); profiles in ~/.config/confine and /etc/confine stay.
# CONFINE_PREFIX=DIR overrides the virtualenv location; CONFINE_EXTRAS=test adds test tools.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" = 0 ]; then
    prefix=${CONFINE_PREFIX:-/opt/confine}; bindir=/usr/local/bin
else
    prefix=${CONFINE_PREFIX:-$HOME/.local/share/confine}; bindir=$HOME/.local/bin
fi
# Ubuntu 23.10+ lets only processes whose AppArmor profile says `userns,` create user
# namespaces (kernel.apparmor_restrict_unprivileged_userns=1); confine started by a user
# needs one for its mount and pid namespaces. The profile names the installed launcher
# and changes nothing else about it (unconfined).
#   ./install.sh --apparmor-profile   print the launcher's profile for this prefix
#   ./install.sh --apparmor           as root: install and load it (done by the root
#                                     install when the host restricts user namespaces)
#   ./install.sh --apparmor-check     what the install would do about it (nothing to do,
#                                     or the one command to run as root)
restrict_sysctl=${CONFINE_TEST_USERNS_SYSCTL:-/proc/sys/kernel/apparmor_restrict_unprivileged_userns}
aa_name=confine
[ "$prefix" = /opt/confine ] || aa_name="confine$(printf %s "$prefix" | tr -c 'A-Za-z0-9' '_')"
apparmor_profile() {
    cat <<EOF
# confine launcher: may create user namespaces (Ubuntu's restriction); otherwise unconfined.
abi <abi/4.0>,
include <tunables/global>

profile $aa_name $prefix/bin/confine flags=(unconfined) {
  userns,
  include if exists <local/$aa_name>
}
EOF
}
restricts_userns() {
    [ "$(cat "$restrict_sysctl" 2>/dev/null)" = 1 ]
}
apparmor_install() {
    if ! command -v apparmor_parser >/dev/null; then
        echo "install.sh: apparmor_parser not found: cannot load the launcher's AppArmor profile" >&2
        return 1
    fi
    apparmor_profile > "/etc/apparmor.d/$aa_name"
    if apparmor_parser -r "/etc/apparmor.d/$aa_name"; then
        echo "AppArmor profile $aa_name loaded: confine may create its namespaces"
    else
        echo "install.sh: could not load /etc/apparmor.d/$aa_name; confine started by a user" \
             "will refuse (no user namespaces) until it is loaded" >&2
        return 1
    fi
}
apparmor_step() {
    restricts_userns || return 0
    if [ "$(id -u)" = 0 ] && [ -z "${CONFINE_APPARMOR_DRY:-}" ]; then
        apparmor_install
    else
        echo "this host restricts user namespaces to AppArmor profiles that allow them; for"
        echo "confine to make its own, load its profile once, as root:"
        echo "  sudo CONFINE_PREFIX=$prefix $here/install.sh --apparmor"
    fi
}
case "${1:-}" in
    --apparmor-profile) apparmor_profile; exit 0 ;;
    --apparmor-check) CONFINE_APPARMOR_DRY=1 apparmor_step; exit 0 ;;
    --apparmor)
        [ "$(id -u)" = 0 ] || { echo "install.sh: --apparmor needs root" >&2; exit 1; }
        apparmor_install; exit $? ;;
esac
if [ "${1:-}" = "--uninstall" ]; then
    link="$bindir/confine"
    if [ -L "$link" ] && [ "$(readlink "$link")" = "$prefix/bin/confine" ]; then
        rm -f "$link"
    fi
    if [ -x "$prefix/bin/confine" ] && [ -f "$prefix/pyvenv.cfg" ]; then
        rm -rf "$prefix"
        echo "confine uninstalled from $prefix"
    else
        echo "install.sh: no confine installation at $prefix" >&2
        exit 1
    fi
    exit 0
fi
# The system Python: readable by every user the agent may run as (a pyenv under
# /root is not), so root can start confine for an unprivileged account.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)

need_apt=""
"$py" -c 'import venv, ensurepip' 2>/dev/null || need_apt="$need_apt python3-venv"
"$py" -c 'import ctypes.util, sys; sys.exit(not ctypes.util.find_library("seccomp"))' \
    || need_apt="$need_apt libseccomp2"
if [ -n "$need_apt" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need_apt
    else
        echo "install.sh: missing system packages:$need_apt (install them as root, then rerun)" >&2
        exit 1
    fi
fi

"$py" -m venv "$prefix"
"$prefix/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
spec="$here"
[ -n "${CONFINE_EXTRAS:-}" ] && spec="$here[${CONFINE_EXTRAS}]"
# Not editable: the installed copy must be readable by the agent's user even
# when the source checkout is not.
"$prefix/bin/python" -m pip install -q --force-reinstall --no-deps "$here"
"$prefix/bin/python" -m pip install -q "$spec"
# The launcher pip wrote, started with -I -S: no PYTHON* variables, user site or current
# directory on its path (root starts it for another account), and no site module (the
# venv's .pth files and the system's sitecustomize, a few ms of every start); the venv's
# prefix and site-packages are named by the script itself. A prefix too long or odd for a
# "#!" line keeps pip's own script.
"$prefix/bin/python" - "$prefix" <<'EOF'
import os, sys, sysconfig
prefix = os.path.abspath(sys.argv[1])
python = os.path.join(prefix, "bin", "python")
line = f"#!{python} -IS"
if len(line) <= 127 and not any(c.isspace() or c in "'\"\\" for c in python):
    paths = list(dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]))
    script = os.path.join(prefix, "bin", "confine")
    with open(script + ".new", "w") as f:
        f.write(f"{line}\n"
                "# confine's launcher, written by install.sh: -I -S, so the venv is named here\n"
                "import sys\n"
                f"sys.prefix = sys.exec_prefix = {prefix!r}\n"
                f"sys.path.extend({paths!r})\n"
                "from confine.cli import console\n"
                "sys.exit(console())\n")
    os.chmod(script + ".new", 0o755)
    os.replace(script + ".new", script)
EOF
chmod -R a+rX "$prefix"
apparmor_step || true
if [ -n "${CONFINE_NO_LINK:-}" ]; then
    echo "confine installed: $prefix/bin/confine ($("$prefix/bin/confine" --version))"
else
    mkdir -p "$bindir"
    ln -sf "$prefix/bin/confine" "$bindir/confine"
    echo "confine installed: $bindir/confine ($("$bindir/confine" --version))"
    case ":$PATH:" in *":$bindir:"*) ;; *) echo "add $bindir to your PATH" ;; esac
fi
