"""Gateway host rules and the address filter: parsing, normalisation, deny wins, refusals."""
from __future__ import annotations

import ipaddress

import pytest

from confine.gateway import addresses as A
from confine.gateway.rules import (
    NO_RULE,
    PUBLIC_SUFFIXES,
    Decision,
    RuleError,
    Rules,
    available_sets,
    entry_for,
    load_set,
    normalise_host,
    parse_rule,
)


@pytest.mark.parametrize("raw,want", [
    ("Example.COM", "example.com"),
    ("example.com.", "example.com"),
    ("bücher.de", "xn--bcher-kva.de"),
    ("BÜCHER.de.", "xn--bcher-kva.de"),
    ("xn--bcher-kva.de", "xn--bcher-kva.de"),
    ("a-b.c0.io", "a-b.c0.io"),
])
def test_normalise(raw, want):
    assert normalise_host(raw) == want


@pytest.mark.parametrize("bad", [
    "", ".", "example.com..", "a..b", "-a.com", "a-.com", "exa_mple.com", "a b.com", "a/b.com",
    "x" * 64 + ".com", ".".join(["a" * 63] * 4) + ".com", "xn--zz.com", "127.1", "1.2.3.4",
    "0x7f.1", "foo.123", "exa\x00mple.com", "exa%mple.com",
])
def test_normalise_refuses(bad):
    with pytest.raises(RuleError):
        normalise_host(bad)


def test_parse_forms():
    r = parse_rule("example.com")
    assert (r.name, r.port) == ("example.com", 443)
    assert parse_rule("Example.com:8443").port == 8443
    assert parse_rule("example.com:*").port is None
    w = parse_rule("*.Example.com")
    assert (w.suffix, w.name) == ("example.com", None)
    assert parse_rule("192.0.2.7").net == ipaddress.ip_network("192.0.2.7/32")
    assert parse_rule("192.0.2.0/24:80").port == 80
    assert parse_rule("2001:db8::1").net == ipaddress.ip_network("2001:db8::1/128")
    assert parse_rule("2001:db8::1").port == 443
    assert parse_rule("[2001:db8::1]:22").port == 22
    assert parse_rule("[2001:db8::/32]:*").port is None
    assert parse_rule("::ffff:192.0.2.1").net == ipaddress.ip_network("192.0.2.1/32")
    assert parse_rule("evil.com", default_port=None).port is None


@pytest.mark.parametrize("bad,needle", [
    ("*", "bare"), ("*.", "bare"), ("*.com", "public suffix"), ("*.co.uk", "public suffix"),
    ("*.github.io", "public suffix"), ("*.herokuapp.com", "public suffix"),
    ("*.s3.amazonaws.com", "public suffix"), ("a.*.com", "first label"), ("*foo.com", "first label"),
    ("**.foo.com", "first label"), ("example.com:0", "port"), ("example.com:65536", "port"),
    ("example.com:http", "port"), ("[::1", "unclosed"), ("[::1]x", "after"), ("10.0.0.1/8", "network"),
    ("exa mple.com", "white space"), ("[example.com]:443", "brackets"), ("", "empty"), ("exa_mple.com", "bad label"),
])
def test_parse_refuses_and_names_entry(bad, needle):
    with pytest.raises(RuleError) as e:
        parse_rule(bad)
    assert needle in str(e.value)
    if bad.strip():
        assert repr(bad.strip())[1:-1][:8] in str(e.value)


def test_wildcard_over_owned_suffix_ok():
    assert parse_rule("*.foo.github.io").suffix == "foo.github.io"
    assert parse_rule("*.example.co.uk").suffix == "example.co.uk"
    assert "co.uk" in PUBLIC_SUFFIXES


def test_decide_exact_wildcard_port():
    r = Rules.parse(["example.com", "*.api.example.org:8443"])
    assert r.decide("EXAMPLE.com.", 443) == (r.decide("example.com", 443))
    assert r.decide("example.com", 443).allowed
    assert r.decide("example.com", 443).rule == "allow example.com"
    assert not r.decide("example.com", 80).allowed
    assert not r.decide("www.example.com", 443).allowed
    assert r.decide("a.api.example.org", 8443).allowed
    assert r.decide("a.b.api.example.org", 8443).allowed
    assert not r.decide("api.example.org", 8443).allowed      # the wildcard is strictly below
    assert not r.decide("xapi.example.org", 8443).allowed
    assert not r.decide("a.api.example.org", 443).allowed
    assert r.decide("example.com", None).allowed               # DNS: any port
    assert r.decide("nope.com", 443) == Decision(False, NO_RULE)
    assert not r.decide("127.1", 443).allowed                  # never read as a name
    assert not r.decide("exa_mple.com", 443).allowed


