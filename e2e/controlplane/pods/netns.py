"""Network namespaces for pods that run as processes: a bridge per cluster, a netns per pod.

    root namespace                       pod netns (fmsp-<hash>)
    bridge fmsb-<hash> 10.64.255.254/16 ── veth fmsv-<hash> ── eth0 10.64.0.7/16, lo up

The bridge holds the last usable address of the cluster's pod CIDR (kwok hands
pod IPs out from the start of it), so the root namespace reaches every pod IP
through the bridge's connected route and pods of one cluster reach each other.
A pod gets NO default route and net.ipv4.ip_forward is never touched (it stays
0): a pod can reach only its own cluster's subnet and the bridge address, and
nothing it sends leaves the machine.

Names are derived from the cluster and the pod (hashes: interface names are at
most 15 bytes), so setup is repeatable and cleanup needs no saved state. Every
removal is idempotent: removing what is already gone succeeds. Uses `ip`
(iproute2) through subprocess; needs CAP_NET_ADMIN (root).
"""

from __future__ import annotations

import hashlib
import ipaddress
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Runs one `ip` command; returns (exit code, stderr). Replaceable in tests.
Run = Callable[[Sequence[str]], "tuple[int, str]"]


class NetnsError(RuntimeError):
    pass


def _run(argv: Sequence[str]) -> tuple[int, str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    return proc.returncode, proc.stderr.strip()


def _h(text: str, n: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


# What every bridge and pod namespace the harness makes is named with, so clean-up
# can find what a crash left behind.
BRIDGE_PREFIX, NETNS_PREFIX = "fmsb-", "fmsp-"


def bridge_name(cluster: str) -> str:
    """`fmsb-` + 10 hex digits of the cluster name: 15 bytes, the kernel's limit."""
    return f"{BRIDGE_PREFIX}{_h(cluster, 10)}"


def cluster_netns_prefix(cluster: str) -> str:
    """What every pod namespace of one cluster starts with."""
    return f"{NETNS_PREFIX}{_h(cluster, 6)}-"


def netns_name(cluster: str, pod_key: str) -> str:
    """The pod's namespace (a file under /run/netns, so no length limit to meet).

    pod_key is whatever names the pod uniquely in its cluster for its lifetime:
    the pod UID (a recreated pod with the same name gets a fresh namespace).
    """
    return f"{cluster_netns_prefix(cluster)}{_h(pod_key, 16)}"


def pod_mac(ip: ipaddress.IPv4Address) -> str:
    """The pod's eth0 MAC, derived from its IP (as Docker derives its containers'): kwok
    hands a freed pod IP to the next pod at once, and a random MAC would leave the
    host's and other pods' ARP caches pointing at the gone pod's, so connections to
    the new pod time out until the entry fails (seen: a 10-s /metrics call to a fresh
    engine pod timed out). One IP, one MAC: a cached entry stays right."""
    return "02:42:" + ":".join(f"{b:02x}" for b in ip.packed)


def veth_name(netns: str) -> str:
    return f"fmsv-{_h(netns, 10)}"


@dataclass(frozen=True)
class Bridge:
    """A cluster's bridge: its name, the pod CIDR and the bridge's own address."""

    name: str
    cidr: ipaddress.IPv4Network

    @property
    def address(self) -> ipaddress.IPv4Address:
        return self.cidr.broadcast_address - 1

    @classmethod
    def for_cluster(cls, cluster: str, cidr: str) -> Bridge:
        net = ipaddress.IPv4Network(cidr, strict=False)
        if net.prefixlen > 30:
            raise NetnsError(f"pod CIDR {cidr} has no room for a bridge and pods")
        return cls(bridge_name(cluster), net)


class Network:
    """Creates and removes bridges and pod namespaces with `ip`."""

    def __init__(self, run: Run = _run, ip: str = "ip") -> None:
        self._run, self._ip = run, ip

    def _must(self, *args: str) -> None:
        code, err = self._run([self._ip, *args])
        if code != 0:
            raise NetnsError(f"ip {' '.join(args)}: {err or f'exit {code}'}")

    def _gone_ok(self, *args: str) -> None:
        """A removal: success, or the thing was already gone."""
        code, err = self._run([self._ip, *args])
        if code != 0 and not _is_absent(err):
            raise NetnsError(f"ip {' '.join(args)}: {err or f'exit {code}'}")

    def _exists_link(self, name: str, netns: str | None = None) -> bool:
        prefix = ["-n", netns] if netns else []
        code, _ = self._run([self._ip, *prefix, "link", "show", "dev", name])
        return code == 0

    def ensure_bridge(self, bridge: Bridge) -> None:
        """Create the bridge with its address, up; no-op when it is there already."""
        if not self._exists_link(bridge.name):
            self._must("link", "add", bridge.name, "type", "bridge")
        code, err = self._run([self._ip, "addr", "add",
                               f"{bridge.address}/{bridge.cidr.prefixlen}", "dev", bridge.name])
        # iproute2 says "File exists" or, in newer releases, "Address already assigned".
        if code != 0 and "File exists" not in err and "already assigned" not in err:
            raise NetnsError(f"ip addr add on {bridge.name}: {err}")
        self._must("link", "set", bridge.name, "up")

    def remove_bridge(self, bridge: Bridge) -> None:
        self.remove_bridge_named(bridge.name)

    def remove_bridge_named(self, name: str) -> None:
        self._gone_ok("link", "del", name)

    def add_pod(self, bridge: Bridge, netns: str, pod_ip: str) -> None:
        """The pod's namespace holding pod_ip on eth0, wired into the bridge.

        Safe to call again for the same pod (after a harness restart): what
        exists is removed first, so the result is always the same.
        """
        ip = ipaddress.IPv4Address(pod_ip)
        if ip not in bridge.cidr or ip == bridge.address:
            raise NetnsError(f"pod IP {pod_ip} is not a pod address of {bridge.cidr}")
        self.remove_pod(netns)
        veth = veth_name(netns)
        try:
            self._must("netns", "add", netns)
            # Both ends are made here; the peer is created inside the pod's namespace.
            self._must("link", "add", veth, "type", "veth", "peer", "name", "eth0",
                       "address", pod_mac(ip), "netns", netns)
            self._must("link", "set", veth, "master", bridge.name)
            self._must("link", "set", veth, "up")
            self._must("-n", netns, "link", "set", "lo", "up")
            self._must("-n", netns, "addr", "add", f"{ip}/{bridge.cidr.prefixlen}", "dev", "eth0")
            self._must("-n", netns, "link", "set", "eth0", "up")
            # No `route add default`: the connected route is all a pod gets.
        except NetnsError:
            self.remove_pod(netns)
            raise

    def remove_pod(self, netns: str) -> None:
        """Remove the pod's namespace and its veth; nothing there is fine."""
        # Deleting the namespace destroys eth0 and with it the root end of the pair;
        # the explicit delete covers a veth left behind by a failed add.
        self._gone_ok("netns", "del", netns)
        self._gone_ok("link", "del", veth_name(netns))

    def exec_prefix(self, netns: str) -> list[str]:
        """argv prefix that runs a command inside the namespace."""
        return [self._ip, "netns", "exec", netns]


def _is_absent(err: str) -> bool:
    return any(s in err for s in ("No such file", "Cannot find device", "does not exist",
                                  "No such device"))


def list_namespaces() -> list[str]:
    """The named namespaces `ip netns` knows (the files under /run/netns)."""
    root = Path("/run/netns")
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def list_bridges() -> list[str]:
    """The cluster bridges (`fmsb-...`) that exist in the root namespace."""
    root = Path("/sys/class/net")
    return sorted(p.name for p in root.iterdir() if p.name.startswith(BRIDGE_PREFIX)) \
        if root.is_dir() else []
