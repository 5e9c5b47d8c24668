"""An engine container's command line -> the llm-d inference simulator's flags.

The simulator rejects flags it does not know, so a vLLM or SGLang command line
cannot be handed to it as is. This module reads the engine's own command line
(as composed: `vllm serve MODEL ...`, `python3 -m sglang.launch_server ...`, or
either inside `sh -c "... && exec vllm serve ..."`), keeps what the simulator
models (the model, served names, port, block size, context length, concurrency,
data parallelism, LoRA, seed) and returns everything else as `dropped`, so the
docs can list what a simulated engine ignores. The composed pod is never
changed: this only decides how the simulator is started in its place.

Always added: `--force-dummy-tokenizer` (without it the simulator fetches a
tokenizer from huggingface.co at start-up) and the harness's simulated latency.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from e2e.controlplane.pods.images import Role

# What the simulator accepts for --block-size and --data-parallel-size.
SIM_BLOCK_SIZES = (8, 16, 32, 64, 128)
SIM_MAX_DP = 8

VLLM_PORT = 8000     # vLLM's default --port
SGLANG_PORT = 30000  # SGLang's default --port


class TranslateError(ValueError):
    """The command line is not one this module can run: better loud than wrong."""


@dataclass(frozen=True)
class Settings:
    """Harness settings for every simulated engine.

    Latencies are Go durations (`0s`, `20ms`). vLLM's default context length
    is the model's, which a simulator cannot know (its own default is 1024
    tokens): `max_model_len` stands in when the pod sets none.
    """

    time_to_first_token: str = "0s"
    inter_token_latency: str = "0s"
    kv_cache_transfer_latency: str = "0s"
    max_model_len: int = 32768

    def latency_flags(self) -> list[str]:
        return [f"--time-to-first-token={self.time_to_first_token}",
                f"--inter-token-latency={self.inter_token_latency}",
                f"--kv-cache-transfer-latency={self.kv_cache_transfer_latency}"]


@dataclass(frozen=True)
class Translation:
    """How to run one engine container as the simulator.

    `serving` is False for a container that serves no API in the real engine
    either (a `--headless` vLLM data-parallel worker, an SGLang node of rank > 0,
    a Ray worker): the runner starts nothing for it. `dropped` holds the engine
    arguments the simulator does not get, as written (`--tensor-parallel-size 2`).
    """

    serving: bool
    argv: tuple[str, ...] = ()
    port: int = 0
    model: str = ""
    dropped: tuple[str, ...] = ()
    reason: str = ""


@dataclass
class _Parsed:
    positional: list[str] = field(default_factory=list)
    flags: list[tuple[str, list[str], str]] = field(default_factory=list)  # (name, values, as written)


# Engine flags that take several values (argparse nargs="+").
_MULTI = {"--served-model-name", "--lora-modules"}
# Engine flags that never take a value: without this a flag followed by a
# positional argument would swallow it.
_BOOLEAN = {"--headless", "--enable-prefix-caching", "--no-enable-prefix-caching",
            "--trust-remote-code", "--enable-expert-parallel", "--enforce-eager",
            "--enable-lora", "--disable-log-requests", "--enable-chunked-prefill",
            "--disable-radix-cache", "--enable-dp-attention", "--enable-metrics"}
_NUMBER = re.compile(r"^-\d")


def _parse(tokens: Sequence[str]) -> _Parsed:
    out = _Parsed()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            out.positional.append(tok)
            i += 1
            continue
        if "=" in tok:
            name, value = tok.split("=", 1)
            out.flags.append((name, [value], tok))
            i += 1
            continue
        values: list[str] = []
        j = i + 1
        if tok not in _BOOLEAN:
            while j < len(tokens) and (not tokens[j].startswith("-") or _NUMBER.match(tokens[j])):
                values.append(tokens[j])
                j += 1
                if tok not in _MULTI:
                    break
        out.flags.append((tok, values, " ".join(tokens[i:j])))
        i = j
    return out


def _int(flag: str, values: list[str]) -> int:
    """An integer flag value; vLLM also takes `32k` (1000s) and `32K` (1024s)."""
    if len(values) != 1:
        raise TranslateError(f"{flag} takes one value, got {values}")
    m = re.fullmatch(r"(\d+)([kKmM]?)", values[0])
    if not m:
        raise TranslateError(f"{flag} {values[0]!r} is not a number")
    scale = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}[m.group(2)]
    return int(m.group(1)) * scale


def _lora(value: str) -> str:
    """vLLM's `name=path` (or JSON) LoRA module -> the simulator's JSON form."""
    if value.lstrip().startswith("{"):
        return value
    name, _, path = value.partition("=")
    return json.dumps({"name": name, "path": path or name})


# engine flag -> (simulator flag, kind). Kinds: int, str, multi, lora.
_VLLM = {
    "--model": ("--model", "str"),
    "--served-model-name": ("--served-model-name", "multi"),
    "--port": ("--port", "int"),
    "--max-model-len": ("--max-model-len", "int"),
    "--max-num-seqs": ("--max-num-seqs", "int"),
    "--block-size": ("--block-size", "int"),
    "--data-parallel-size": ("--data-parallel-size", "int"),
    "--data-parallel-size-local": ("--data-parallel-size", "int"),
    "--seed": ("--seed", "int"),
    "--max-loras": ("--max-loras", "int"),
    "--max-cpu-loras": ("--max-cpu-loras", "int"),
    "--lora-modules": ("--lora-modules", "lora"),
}
_SGLANG = {
    "--model-path": ("--model", "str"),
    "--model": ("--model", "str"),
    "--served-model-name": ("--served-model-name", "multi"),
    "--port": ("--port", "int"),
    "--context-length": ("--max-model-len", "int"),
    "--max-running-requests": ("--max-num-seqs", "int"),
    "--page-size": ("--block-size", "int"),
    "--dp-size": ("--data-parallel-size", "int"),
    "--dp": ("--data-parallel-size", "int"),
    "--random-seed": ("--seed", "int"),
}


def _translate(role: Role, engine_args: Sequence[str], settings: Settings) -> Translation:
    table = _VLLM if role is Role.VLLM else _SGLANG
    parsed = _parse(engine_args)
    values: dict[str, list[str]] = {}
    dropped: list[str] = []
    # vLLM: `vllm serve MODEL`; a second positional is nothing vLLM accepts.
    if role is Role.VLLM and parsed.positional:
        values["--model"] = parsed.positional[:1]
        dropped += parsed.positional[1:]
    else:
        dropped += parsed.positional
    for name, vals, written in parsed.flags:
        if role is Role.VLLM and name == "--headless":
            return Translation(serving=False, reason="a --headless vLLM worker serves no API")
        if role is Role.SGLANG and name == "--node-rank" and vals and vals[0] != "0":
            return Translation(serving=False, reason=f"SGLang node rank {vals[0]} serves no API")
        target = table.get(name)
        if target is None:
            dropped.append(written)
            continue
        sim_flag, kind = target
        if kind == "int":
            _int(name, vals)  # a bad number is an error, not a silent default
        # --data-parallel-size-local (ranks in this pod) wins over the global size.
        if name == "--data-parallel-size" and any(
                n == "--data-parallel-size-local" for n, _, _ in parsed.flags):
            dropped.append(written)
            continue
        values[sim_flag] = vals

    model = (values.get("--model") or [""])[0]
    if not model:
        raise TranslateError(f"no model in the {role.value} command line {list(engine_args)}")
    port = _int("--port", values["--port"]) if "--port" in values else (
        VLLM_PORT if role is Role.VLLM else SGLANG_PORT)
    argv = [f"--model={model}", f"--port={port}"]
    if "--served-model-name" in values:
        # Space-separated values after the flag: the simulator's own parser
        # reads them until the next `--` argument.
        argv += ["--served-model-name", *values["--served-model-name"]]
    argv.append(f"--max-model-len={_int('--max-model-len', values['--max-model-len'])}"
                if "--max-model-len" in values else f"--max-model-len={settings.max_model_len}")
    if "--max-num-seqs" in values:
        argv.append(f"--max-num-seqs={_int('--max-num-seqs', values['--max-num-seqs'])}")
    if "--block-size" in values:
        size = _int("--block-size", values["--block-size"])
        if size in SIM_BLOCK_SIZES:
            argv.append(f"--block-size={size}")
        else:
            dropped.append(f"--block-size {size} (the simulator takes {SIM_BLOCK_SIZES})")
    if "--data-parallel-size" in values:
        dp = _int("--data-parallel-size", values["--data-parallel-size"])
        if dp > SIM_MAX_DP:
            dropped.append(f"data parallel size {dp} capped at {SIM_MAX_DP}")
            dp = SIM_MAX_DP
        if dp > 1:
            # The simulator runs rank r on port+r (vLLM's external load balancing).
            argv.append(f"--data-parallel-size={dp}")
    for flag in ("--seed", "--max-loras", "--max-cpu-loras"):
        if flag in values:
            argv.append(f"{flag}={_int(flag, values[flag])}")
    if "--lora-modules" in values:
        argv += ["--lora-modules", *(_lora(v) for v in values["--lora-modules"])]
    argv.append("--force-dummy-tokenizer")
    argv += settings.latency_flags()
    return Translation(serving=True, argv=tuple(argv), port=port, model=model,
                       dropped=tuple(dropped))


# --- finding the engine in a container's command line ---------------------

_SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/sh", "/usr/bin/bash", "dash"}
_PYTHONS = re.compile(r"^(.*/)?python(3(\.\d+)?)?$")
_SHELL_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _engine_args(role: Role, argv: Sequence[str]) -> list[str] | None:
    """The engine's own arguments in one command (no shell), or None if it runs no engine."""
    argv = list(argv)
    while argv and argv[0] == "exec":
        argv = argv[1:]
    if not argv:
        return None
    base = argv[0].rsplit("/", 1)[-1]
    if role is Role.VLLM and base == "vllm" and argv[1:2] == ["serve"]:
        return argv[2:]
    if _PYTHONS.match(argv[0]) and len(argv) >= 3 and argv[1] == "-m":
        module = argv[2]
        if role is Role.VLLM and module == "vllm.entrypoints.openai.api_server":
            return argv[3:]
        if role is Role.SGLANG and module == "sglang.launch_server":
            return argv[3:]
    return None


