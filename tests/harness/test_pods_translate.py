"""Engine command lines -> the llm-d inference simulator's flags
(e2e/controlplane/pods/translate.py). Every composed form is covered: `vllm
serve`, vLLM's API server module, SGLang's launch_server, and each inside `sh -c`;
what the simulator does not model is returned as dropped, as written."""

from __future__ import annotations

import pytest
import yaml

from e2e.controlplane.pods.images import Role
from e2e.controlplane.pods.translate import Settings, TranslateError, translate

TAIL = ("--force-dummy-tokenizer", "--time-to-first-token=0s", "--inter-token-latency=0s",
        "--kv-cache-transfer-latency=0s")

CASES = [
    pytest.param(
        Role.VLLM, ["vllm", "serve"],
        ["meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--max-model-len", "8192",
         "--gpu-memory-utilization", "0.90"], {},
        ("--model=meta-llama/Llama-3.1-8B-Instruct", "--port=8000", "--max-model-len=8192"),
        ("--gpu-memory-utilization 0.90",), id="vllm-serve"),
    pytest.param(
        Role.VLLM, ["vllm", "serve"],
        ["Qwen/Qwen3-32B", "--port=8200", "--tensor-parallel-size", "2", "--block-size", "16",
         "--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'], {},
        ("--model=Qwen/Qwen3-32B", "--port=8200", "--max-model-len=32768", "--block-size=16"),
        ("--tensor-parallel-size 2",
         '--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both"}'),
        id="vllm-pd-decode"),
    pytest.param(
        Role.VLLM, ["vllm", "serve"],
        ["m", "--served-model-name", "alias-a", "alias-b", "--max-num-seqs", "64",
         "--enable-prefix-caching", "--seed", "7"], {},
        ("--model=m", "--port=8000", "--served-model-name", "alias-a", "alias-b",
         "--max-model-len=32768", "--max-num-seqs=64", "--seed=7"),
        ("--enable-prefix-caching",), id="vllm-served-names"),
    pytest.param(
        Role.VLLM, [], ["--model", "m", "--max-model-len", "32k"], {},
        ("--model=m", "--port=8000", "--max-model-len=32000"), (),
        id="vllm-image-entrypoint"),
    pytest.param(
        Role.VLLM, ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        ["--model", "m", "--port", "9000", "--lora-modules", "sql=/adapters/sql"], {},
        ("--model=m", "--port=9000", "--max-model-len=32768", "--lora-modules",
         '{"name": "sql", "path": "/adapters/sql"}'), (), id="vllm-api-server-lora"),
    pytest.param(
        Role.VLLM, ["/bin/sh", "-c"],
        [("ray start --head --port=6379 && exec vllm serve big/model --port 8000 "
         "--tensor-parallel-size 8 --max-model-len 16384")], {},
        ("--model=big/model", "--port=8000", "--max-model-len=16384"),
        ("--tensor-parallel-size 8",), id="vllm-leader-behind-ray"),
    pytest.param(
        Role.VLLM, ["/bin/sh", "-c"],
        [('exec vllm serve ds --port 8000 --data-parallel-size 16 --data-parallel-size-local 8 '
         '--data-parallel-address "${LEADER}"')], {"LEADER": "10.64.0.3"},
        ("--model=ds", "--port=8000", "--max-model-len=32768", "--data-parallel-size=8"),
        ("--data-parallel-size 16", "--data-parallel-address 10.64.0.3"),
        id="vllm-dp-local-wins-and-shell-vars-expand"),
    pytest.param(
        Role.VLLM, ["vllm", "serve"], ["m", "--data-parallel-size=12", "--block-size=1"], {},
        ("--model=m", "--port=8000", "--max-model-len=32768", "--data-parallel-size=8"),
        ("--block-size 1 (the simulator takes (8, 16, 32, 64, 128))",
         "data parallel size 12 capped at 8"), id="vllm-out-of-simulator-range"),
    pytest.param(
        Role.SGLANG, ["python3", "-m", "sglang.launch_server"],
        ["--model-path", "Qwen/Qwen2.5-7B-Instruct", "--host", "0.0.0.0", "--port", "8000",
         "--mem-fraction-static", "0.85", "--context-length", "4096",
         "--max-running-requests", "32", "--dp-size", "2"], {},
        ("--model=Qwen/Qwen2.5-7B-Instruct", "--port=8000", "--max-model-len=4096",
         "--max-num-seqs=32", "--data-parallel-size=2"),
        ("--host 0.0.0.0", "--mem-fraction-static 0.85"), id="sglang"),
    pytest.param(
        Role.SGLANG, ["sh", "-c"],
        [("exec python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-R1 --tp 16 "
         "--nnodes 2 --node-rank 0 --dist-init-addr 10.64.0.9:5000 --host 0.0.0.0")], {},
        ("--model=deepseek-ai/DeepSeek-R1", "--port=30000", "--max-model-len=32768"),
        ("--tp 16", "--nnodes 2", "--node-rank 0", "--dist-init-addr 10.64.0.9:5000",
         "--host 0.0.0.0"), id="sglang-leader-default-port"),
]


@pytest.mark.parametrize("role, command, args, env, flags, dropped", CASES)
def test_engine_command_lines_translate(role, command, args, env, flags, dropped):
    t = translate(role, command, args, env)
    assert t.serving
    assert t.argv == (*flags, *TAIL)
    assert t.dropped == dropped


@pytest.mark.parametrize("role, command, args", [
    (Role.VLLM, ["/bin/sh", "-c"],
     ["exec vllm serve ds --headless --data-parallel-size 16 --data-parallel-start-rank $((R * 8))"]),
    (Role.VLLM, ["/bin/sh", "-c"], ['exec ray start --address="${LEADER}:6379" --block']),
    (Role.SGLANG, ["sh", "-c"],
     ["exec python3 -m sglang.launch_server --model-path m --nnodes 2 --node-rank 1"]),
])
def test_workers_that_serve_no_api_run_nothing(role, command, args):
    t = translate(role, command, args, {})
    assert not t.serving and t.argv == () and t.reason


def test_latency_and_context_length_come_from_the_harness_settings():
    s = Settings(time_to_first_token="20ms", inter_token_latency="5ms",
                 kv_cache_transfer_latency="1ms", max_model_len=4096)
    t = translate(Role.VLLM, ["vllm", "serve"], ["m"], {}, s)
    assert t.argv[-4:] == ("--force-dummy-tokenizer", "--time-to-first-token=20ms",
                           "--inter-token-latency=5ms", "--kv-cache-transfer-latency=1ms")
    assert "--max-model-len=4096" in t.argv
    # The pod's own setting wins over the harness's stand-in.
    assert "--max-model-len=512" in translate(
        Role.VLLM, ["vllm", "serve"], ["m", "--max-model-len", "512"], {}, s).argv


@pytest.mark.parametrize("role, command, args, message", [
    (Role.VLLM, ["vllm", "serve"], ["--port", "8000"], "no model"),
    (Role.VLLM, ["vllm", "serve"], ["m", "--max-model-len", "lots"], "not a number"),
    (Role.SGLANG, [], ["--model-path", "m"], "without a command"),
    (Role.EPP, [], [], "not an engine"),
])
def test_what_cannot_be_translated_is_an_error_not_a_guess(role, command, args, message):
    with pytest.raises(TranslateError, match=message):
        translate(role, command, args, {})


def _golden_engine_containers():
    """Every vLLM/SGLang container the composer emits in tests/golden."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[1] / "golden"

    def walk(o):
        if isinstance(o, dict):
            for c in o.get("containers") or ():
                if isinstance(c, dict) and "image" in c:
                    yield c
            for v in o.values():
                yield from walk(v)
        elif isinstance(o, list):
            for v in o:
                yield from walk(v)
    for path in sorted(root.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for c in walk(doc):
                if c["image"].startswith(("vllm/", "lmsysorg/")):
                    yield path.name, c


def test_every_golden_engine_container_translates_or_is_a_worker():
    seen = 0
    for name, c in _golden_engine_containers():
        role = Role.VLLM if c["image"].startswith("vllm/") else Role.SGLANG
        env = {"MODELPLANE_LEADER_ADDRESS": "10.64.0.2", "MODELPLANE_RANK": "1"}
        t = translate(role, c.get("command") or [], c.get("args") or [], env)
        seen += 1
        if t.serving:
            assert t.model and t.port > 0, name
            assert "--force-dummy-tokenizer" in t.argv, name
    assert seen > 10  # the walk found the composer's engines
