"""The pinned llm-d binaries accept what the composer emits for them.

The EPP image and the routing sidecar image (serving_config) are built from the
Go module hack/tools/llm-d-inference-scheduler pins; `hack/tools.sh --dataplane`
builds the same module's cmd/epp and cmd/pd-sidecar into the tool cache. Here
they run on freshly composed replicas (Unified behind an endpoint picker, and
PrefillDecode with every engine kind and connector the sidecar has a protocol
for):

* the sidecar: every flag is in its --help (pflag hides deprecated ones), every
  protocol SIDECAR_CONNECTORS can emit is one --kv-connector lists, and with
  the composed arguments it passes its own validation and listens on --port
  (what the composed tcpSocket readiness probe checks). It logs "Invalid
  configuration" and exits 0 on a value it refuses, so its log is what is read.
* the EPP: every flag is in its --help, and with the composed arguments and
  EndpointPickerConfig (and a kubeconfig whose API server refuses connections)
  it parses its flags, loads the config (every plugin type registered, every
  reference resolved, the prefix scorer's parameters taken as written, nothing
  deprecated, P/D disaggregation on) and only then fails, on the API server.
  The EPP ignores parameter names it does not know, which is why the prefix
  scorer's logged config and the P/D handler's warnings are checked.

Binaries come from $EPP and $PD_SIDECAR, else from `hack/tools.sh --dataplane
--env` (which builds what is missing); a missing binary fails, nothing skips.
Every process is bounded in time.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from composer_support import compose, replica, standalone, template

from e2e.controlplane import tools
from function.composer.routing import serving_config

ROOT = Path(__file__).resolve().parents[2]
MODULE = "github.com/llm-d/llm-d-inference-scheduler"
BUILD_TIMEOUT = 1800   # a cold build of the data-plane tools (hack/tools/README.md: ~7 min each)
RUN_TIMEOUT = 60       # one EPP start-up, or one sidecar start-up, on a busy machine

VLLM = {"command": ["vllm", "serve"]}
SGLANG = {"image": "lmsysorg/sglang:v0.5.4", "command": ["python3", "-m", "sglang.launch_server"]}


# --- the binaries ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llmd() -> dict[str, str]:
    """{"EPP": path, "PD_SIDECAR": path}: from the environment, else hack/tools.sh."""
    found = {k: os.environ.get(k, "") for k in ("EPP", "PD_SIDECAR")}
    if not all(found.values()):
        try:
            proc = subprocess.run(["bash", "hack/tools.sh", "--dataplane", "--env"], cwd=ROOT,
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"hack/tools.sh --dataplane --env took over {BUILD_TIMEOUT}s",
                        pytrace=False)
        if proc.returncode != 0:
            pytest.fail(f"hack/tools.sh --dataplane --env failed ({proc.returncode}):\n"
                        f"{proc.stderr[-6000:]}", pytrace=False)
        printed = tools.parse_env(proc.stdout)
        found = {k: v or printed.get(k, "") for k, v in found.items()}
    for name, path in found.items():
        if not path or not os.access(path, os.X_OK):
            pytest.fail(f"the pinned llm-d binary {name} is not available ({path!r}); "
                        "`make tools-dataplane` builds it", pytrace=False)
    return found


def test_the_binaries_are_built_from_the_release_the_images_pin():
    pinned = tools.go_mod_pin(ROOT / "hack" / "tools" / "llm-d-inference-scheduler" / "go.mod",
                              MODULE)
    for image in (serving_config.EPP_IMAGE, serving_config.SIDECAR_IMAGE):
        assert image.rsplit(":", 1)[1] == pinned, (image, pinned)


def help_flags(binary: str) -> dict[str, str]:
    """--name -> its help line, from `binary --help` (pflag prints it and exits 0)."""
    proc = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=RUN_TIMEOUT)
    flags = {}
    for line in (proc.stdout + proc.stderr).splitlines():
        m = re.match(r"^\s+(?:-\w, )?(--[a-z0-9-]+)\b(.*)$", line)
        if m:
            flags[m.group(1)] = m.group(2)
    assert flags, f"{binary} --help printed no flags:\n{proc.stdout}{proc.stderr}"
    return flags


def flag_names(args: list[str]) -> list[str]:
    assert all(a.startswith("--") for a in args), args  # always --name or --name=value
    return [a.split("=", 1)[0] for a in args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_values(args: list[str], values: dict[str, str]) -> list[str]:
    """The arguments with some flags' values replaced (ports, paths), nothing else."""
    out = []
    for a in args:
        name = a.split("=", 1)[0]
        out.append(f"{name}={values[name]}" if name in values else a)
    return out


