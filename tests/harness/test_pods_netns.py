"""Pod network namespaces (e2e/controlplane/pods/netns.py), with `ip` replaced by
a recorder: a bridge per cluster holding the last address of the pod CIDR, a
namespace per pod with its IP on eth0 and lo up, never a default route nor a
forwarding switch, and removal that succeeds when there is nothing to remove."""

from __future__ import annotations

import ipaddress

import pytest

from e2e.controlplane.pods import netns
from e2e.controlplane.pods.netns import Bridge, NetnsError, Network


class FakeIp:
    """Records every `ip` call; `fail` maps an argv prefix to (code, stderr)."""

    def __init__(self, fail=None):
        self.calls: list[list[str]] = []
        self.fail = fail or {}

    def __call__(self, argv):
        self.calls.append(list(argv))
        for prefix, result in self.fail.items():
            if tuple(argv[1:1 + len(prefix)]) == prefix:
                return result
        return 0, ""

    def lines(self):
        return [" ".join(c[1:]) for c in self.calls]


def test_names_fit_the_kernels_15_bytes_and_differ_per_cluster_and_pod():
    assert len(netns.bridge_name("a-very-long-cluster-name-eu-west-1")) <= 15
    assert netns.bridge_name("eu-west-1") != netns.bridge_name("us-east-1")
    a, b = netns.netns_name("eu", "uid-1"), netns.netns_name("eu", "uid-2")
    assert a != b and netns.netns_name("us", "uid-1") != a
    assert len(netns.veth_name(a)) <= 15
    assert netns.netns_name("eu", "uid-1") == a  # derived, so cleanup needs no saved state


def test_the_bridge_takes_the_last_usable_address_of_the_pod_cidr():
    br = Bridge.for_cluster("eu", "10.64.0.0/16")
    assert br.address == ipaddress.IPv4Address("10.64.255.254")
    with pytest.raises(NetnsError):
        Bridge.for_cluster("eu", "10.64.0.0/31")


def test_ensure_bridge_creates_it_once_with_its_address_up():
    ip = FakeIp(fail={("link", "show"): (1, 'Device "x" does not exist.')})
    br = Bridge.for_cluster("eu", "10.64.0.0/16")
    Network(run=ip).ensure_bridge(br)
    assert ip.lines() == [f"link show dev {br.name}", f"link add {br.name} type bridge",
                          f"addr add 10.64.255.254/16 dev {br.name}", f"link set {br.name} up"]
    # Again, with the bridge and its address there: no error, nothing re-created.
    ip2 = FakeIp(fail={("addr", "add"): (2, "RTNETLINK answers: File exists")})
    Network(run=ip2).ensure_bridge(br)
    assert not any(line.startswith("link add") for line in ip2.lines())
    # Newer iproute2 words it differently (a supervisor's restart crashed on it, live).
    ip3 = FakeIp(fail={("addr", "add"): (2, "Error: ipv4: Address already assigned.")})
    Network(run=ip3).ensure_bridge(br)
    assert ip3.lines()[-1] == f"link set {br.name} up"


def test_add_pod_puts_the_ip_in_the_pods_namespace_with_no_default_route():
    ip = FakeIp()
    br = Bridge.for_cluster("eu", "10.64.0.0/16")
    ns = netns.netns_name("eu", "uid-1")
    veth = netns.veth_name(ns)
    Network(run=ip).add_pod(br, ns, "10.64.0.7")
    lines = ip.lines()
    # Whatever a previous run left is removed first.
    assert lines[:2] == [f"netns del {ns}", f"link del {veth}"]
    assert lines[2:] == [
        f"netns add {ns}",
        f"link add {veth} type veth peer name eth0 address 02:42:0a:40:00:07 netns {ns}",
        f"link set {veth} master {br.name}",
        f"link set {veth} up",
        f"-n {ns} link set lo up",
        f"-n {ns} addr add 10.64.0.7/16 dev eth0",
        f"-n {ns} link set eth0 up",
    ]
    assert not any("route" in line or "forward" in line or "sysctl" in line for line in lines)


@pytest.mark.parametrize("pod_ip", ["10.65.0.7", "10.64.255.254"])
def test_a_pod_ip_outside_the_cidr_or_on_the_bridge_is_refused(pod_ip):
    ip = FakeIp()
    with pytest.raises(NetnsError, match="not a pod address"):
        Network(run=ip).add_pod(Bridge.for_cluster("eu", "10.64.0.0/16"), "ns", pod_ip)
    assert ip.calls == []


def test_a_failed_add_leaves_nothing_behind():
    ip = FakeIp(fail={("link", "set"): (2, "RTNETLINK answers: Operation not permitted")})
    ns = netns.netns_name("eu", "uid-1")
    with pytest.raises(NetnsError, match="Operation not permitted"):
        Network(run=ip).add_pod(Bridge.for_cluster("eu", "10.64.0.0/16"), ns, "10.64.0.7")
    assert ip.lines()[-2:] == [f"netns del {ns}", f"link del {netns.veth_name(ns)}"]


def test_removal_is_idempotent_but_other_errors_are_loud():
    gone = FakeIp(fail={("netns", "del"): (1, ('Cannot remove namespace file "/run/netns/x": '
                                              'No such file or directory')),
                        ("link", "del"): (1, 'Cannot find device "fmsv-x"')})
    Network(run=gone).remove_pod("x")
    Network(run=gone).remove_bridge(Bridge.for_cluster("eu", "10.64.0.0/16"))
    busy = FakeIp(fail={("netns", "del"): (1, "Device or resource busy")})
    with pytest.raises(NetnsError, match="busy"):
        Network(run=busy).remove_pod("x")


def test_processes_enter_the_namespace_through_ip_netns_exec():
    assert Network(run=FakeIp()).exec_prefix("ns1") == ["ip", "netns", "exec", "ns1"]


def test_a_reused_pod_ip_keeps_its_mac_so_cached_arp_entries_stay_right():
    # kwok hands a freed IP to the next pod at once: the new pod must answer at the
    # MAC the host's and other pods' neighbour caches already hold for that IP.
    ip = ipaddress.IPv4Address("10.64.1.254")
    assert netns.pod_mac(ip) == "02:42:0a:40:01:fe" == netns.pod_mac(ipaddress.IPv4Address(str(ip)))
    assert netns.pod_mac(ipaddress.IPv4Address("10.64.1.253")) != netns.pod_mac(ip)
    assert int(netns.pod_mac(ip).split(":")[0], 16) & 0b11 == 0b10  # local, unicast
