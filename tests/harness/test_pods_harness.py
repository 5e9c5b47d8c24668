"""How make cluster runs the pods supervisor (e2e/controlplane/pods/harness.py)."""

from __future__ import annotations

from pathlib import Path

from schemas import Schemas

from e2e.controlplane.pods import harness, netns


def test_every_cluster_gets_its_own_pod_cidr_and_bridge_address():
    cidrs = [harness.pod_cidr(i) for i in range(8)]
    assert len(set(cidrs)) == 8 and cidrs[0] == "10.64.0.0/16"
    bridges = [netns.Bridge.for_cluster(f"c{i}", c) for i, c in enumerate(cidrs)]
    assert len({b.name for b in bridges}) == 8
    assert str(bridges[0].address) == "10.64.255.254"


def test_the_supervisor_runs_with_the_pinned_binaries_on_the_clusters_kubeconfig():
    tools = {"INFERENCE_SIM": "/t/sim", "EPP": "/t/epp", "PD_SIDECAR": "/t/pd",
             "LWS_MANAGER": "/t/lws"}
    spec = harness.supervisor_spec("eu", kubeconfig=Path("/s/eu.kubeconfig"), cidr="10.65.0.0/16",
                                   state_dir=Path("/s/pods"), tools=tools, repo=Path("/repo"))
    argv = list(spec.argv)
    assert spec.name == "pods:eu" and argv[1:3] == ["-m", "e2e.controlplane.pods"]
    for flag, value in (("--cluster", "eu"), ("--kubeconfig", "/s/eu.kubeconfig"),
                        ("--cidr", "10.65.0.0/16"), ("--inference-sim", "/t/sim"),
                        ("--epp", "/t/epp"), ("--pd-sidecar", "/t/pd"),
                        ("--lws-manager", "/t/lws")):
        assert argv[argv.index(flag) + 1] == value


def test_the_example_secret_is_what_the_examples_read_and_valid_kubernetes():
    docs = harness.example_secrets(["ml-team", "ml-team", "b"])
    assert [(d["kind"], d["metadata"].get("namespace")) for d in docs] == [
        ("Namespace", None), ("Secret", "b"), ("Namespace", None), ("Secret", "ml-team")]
    schemas = Schemas()
    assert [e for d in docs for e in schemas.errors(d)] == []
    examples = Path(__file__).resolve().parents[2] / "examples" / "deployments"
    text = "".join(p.read_text() for p in examples.glob("*.yaml"))
    assert f"name: {harness.EXAMPLE_SECRET['name']}" in text
    assert f"key: {harness.EXAMPLE_SECRET['key']}" in text


class FakeNetwork(netns.Network):
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        super().__init__(run=lambda argv: (self.calls.append(tuple(argv)) or (0, "")))


def test_clean_up_removes_only_our_namespaces_and_bridges(monkeypatch):
    monkeypatch.setattr(netns, "list_namespaces", lambda: ["fmsp-a-b", "other"])
    monkeypatch.setattr(netns, "list_bridges", lambda: ["fmsb-0123456789"])
    net = FakeNetwork()
    assert harness.clean_up(net) == ["fmsp-a-b", "fmsb-0123456789"]
    deleted = [c for c in net.calls if "del" in c]
    assert ("ip", "netns", "del", "fmsp-a-b") in deleted
    assert ("ip", "link", "del", "fmsb-0123456789") in deleted
    assert not any("other" in c for c in net.calls)