# --- what the composer emits -------------------------------------------------------------------


def engine(name: str, phase: str | None, fields: dict, *args: str, copies: int = 1) -> dict:
    e = standalone(name, copies=copies, template=template(**{**fields, "args": [*args]}))
    return dict(e, phase=phase) if phase else e


def prefill_decode(kind: str, connector: str | None) -> dict:
    if kind == "vllm":
        engines = (engine("prefill", "Prefill", VLLM, "m"),
                   engine("decode", "Decode", VLLM, "m", "--port=8200", copies=2))
    else:
        engines = (engine("prefill", "Prefill", SGLANG, "--model-path", "m", "--port", "8000"),
                   engine("decode", "Decode", SGLANG, "--model-path", "m", "--port", "8200"))
    mr = replica(*engines, mode="PrefillDecode")
    if connector:
        mr["spec"]["serving"]["kvConnector"] = connector
    return mr


def endpoint_picker() -> dict:
    mr = replica(engine("vllm", None, VLLM, "m", "--port", "8000", copies=2))
    mr["spec"]["serving"]["router"] = "EndpointPicker"
    return mr


# Every (engine kind, kvConnector) with a sidecar protocol: SIDECAR_CONNECTORS.
PD_CASES = [(kind, connector)
            for kind in (serving_config.VLLM, serving_config.SGLANG)
            for connector, proxy in serving_config.SIDECAR_CONNECTORS[kind].items()
            if proxy is not None]
EPP_CASES = {"endpoint-picker": (endpoint_picker, 1), "prefill-decode": (
    lambda: prefill_decode("vllm", None), 1), "prefill-decode-ha": (
    lambda: prefill_decode("vllm", None), 2)}


def composed_sidecar(kind: str, connector: str) -> dict:
    out = compose(prefill_decode(kind, connector))
    (sidecar,) = [c for m in out.of_kind("Deployment")
                  for c in m["spec"]["template"]["spec"].get("initContainers") or []
                  if c["name"] == "routing-proxy"]
    return sidecar


def composed_epp(make, replicas: int, monkeypatch) -> tuple[dict, str]:
    """(the EPP container, its EndpointPickerConfig text)."""
    monkeypatch.setenv("MODELPLANE_EPP_REPLICAS", str(replicas))
    out = compose(make())
    assert not out.fatal, out.fatal
    (container,) = [c for m in out.of_kind("Deployment") for c in
                    m["spec"]["template"]["spec"]["containers"] if c["name"] == "epp"]
    text = out.one("ConfigMap")["data"][serving_config.EPP_CONFIG_FILE]
    return container, text


# --- the routing sidecar -----------------------------------------------------------------------


def test_the_sidecar_knows_every_protocol_the_composer_can_emit(llmd):
    help_line = help_flags(llmd["PD_SIDECAR"])["--kv-connector"]
    supported = {p.strip() for p in help_line.split("Supported:", 1)[1].split(",")}
    assert set(serving_config.SIDECAR_PROTOCOLS) <= supported, supported


