"""docs/reference.md is fresh, and documents every field and every rule of the XRDs.

The coverage checks below walk the XRD schemas and parse the Markdown on their
own, independently of hack/gen_reference.py, so a generator that drops a field,
a section or a rule fails them; the tests at the end prove the checks can fail.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from builders import ROOT

sys.path.insert(0, str(ROOT / "hack"))
import gen_reference  # noqa: E402
from generated import write_or_check  # noqa: E402

REFERENCE = ROOT / "docs" / "reference.md"
XRDS = sorted(ROOT.glob("apis/*/definition.yaml"))
HEADING = re.compile(r'^(#{2,3}) <a id="([^"]+)"></a>(.*)$')
ROW = re.compile(r"^\| \[?`([^`]+)`")
CELL_SPLIT = re.compile(r"(?<!\\)\|")


def unescape(text: str) -> str:
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


def squash(text: str) -> str:
    return " ".join(text.split())


# --- what the schemas hold, walked here rather than by the generator ----------------


def schema_of(xrd: dict) -> dict:
    return xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def expected(schema: dict) -> tuple[set[str], set[str], set[str], list[tuple[str, str, str]]]:
    """(leaf field paths, every field path, object paths, [(section, rule, message)]).

    A field path is `<object path>.<name>`; an object with properties is a section,
    reached through list items (`[*]`) and map values (`.*`)."""
    leaves: set[str] = set()
    fields: set[str] = set()
    objects: set[str] = set()
    rules: list[tuple[str, str, str]] = []

    def walk(node: dict, path: str, section: str) -> bool:
        """Walk one node; True when it leads to no object with properties (a leaf)."""
        here = path if node.get("properties") else section
        for rule in node.get("x-kubernetes-validations", []):
            rules.append((here, rule["rule"], rule.get("message", "")))
        if node.get("properties"):
            objects.add(path)
            for name, prop in node["properties"].items():
                child = f"{path}.{name}" if path else name
                fields.add(child)
                if walk(prop, child, path):
                    leaves.add(child)
            return False
        leaf = True
        if isinstance(node.get("items"), dict):
            leaf = walk(node["items"], path + "[*]", section) and leaf
        if isinstance(node.get("additionalProperties"), dict):
            leaf = walk(node["additionalProperties"], path + ".*", section) and leaf
        return leaf

    walk(schema, "", "")
    return leaves, fields, objects, rules


# --- what the reference shows, parsed from its Markdown -----------------------------


def parse(text: str) -> dict[str, dict[str, dict]]:
    """kind -> object path -> {"fields": set of field paths, "rules": [rule], "text": str}.
    The kind's own field table (`<Kind> fields`) is the object at path ""."""
    kinds: dict[str, dict[str, dict]] = {}
    kind = section = None
    in_cel = False
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            level, _, title = m.groups()
            if level == "##":
                kind, section = title, None
                if kind not in ("Conventions", "Contents"):
                    kinds[kind] = {}
            elif kind in kinds:
                if title.startswith("`") and title.endswith("`"):
                    section = {"path": title.strip("`")}
                elif title == f"{kind} fields":
                    section = {"path": ""}
                else:
                    section = None
                if section is not None:
                    section.update(fields=set(), rules=[], text="")
                    kinds[kind][section["path"]] = section
            continue
        if section is None:
            continue
        section["text"] += line + "\n"
        if line.strip().startswith("```"):
            in_cel = line.strip() == "```cel"
            continue
        if in_cel:
            section["rules"].append(line.strip())
            continue
        row = ROW.match(line)
        if row and not line.startswith("|---"):
            name = row.group(1)
            section["fields"].add(f"{section['path']}.{name}" if section["path"] else name)
    return kinds


