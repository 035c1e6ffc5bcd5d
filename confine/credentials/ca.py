"""The run's own certificate authority: the gateway terminates the agent's TLS with
leaf certificates it signs, so it can read request heads and swap a placeholder for
the real credential (swap.py).

The threats:
- the CA's key signs for any name: whoever holds it can impersonate any host to
  whoever trusts the CA. It is made per run, held in the supervisor's memory only
  (loaded into OpenSSL through a memfd, never a path in the file system), and dies
  with the run; the agent gets only the certificate. It is trusted by the agent's
  processes only (the variables of `TRUST_VARIABLES`), never by the host's store;
- a long-lived or reusable authority: validity is bounded (`VALID_DAYS`), the CA
  may sign leaves only (path length 0), and leaves are for server authentication
  of exactly one name.

EC P-256 keys: a leaf costs one signature (about 0.1 ms), minted on the first
connection to a host and cached for the run (`MAX_LEAVES`).
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import threading
from collections import OrderedDict
from collections.abc import Mapping

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30
MAX_LEAVES = 1024
# Where the usual TLS stacks take extra or replacement trust from: OpenSSL (curl,
# Python's ssl, Go) SSL_CERT_FILE, Node NODE_EXTRA_CA_CERTS, Python requests and pip
# REQUESTS_CA_BUNDLE, curl CURL_CA_BUNDLE, git GIT_SSL_CAINFO.
TRUST_VARIABLES = ("SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
                   "GIT_SSL_CAINFO")


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _load_chain(ctx: ssl.SSLContext, pem: bytes) -> None:
    """OpenSSL reads a certificate chain and key only from a path: a memfd, so the key
    is never in the file system (and gone once the descriptor is closed)."""
    fd = os.memfd_create("confine-leaf", os.MFD_CLOEXEC)
    try:
        os.write(fd, pem)
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


class RunCA:
    """One run's authority: `pem` (the certificate, public), `server_context(host)` (a
    TLS server context with a leaf for that host, cached)."""

    def __init__(self, name: str = "confine run CA") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        # one key for every leaf: the leaves are trusted only through this CA anyway,
        # and a key pair per host would cost a key generation per new host
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._leaf_key_pem = _pem_key(self._leaf_key)
        now = _now()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "confine")])
        ski = x509.SubjectKeyIdentifier.from_public_key(self._key.public_key())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self._aki = x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM)
        self._lock = threading.Lock()
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()

    def leaf_pem(self, host: str) -> bytes:
        """A certificate for `host` (a name or an address) signed by this CA, PEM."""
        try:
            san: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            san = x509.DNSName(host)
        now = _now()
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self.cert.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([san]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(self._aki, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        return cert.public_bytes(serialization.Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """The agent-facing TLS context for `host`: its leaf, TLS >= 1.2, and only
        http/1.1 in ALPN (the swap reads HTTP/1.1 heads; a client that would have
        spoken HTTP/2 falls back)."""
        with self._lock:
            ctx = self._contexts.get(host)
            if ctx is not None:
                self._contexts.move_to_end(host)
                return ctx
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["http/1.1"])
        _load_chain(ctx, self.leaf_pem(host) + self.pem + self._leaf_key_pem)
        with self._lock:
            self._contexts[host] = ctx
            while len(self._contexts) > MAX_LEAVES:
                self._contexts.popitem(last=False)
        return ctx


def system_bundle() -> bytes:
    """The host's trusted roots as PEM (b"" when there is no bundle file to read)."""
    paths = ssl.get_default_verify_paths()
    for p in (os.environ.get(paths.openssl_cafile_env), paths.cafile, paths.openssl_cafile):
        if p:
            try:
                with open(p, "rb") as f:
                    return f.read(64 << 20)
            except OSError:
                continue
    return b""


def write_bundle(ca: RunCA, path: str, uid: int | None = None) -> None:
    """The agent's trust: the system bundle plus the run CA, at `path` (a new file:
    refused if something is there), read-only, owned by `uid` when given."""
    data = system_bundle()
    if data and not data.endswith(b"\n"):
        data += b"\n"
    data += ca.pem
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
    try:
        os.write(fd, data)
        if uid is not None:
            os.fchown(fd, uid, -1)
    finally:
        os.close(fd)


def trust_env(bundle: str) -> Mapping[str, str]:
    """The variables that make the agent's TLS stacks trust `bundle`."""
    return {v: bundle for v in TRUST_VARIABLES}


__all__ = ["RunCA", "TRUST_VARIABLES", "system_bundle", "trust_env", "write_bundle"]