def test_deny_wins():
    r = Rules.parse(["*.example.com", "example.com:*"], ["bad.example.com", "example.com:22"])
    assert r.decide("good.example.com", 443).allowed
    d = r.decide("bad.example.com", 443)
    assert not d.allowed and d.rule == "deny bad.example.com"
    assert not r.decide("bad.example.com", 8443).allowed      # a deny without port: every port
    assert not r.decide("bad.example.com", None).allowed      # and DNS
    assert not r.decide("example.com", 22).allowed
    assert r.decide("example.com", 443).allowed
    assert r.decide("example.com", None).allowed              # a port-only deny does not hide the name


def test_address_rules():
    r = Rules.parse(["192.0.2.0/24", "[2001:db8::/32]:*"], ["192.0.2.9"])
    assert r.allows_address("192.0.2.7", 443).allowed
    assert not r.allows_address("192.0.2.7", 80).allowed
    assert not r.allows_address("192.0.2.9", 443).allowed
    assert r.allows_address("192.0.2.9", 443).rule == "deny 192.0.2.9"
    assert r.allows_address("::ffff:192.0.2.7", 443).allowed   # v4-mapped is the v4 address
    assert r.allows_address("2001:db8::5", 22).allowed
    assert r.decide("192.0.2.7", 443).allowed                  # a literal host goes to the address rules
    assert r.allows_address("198.51.100.1", 443).rule == NO_RULE


def test_sets():
    assert "registries" in available_sets()
    hosts = load_set("registries")
    for h in ("pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "crates.io", "static.crates.io",
              "index.crates.io", "proxy.golang.org", "sum.golang.org", "github.com", "api.github.com",
              "codeload.github.com", "objects.githubusercontent.com", "raw.githubusercontent.com"):
        assert h in hosts
    r = Rules.parse(sets=["registries"])
    d = r.decide("pypi.org", 443)
    assert d.allowed and "registries" in d.rule
    assert not r.decide("pypi.org", 80).allowed
    with pytest.raises(RuleError, match="unknown host set 'nope'.*registries"):
        Rules.parse(sets=["nope"])
    with pytest.raises(RuleError, match="set name"):
        Rules.parse(sets=["../etc/x"])


def test_set_with_bad_entry_names_set(tmp_path):
    (tmp_path / "x.yaml").write_text("hosts: ['ok.example', '*.com']\n")
    with pytest.raises(RuleError, match="host set 'x'.*'\\*.com'"):
        Rules.parse(sets=["x"], sets_dir=tmp_path)


def test_allowed_ips():
    r = Rules.parse(allowed_ips=["10.1.0.0/16"])
    assert r.resolve_net(ipaddress.ip_address("10.1.2.3")) is not None
    assert r.resolve_net(ipaddress.ip_address("10.2.0.1")) is None
    assert not r.allows_address("10.1.2.3", 443).allowed     # not a destination by address
    with pytest.raises(RuleError, match="allowed address"):
        Rules.parse(allowed_ips=["10.1.0.1/16"])


@pytest.mark.parametrize("net,why", [
    ("203.0.113.0/24", "documentation"),     # HARD: it would validate and do nothing
    ("169.254.169.254", "metadata"),
    ("fe80::/64", "link-local"),
    ("8.8.0.0/16", "public"),               # needs no entry
    ("0.0.0.0/0", "spans several kinds"),   # opens no private range (not wholly inside one)
    ("10.0.0.0/7", "spans several kinds"),
])
def test_allowed_ips_that_would_open_nothing_are_refused(net, why):
    """Issue 23 item 7: `allowed_ips: [203.0.113.0/24]` validated and did nothing."""
    with pytest.raises(RuleError, match=why):
        Rules.parse(allowed_ips=[net])


@pytest.mark.parametrize("net", ["10.1.0.0/16", "127.0.0.1", "192.168.4.0/24", "fd12::/64",
                                 "100.64.1.0/24", "::1", "1.2.3.4"])
def test_allowed_ips_that_open_something_are_kept(net):
    ip = ipaddress.ip_network(net).network_address
    assert Rules.parse(allowed_ips=[net]).resolve_net(ip) is not None


# --- the address filter ---------------------------------------------------------------------
OWN = [ipaddress.ip_address("198.51.100.77"), ipaddress.ip_address("2001:4860::77")]


@pytest.mark.parametrize("addr", [
    "127.0.0.1", "127.9.9.9", "::1", "0.0.0.0", "::", "10.0.0.5", "172.16.3.4", "192.168.1.1",
    "100.64.0.1", "169.254.169.254", "169.254.1.1", "fd00:ec2::254", "100.100.100.200", "168.63.129.16",
    "192.0.0.192", "224.0.0.1", "255.255.255.255", "240.0.0.1", "fe80::1", "ff02::1", "fc00::1",
    "fd12::1", "198.51.100.77", "2001:4860::77", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
    "::127.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "2002:a9fe:a9fe::1", "2002:0a00:0001::",
    "2001:0:4136:e378:8000:63bf:f5ff:fffe", "2001:db8::1", "100::1", "64:ff9b:1::1", "::2:1",
])
def test_refused_addresses(addr):
    assert A.refusal(addr, own=OWN) is not None


