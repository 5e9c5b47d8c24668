"""Render the charts of the stack's controllers into manifests/, from pinned modules.

A component the stack installs with its controller (function/contract/stack.py:
`chart`) ships a Helm chart in its Go module. This renders it once, at build time,
with helm's CLI (`hack/tools.sh --helm`, pinned in hack/tools/helm/go.mod) and a
fixed release name, namespace and values: the function composes the rendered
objects (hack/gen_stack.py reads them) and never runs helm itself. The image tag
is the pinned module's version, so a bump moves the controller with its CRDs.

`--check` fails when a rendering differs from the file (or manifests/ holds a
stray file); run `make vendor-crds` after a bump.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from generated import write_or_check
from vendor_crds import module_dir, pinned

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "manifests"
sys.path.insert(0, str(ROOT))

from function.contract.stack import COMPONENTS, Chart  # noqa: E402

HEADER = ("# Rendered by hack/vendor_charts.py from {module}@{version} {chart}:\n"
          "#   helm template {args}\n{stamp}# Do not edit.\n")
STAMP = "# with its Chart.yaml's version and appVersion set to {version}\n"


def helm() -> str:
    path = os.environ.get("HELM")
    if path:
        return path
    proc = subprocess.run(["bash", str(ROOT / "hack" / "tools.sh"), "--helm"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"hack/tools.sh --helm failed:\n{proc.stderr}")
    return proc.stdout.strip()


def flags(chart: Chart, version: str, values_file: str = "") -> list[str]:
    """`helm template`'s flags after the release and the chart's path: the namespace, the
    filled-in values template (`values_file`, where the chart has one), and the values
    (sorted, so the header and the rendering never depend on the table's order): the
    image tag as a string, the rest as helm reads them (`false`, `null`)."""
    out = ["--namespace", chart.namespace]
    if values_file:
        out += ["--values", values_file]
    for key, value in sorted(chart.values):
        out += ["--set", f"{key}={value}"]
    if chart.image_tag:
        out += ["--set-string", f"{chart.image_tag}={version}"]
    return out


def filled_values(chart: Chart, src: pathlib.Path, version: str) -> str:
    """The chart's values template with its placeholders filled in; every `${...}` must
    be one the table fills, or the rendering would carry it."""
    text = (src / chart.path / chart.values_template).read_text()
    for name, value in chart.template_values:
        text = text.replace("${" + name + "}", value.format(version=version))
    left = re.findall(r"\$\{[A-Za-z_]+\}", text)
    if left:
        raise SystemExit(f"{chart.path}/{chart.values_template}: no value for {sorted(set(left))}")
    return text


def stamped(chart: Chart, src: pathlib.Path, version: str, tmp: pathlib.Path) -> pathlib.Path:
    """The chart's folder to render: the module's own, or, for a chart whose release
    stamps its version, a copy whose Chart.yaml says `version` as both its version
    and its appVersion (what `helm package --version --app-version` writes)."""
    if not chart.stamp_version:
        return src / chart.path
    out = tmp / "chart"
    shutil.copytree(src / chart.path, out, copy_function=shutil.copyfile)  # the cache is read-only
    meta = out / "Chart.yaml"
    text, n = re.subn(r"(?m)^(version|appVersion):.*$", lambda m: f"{m[1]}: {version}",
                      meta.read_text())
    if n != 2:
        raise SystemExit(f"{chart.path}/Chart.yaml: no version and appVersion to stamp")
    meta.write_text(text)
    return out


def render(binary: str) -> dict[pathlib.Path, str]:
    files = {}
    for component in COMPONENTS:
        chart = component.chart
        if chart is None:
            continue
        version = pinned(component.tool, component.module)
        src = module_dir(component.tool, component.module, version)
        with tempfile.TemporaryDirectory() as tmp:
            values_file = ""
            if chart.values_template:
                values_file = str(pathlib.Path(tmp) / chart.values_template)
                pathlib.Path(values_file).write_text(filled_values(chart, src, version))
            folder = stamped(chart, src, version, pathlib.Path(tmp))
            proc = subprocess.run(
                [binary, "template", chart.release, str(folder),
                 *flags(chart, version, values_file)],
                capture_output=True, text=True, check=False,
                env={**os.environ, "HELM_CACHE_HOME": "/nonexistent",
                     "HELM_CONFIG_HOME": "/nonexistent", "HELM_DATA_HOME": "/nonexistent"})
        # The header names the template, not the temporary file it was filled into.
        rest = flags(chart, version, f"{chart.path}/{chart.values_template}"
                     if chart.values_template else "")
        if proc.returncode != 0:
            raise SystemExit(f"helm template {chart.path} failed:\n{proc.stderr}")
        head = HEADER.format(module=component.module, version=version, chart=chart.path,
                             args=" ".join([chart.release, chart.path, *rest]),
                             stamp=STAMP.format(version=version) if chart.stamp_version else "")
        files[OUT / f"{component.field}.yaml"] = head + proc.stdout
    return files


def orphans(files: dict[pathlib.Path, str]) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in OUT.glob("*.yaml") if p not in files)


if __name__ == "__main__":
    rendered = render(helm())
    left = orphans(rendered)
    if left and "--check" in sys.argv[1:]:
        print("manifests/ holds files no chart in function/contract/stack.py writes: "
              + ", ".join(left), file=sys.stderr)
        sys.exit(1)
    for path in left:
        (ROOT / path).unlink()
    sys.exit(write_or_check(rendered, ROOT, sys.argv[1:], fix="make vendor-crds"))
