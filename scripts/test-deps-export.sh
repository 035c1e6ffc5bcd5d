#!/bin/sh
# Tools tests/export uses to compile and check the exported policies
# (root only; Debian/Ubuntu; idempotent):
#   apparmor            apparmor_parser (-Q -K: compile without loading)
#   python3-apparmor    AppArmor's own glob matcher, to check what a profile allows
#   checkpolicy         checkmodule
#   semodule-utils      semodule_package, semodule_link, semodule_expand
#   selinux-policy-dev  /usr/share/selinux/devel/Makefile (refpolicy headers)
#   setools             sesearch: which rules the linked policy really holds
# plus the Debian reference policy's modules, unpacked (not installed: no
# policy store, nothing loaded) into $CONFINE_REFPOLICY_DIR so the tests can
# link the module against a real base policy. systemd-analyze comes with systemd.
set -eu
if [ "$(id -u)" != 0 ]; then
    echo "test-deps-export.sh: run as root" >&2
    exit 1
fi
command -v apt-get >/dev/null || { echo "test-deps-export.sh: needs apt-get" >&2; exit 1; }
pkgs=""
for p in apparmor python3-apparmor checkpolicy semodule-utils selinux-policy-dev setools; do
    dpkg -s "$p" >/dev/null 2>&1 || pkgs="$pkgs $p"
done
updated=""
if [ -n "$pkgs" ]; then
    apt-get update -qq && updated=1
    # --no-install-recommends: the tests need the compilers, not a policy loaded at boot.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi

dir=${CONFINE_REFPOLICY_DIR:-/var/cache/confine-test/selinux-policy-default}
if [ ! -f "$dir/base.pp" ]; then
    [ -n "$updated" ] || apt-get update -qq
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    chown _apt "$work" 2>/dev/null || true  # apt downloads as _apt when it can
    (cd "$work" && apt-get download -qq selinux-policy-default >/dev/null)
    dpkg-deb -x "$work"/selinux-policy-default_*.deb "$work/root"
    mkdir -p "$dir"
    for f in "$work"/root/usr/share/selinux/default/*.pp.bz2; do
        bzip2 -dc "$f" > "$dir/$(basename "$f" .bz2)"
    done
fi