@pytest.mark.parametrize("kind, connector", PD_CASES, ids=[f"{k}-{c.value}" for k, c in PD_CASES])
def test_the_sidecar_takes_its_composed_flags_and_listens(llmd, kind, connector, tmp_path):
    sidecar = composed_sidecar(kind, connector)
    offered = help_flags(llmd["PD_SIDECAR"])
    missing = [f for f in flag_names(sidecar["args"]) if f not in offered]
    assert not missing, f"flags pd-sidecar v0.7.1 does not list: {missing}"

    port = free_port()
    args = with_values(sidecar["args"], {"--port": str(port), "--vllm-port": str(free_port())})
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([llmd["PD_SIDECAR"], *args], stdout=out, stderr=subprocess.STDOUT,
                                env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)})
        try:
            listening = wait_listening(port, proc)
        finally:
            stop(proc)
    text = log.read_text()
    assert "Invalid configuration" not in text and "deprecated" not in text.lower(), text
    assert listening, f"pd-sidecar never listened on {port} (exit {proc.returncode}):\n{text}"
    config = json.loads(next(json.loads(line)["config"] for line in text.splitlines()
                             if '"Proxy configuration"' in line))
    assert config["KVConnector"] == serving_config.SIDECAR_CONNECTORS[kind][connector]
    assert config["SecureServing"] is False


def wait_listening(port: int, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            s.settimeout(1)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# --- the endpoint picker -----------------------------------------------------------------------


@pytest.fixture
def unreachable_kubeconfig(tmp_path) -> Path:
    """A kubeconfig whose API server is a loopback port nothing listens on."""
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "none",
        "clusters": [{"name": "none", "cluster": {
            "server": f"https://127.0.0.1:{free_port()}", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "none", "user": {"token": "none"}}],
        "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}]}))
    return path


@pytest.mark.parametrize("case", list(EPP_CASES))
def test_the_epp_loads_its_composed_flags_and_config(llmd, case, tmp_path, monkeypatch,
                                                     unreachable_kubeconfig):
    make, replicas = EPP_CASES[case]
    container, text = composed_epp(make, replicas, monkeypatch)
    offered = help_flags(llmd["EPP"])
    missing = [f for f in flag_names(container["args"]) if f not in offered]
    assert not missing, f"flags the EPP v0.7.1 does not list: {missing}"
    assert ("--ha-enable-leader-election" in container["args"]) is (replicas > 1)

    config_file = tmp_path / serving_config.EPP_CONFIG_FILE
    config_file.write_text(text)
    args = with_values(container["args"], {
        "--config-file": str(config_file), "--grpc-port": str(free_port()),
        "--grpc-health-port": str(free_port()), "--metrics-port": str(free_port())})
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "KUBECONFIG": str(unreachable_kubeconfig),
           "NAMESPACE": "ml-team", "POD_NAME": "epp-0"}
    try:
        proc = subprocess.run([llmd["EPP"], *args], capture_output=True, text=True, env=env,
                              timeout=RUN_TIMEOUT)
        log = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as timeout:  # it got further than expected: still read
        log = (timeout.stdout or b"").decode() + (timeout.stderr or b"").decode()
    lines = log.splitlines()

    assert any('"Flags processed"' in line for line in lines), log[-4000:]
    assert "loaded configuration from file/text successfully" in log, log[-6000:]
    for refused in ("Failed to parse configuration", "Failed to validate flags", "unknown flag",
                    "P/D disaggregation disabled", "Prefix-based PD disabled"):
        assert refused not in log, log[-6000:]
    deprecated = [line for line in lines if "deprecat" in line.lower()]
    assert not deprecated, deprecated
    # What stopped it is the API server this test refuses it, nothing of ours.
    assert "connection refused" in log, log[-4000:]

    prefix = next(p for p in yaml.safe_load(text)["plugins"]
                  if p["type"] == "prefix-cache-scorer")["parameters"]
    (logged,) = [json.loads(line)["config"] for line in lines
                 if '"PrefixCachePlugin initialized"' in line]
    # Every parameter name taken: an unknown one is ignored, and its default logged.
    assert {k: logged.get(k) for k in prefix} == prefix, logged
