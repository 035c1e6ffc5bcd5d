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
chmod -R a+rX "$prefix"
if [ -n "${CONFINE_NO_LINK:-}" ]; then
    echo "confine installed: $prefix/bin/confine ($("$prefix/bin/confine" --version))"
else
    mkdir -p "$bindir"
    ln -sf "$prefix/bin/confine" "$bindir/confine"
    echo "confine installed: $bindir/confine ($("$bindir/confine" --version))"
    case ":$PATH:" in *":$bindir:"*) ;; *) echo "add $bindir to your PATH" ;; esac
fi
