"""The folder layout is the architecture (docs/layout.md): what sits where, who imports whom."""

from __future__ import annotations

import ast
import importlib
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
FUNCTION = ROOT / "function"
# What the handlers run: each imports only the contract and the request kit.
ENGINES = {"cluster", "composer", "scheduler"}
# Which parts each part may import (besides itself).
ALLOWED = {
    "contract": set(),
    "kit": {"contract"},
    "agent": {"contract"},
    "runtime": {"contract", "kit"},
    "tools": {"contract"},
    "handlers": {"contract", "kit", *ENGINES},
    **{e: {"contract", "kit"} for e in ENGINES},
}
# Where the runtime reaches out: dispatch to the handlers; the CLI to preview and the agent.
RUNTIME_REACHES = {"fn.py": {"handlers"}, "main.py": {"tools", "agent"}}


def part(module: str) -> str | None:
    """`function.contract.api` -> `contract`; None for a module outside function."""
    names = module.split(".")
    return names[1] if names[0] == "function" and len(names) > 1 else None


def imported_parts(path: pathlib.Path) -> set[str]:
    parts = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            parts |= {part(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "function":
                parts |= {a.name for a in node.names}
            else:
                parts.add(part(node.module))
    return parts - {None, "__version__"}


def test_the_top_of_function_holds_the_handlers_and_the_role_folders():
    top = {p.name for p in FUNCTION.iterdir() if p.name != "__pycache__"}
    assert top == {"__init__.py", "__version__.py", "agent", "cluster", "composer", "contract",
                   "handlers", "kit", "runtime", "scheduler", "tools"}


def test_each_part_imports_only_what_its_role_allows():
    wrong = []
    for path in sorted(FUNCTION.rglob("*.py")):
        rel = path.relative_to(FUNCTION)
        own = rel.parts[0].removesuffix(".py")
        if own in ("__init__", "__version__"):
            continue
        allowed = ALLOWED[own] | {own}
        if own == "runtime":
            allowed |= RUNTIME_REACHES.get(rel.name, set())
        for other in sorted(imported_parts(path) - allowed):
            wrong.append(f"function/{rel} imports function.{other}")
    assert not wrong, "\n".join(wrong)


def test_every_kind_has_one_handler_module_and_the_dispatcher_uses_it():
    from function import handlers
    from function.contract import api

    kinds = {v for k, v in vars(api).items() if k.startswith("KIND_")}
    assert set(handlers.HANDLERS) == kinds
    modules = {p.stem for p in (FUNCTION / "handlers").glob("*.py")} - {"__init__", "prologue"}
    assert modules == {k.lower() for k in kinds}
    for kind, run in handlers.HANDLERS.items():
        assert run is importlib.import_module(f"function.handlers.{kind.lower()}").run, kind