def missing(xrd: dict, text: str) -> list[str]:
    """Everything of one XRD the reference text leaves out, as readable lines."""
    kind = xrd["spec"]["names"]["kind"]
    doc = parse(text).get(kind)
    if doc is None:
        return [f"{kind}: no `## {kind}` section"]
    leaves, fields, objects, rules = expected(schema_of(xrd))
    shown = set().union(*(s["fields"] for s in doc.values()))
    out = [f"{kind}: leaf field {p} has no row" for p in sorted(leaves - shown)]
    out += [f"{kind}: field {p} has no row" for p in sorted(fields - leaves - shown)]
    out += [f"{kind}: object {p} has no section" for p in sorted(objects - doc.keys())]
    for section, rule, message in rules:
        where = doc.get(section)
        if where is None:
            continue  # reported above as a missing section
        if squash(rule) not in map(squash, where["rules"]):
            out.append(f"{kind}: rule {rule!r} is not shown as code under {section or kind}")
        if squash(message) not in squash(unescape(where["text"])):
            out.append(f"{kind}: message {message!r} is not shown under {section or kind}")
    # Each rule is shown once, in the section of the object it sits in or on.
    want = Counter((section, squash(rule)) for section, rule, _ in rules)
    got = Counter((path, squash(r)) for path, s in doc.items() for r in s["rules"])
    out += [f"{kind}: rule {r!r} shown {n} extra time(s) under {p or kind}"
            for (p, r), n in sorted((got - want).items())]
    return out


def load(path) -> dict:
    return yaml.safe_load(path.read_text())


# --- the tests ----------------------------------------------------------------------


