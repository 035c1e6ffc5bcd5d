"""Credentials no profile can grant: they are carved out of every grant.

Landlock is an allowlist, so "deny" here means: wherever a read or write grant
covers one of these paths, the grant is replaced by grants on its siblings.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

HOME_SECRETS = (
    "~/.ssh", "~/.gnupg", "~/.aws", "~/.azure", "~/.config/gcloud", "~/.kube",
    "~/.docker", "~/.netrc", "~/.git-credentials", "~/.config/git/credentials",
    "~/.pypirc", "~/.npmrc", "~/.yarnrc", "~/.config/gh", "~/.config/hub",
    "~/.vault-token", "~/.terraform.d/credentials.tfrc.json", "~/.cargo/credentials",
    "~/.cargo/credentials.toml", "~/.gem/credentials", "~/.config/op", "~/.pgpass",
    "~/.my.cnf", "~/.s3cfg", "~/.boto", "~/.config/rclone", "~/.password-store",
    "~/.local/share/keyrings", "~/.local/share/kwalletd", "~/.mozilla",
    "~/.thunderbird", "~/.config/google-chrome", "~/.config/chromium",
    "~/.config/BraveSoftware", "~/.config/microsoft-edge", "~/snap/firefox",
    "~/.bash_history", "~/.zsh_history", "~/.histfile", "~/.python_history",
    "~/.node_repl_history", "~/.psql_history", "~/.mysql_history", "~/.sqlite_history",
    "~/.lesshst", "~/.local/share/fish/fish_history", "~/.wget-hsts",
    # confine's own: the key that closes every run's record (journal/store.py) and the
    # values kept for revoking minted credentials (credentials/pending.py), of a person
    # whose state is in the default place
    "~/.local/state/confine/keys", "~/.local/state/confine/credentials",
)

SYSTEM_SECRETS = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
    "/etc/sudoers.d", "/etc/ssh/ssh_host_*_key", "/etc/ssl/private",
    "/etc/security/opasswd", "/etc/krb5.keytab", "/etc/NetworkManager/system-connections",
    "/etc/wpa_supplicant", "/etc/ipsec.secrets", "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets", "/etc/credstore", "/etc/credstore.encrypted",
    "/etc/letsencrypt/keys", "/etc/letsencrypt/archive", "/etc/docker/key.json",
    "/etc/libvirt/secrets",
    "/var/lib/confine/keys", "/var/lib/confine/credentials",   # root's, as above
)


def mandatory_items(item_cls: Callable[[str, str], T]) -> list[T]:
    return [item_cls(p, "built-in secrets") for p in HOME_SECRETS + SYSTEM_SECRETS]