def _shell_commands(script: str, env: Mapping[str, str]) -> list[list[str]]:
    """A `sh -c` script -> its simple commands, with `$VAR`/`${VAR}` expanded from env.

    Only what composed scripts use: `&&`, `||`, `;` and `|` separate commands; an
    unset variable expands to nothing, as in the shell. Arithmetic (`$((...))`)
    is left alone.
    """
    expanded = _SHELL_VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), script)
    lex = shlex.shlex(expanded, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    commands: list[list[str]] = [[]]
    for tok in lex:
        if tok and set(tok) <= set(";&|"):
            commands.append([])
        else:
            commands[-1].append(tok)
    return [c for c in commands if c]


def engine_invocation(role: Role, command: Sequence[str], args: Sequence[str],
                      env: Mapping[str, str]) -> list[str] | None:
    """The engine arguments of a container (command + args, `$(VAR)` already
    expanded), or None when it starts no engine (e.g. `ray start --block`)."""
    argv = [*command, *args]
    if not command:
        # The vLLM image's entrypoint is `vllm serve`; SGLang's image has none.
        if role is Role.VLLM:
            return list(args)
        raise TranslateError("an SGLang container without a command runs nothing known")
    if argv[0] in _SHELLS and len(argv) >= 3 and argv[1] == "-c":
        found = None
        for cmd in _shell_commands(argv[2], env):
            found = _engine_args(role, cmd) if found is None else found
        return found
    return _engine_args(role, argv)


def translate(role: Role, command: Sequence[str], args: Sequence[str],
              env: Mapping[str, str], settings: Settings | None = None) -> Translation:
    """How to run an engine container (vLLM or SGLang) as the simulator."""
    settings = settings or Settings()
    if not role.is_engine:
        raise TranslateError(f"{role.value} is not an engine")
    engine = engine_invocation(role, command, args, env)
    if engine is None:
        return Translation(serving=False,
                           reason=f"no {role.value} server in {shlex.join([*command, *args])}")
    return _translate(role, engine, settings)