def test_reference_is_fresh():
    out = subprocess.run([sys.executable, str(ROOT / "hack" / "gen_reference.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("xrd", XRDS, ids=lambda p: p.parent.name)
def test_every_field_rule_and_message_of_the_xrd_is_in_the_reference(xrd):
    doc = load(xrd)
    leaves, fields, objects, rules = expected(schema_of(doc))
    # Not vacuous: the walk finds what the XRDs are known to hold (a
    # ModelEndpoint is small: a URL, a rewrite path and headers).
    least = 4 if xrd.parent.name == "modelendpoint" else 8
    assert len(leaves) >= least and len(objects) >= 3 and "spec" in fields
    assert missing(doc, REFERENCE.read_text()) == []


def test_reference_documents_kind_names_scope_columns_and_scale():
    text = REFERENCE.read_text()
    for path in XRDS:
        xrd = load(path)
        spec, kind = xrd["spec"], xrd["spec"]["names"]["kind"]
        part = text.split(f"></a>{kind}\n", 1)[1].split("\n## ", 1)[0]
        assert f"| Scope | {spec['scope']} |" in part
        for short in spec["names"].get("shortNames", []):
            assert f"`{short}`" in part.split("\n### ", 1)[0]
        version = spec["versions"][0]
        for col in version.get("additionalPrinterColumns", []):
            assert re.search(rf"^\| {re.escape(col['name'])} \| `{col['type']}` \| \[?`"
                             rf"{re.escape(col['jsonPath'])}`", part, re.M), col
        scale = (version.get("subresources") or {}).get("scale")
        assert ("Scale subresource" in part) == bool(scale)
        for key, value in (scale or {}).items():
            assert f"({key}) | [`{value}`]" in part


def test_every_link_resolves_and_every_anchor_is_unique():
    text = REFERENCE.read_text()
    ids = re.findall(r'<a id="([^"]+)"></a>', text)
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]
    assert sorted(set(re.findall(r"\]\(#([^)]+)\)", text)) - set(ids)) == []


def test_every_table_row_has_as_many_cells_as_its_header():
    """An unescaped pipe in a description or pattern would split a cell on GitHub."""
    width = None
    for n, line in enumerate(REFERENCE.read_text().splitlines(), 1):
        if not line.startswith("|"):
            width = None
            continue
        cells = len(CELL_SPLIT.split(line))
        if width is None:
            width = cells
        assert cells == width, f"docs/reference.md:{n}: {cells - 2} cells, header has {width - 2}"


def test_the_output_is_deterministic():
    first, second = gen_reference.render(), gen_reference.render()
    assert first == second
    assert "\r" not in first[REFERENCE] and first[REFERENCE].endswith("\n")


# --- the checks can fail ---------------------------------------------------------------


@pytest.fixture
def tree(tmp_path):
    """A copy of apis/*/definition.yaml under tmp_path, for generating from edited XRDs."""
    for path in XRDS:
        dest = tmp_path / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True)
        shutil.copy(path, dest)
    return tmp_path


def test_check_mode_reports_a_stale_or_missing_reference(tree, capsys):
    files = gen_reference.render(tree)
    assert write_or_check(files, tree, ["--check"]) == 1  # missing
    assert "stale, run `make generate`: docs/reference.md" in capsys.readouterr().err
    assert write_or_check(files, tree, []) == 0
    assert write_or_check(files, tree, ["--check"]) == 0
    path = tree / "docs" / "reference.md"
    path.write_text(path.read_text().replace("Max items: 16", "Max items: 17", 1))
    assert write_or_check(files, tree, ["--check"]) == 1
    assert "docs/reference.md" in capsys.readouterr().err


def test_coverage_check_catches_a_dropped_row_rule_message_and_section():
    text = REFERENCE.read_text()
    md = load(ROOT / "apis/modeldeployment/definition.yaml")
    assert missing(md, text) == []
    image = "spec.template.spec.engines[*].members[*].template.spec.containers[*].image"
    no_row = "\n".join(line for line in text.splitlines()
                       if not line.startswith("| `image`<br>"))
    assert f"ModelDeployment: leaf field {image} has no row" in missing(md, no_row)
    message = "an env var sets value or valueFrom, not both"
    assert any(message in m for m in missing(md, text.replace(message, "value or valueFrom")))
    rule = "!(has(self.value) && has(self.valueFrom))"
    assert any("is not shown as code" in m for m in missing(md, text.replace(rule, "true")))
    twice = text.replace(f"  ```cel\n  {rule}\n  ```", f"  ```cel\n  {rule}\n  ```\n\n"
                         f"  ```cel\n  {rule}\n  ```", 1)
    assert any("shown 1 extra time(s)" in m for m in missing(md, twice))
    worker = '<a id="modeldeployment-spec-template-spec-engines-members-worker"></a>'
    dropped = re.sub(re.escape(worker) + r".*?(?=\n### )", "", text, flags=re.S)
    assert "ModelDeployment: object spec.template.spec.engines[*].members[*].worker has no " \
           "section" in missing(md, dropped)


def test_a_changed_schema_changes_the_reference(tree):
    """A new field, rule and schema titles (as a later gen_xrds.py may add) are picked up:
    the committed reference misses them, the regenerated one has them."""
    path = tree / "apis/modeldeployment/definition.yaml"
    xrd = load(path)
    schema = schema_of(xrd)

    def title(node: dict, name: str) -> None:
        if node.get("properties"):
            node["title"] = name[:1].upper() + name[1:]
            for key, prop in node["properties"].items():
                title(prop, key)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                title(node[key], name)

    title(schema, "ModelDeployment")
    engine = schema["properties"]["spec"]["properties"]["template"]["properties"]["spec"][
        "properties"]["engines"]["items"]
    engine["properties"]["priorityClass"] = {
        "type": "string", "maxLength": 253, "description": "A | piped description.",
        "x-kubernetes-validations": [{"rule": "self != 'system-node-critical'",
                                      "message": "system priority classes are *reserved*"}]}
    path.write_text(yaml.safe_dump(xrd, sort_keys=False))
    text = gen_reference.render(tree)[tree / "docs" / "reference.md"]

    field = "spec.template.spec.engines[*].priorityClass"
    assert f"ModelDeployment: leaf field {field} has no row" in missing(xrd, REFERENCE.read_text())
    assert missing(xrd, text) == []
    assert "`[]Engines`" in text and "`Template`" in text
    assert "A \\| piped description." in text
    assert copy.deepcopy(xrd) == load(path)  # rendering never edits its input