@pytest.mark.parametrize("addr", [
    "93.184.216.34", "1.1.1.1", "2606:4700::1111", "64:ff9b::5db8:d822", "2002:5db8:d822::1",
    "::ffff:93.184.216.34", "168.63.129.17",
])
def test_public_addresses(addr):
    assert A.refusal(addr, own=OWN) is None


def test_explicit_lifts_only_opt_in_and_only_inside():
    net = ipaddress.ip_network
    assert A.refusal("10.1.2.3", explicit=net("10.1.2.0/24")) is None
    assert A.refusal("10.1.2.3", explicit=net("0.0.0.0/0")) is not None       # too wide: not inside
    assert A.refusal("127.0.0.1", explicit=net("127.0.0.1/32")) is None
    assert A.refusal("169.254.169.254", explicit=net("169.254.169.254/32")) is not None   # hard
    assert A.refusal("fd00:ec2::254", explicit=net("fd00::/8")) is not None
    assert A.refusal("100.100.100.200", explicit=net("100.64.0.0/10")) is not None
    own = [ipaddress.ip_address("10.9.9.9")]
    assert A.refusal("10.9.9.9", explicit=net("10.0.0.0/8"), own=own) is not None      # own needs the exact address
    assert A.refusal("10.9.9.9", explicit=net("10.9.9.9/32"), own=own) is None


def test_embedded_v4_judged():
    assert "169.254.169.254" in (A.refusal("::ffff:169.254.169.254") or "")
    assert "metadata" in (A.refusal("64:ff9b::a9fe:a9fe") or "")
    assert "metadata" in (A.refusal("2002:a9fe:a9fe::") or "")
    # Teredo: server 65.54.227.120, client ~ 192.0.2.45 (documentation): refused by the client part
    assert A.refusal("2001:0:4136:e378:8000:63bf:3fff:fdd2") is not None


def test_host_addresses_reads_this_host():
    own = A.host_addresses()
    assert ipaddress.ip_address("127.0.0.1") in own
    h = A.HostAddresses(ttl=100, reader=lambda: frozenset({ipaddress.ip_address("198.51.100.1")}))
    assert h.get() == frozenset({ipaddress.ip_address("198.51.100.1")})


def test_ioctl_fallback_agrees_with_proc():
    assert ipaddress.ip_address("127.0.0.1") in A._ioctl_v4()
    assert A._ioctl_v4() <= A.host_addresses()


def test_entry_for():
    assert entry_for("Example.com.", 443) == "example.com"
    assert entry_for("example.com", 8443) == "example.com:8443"
    assert entry_for("192.0.2.1", 80) == "192.0.2.1:80"
    assert entry_for("2001:db8::1", 443) == "2001:db8::1"
    assert entry_for("2001:db8::1", 22) == "[2001:db8::1]:22"
    assert entry_for("exa_mple.com", 443) is None
    for host, port in (("example.com", 8443), ("2001:db8::1", 22), ("192.0.2.1", 443)):
        assert Rules.parse([entry_for(host, port)]).decide(host, port).allowed


@pytest.mark.parametrize("entry", ["localhost", "localhost:*", "127.0.0.1", "[::1]:*", "::1",
                                   "127.0.0.0/8:80", "[::ffff:127.0.0.1]"])
def test_host_loopback_needs_one_address_and_one_port(entry):
    with pytest.raises(RuleError, match="loopback"):
        Rules.parse([entry])
    Rules.parse(deny=[entry])       # a deny may name every port


def test_host_loopback_entries():
    r = Rules.parse(["localhost:11434", "127.0.0.1:5432", "[::1]:8080", "example.com"])
    for ip, port in (("127.0.0.1", 11434), ("::1", 11434), ("127.0.0.1", 5432), ("::1", 8080)):
        got = r.host_service(ip, port)
        assert got is not None and got.port == port, (ip, port)
    assert r.host_service("127.0.0.1", 11434).alias == (ipaddress.ip_address("::1"),)
    assert r.host_service("::1", 11434).text == "localhost:11434"
    # exactly those: no neighbouring port, no other loopback address, no other family
    for ip, port in (("127.0.0.1", 11435), ("127.0.0.2", 11434), ("::1", 5432),
                     ("127.0.0.1", 8080), ("127.0.0.1", 443)):
        assert r.host_service(ip, port) is None, (ip, port)
    assert r.decide("localhost", 11434).allowed and not r.decide("localhost", 443).allowed
    # a deny of localhost wins over the addresses it stands for
    d = Rules.parse(["127.0.0.1:5432"], ["localhost"])
    assert d.host_service("127.0.0.1", 5432) is None
    # a network that only contains loopback opens nothing of it
    assert Rules.parse(["0.0.0.0/0:80"]).host_service("127.0.0.1", 80) is None
