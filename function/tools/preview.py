"""`function-model-serving preview`: both render stages through the real CLI.

Stage 1 renders a ModelDeployment on a fleet directory (InferenceClusters as
required resources, optional existing ModelReplicas as the ledger and as the
observed replicas); stage 2 renders each ModelReplica it placed down to the
objects its cluster receives. The table shows where every replica and engine
landed and what that leaves free per pool; unscheduled replicas show why.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Mapping
from typing import Any

import click
import yaml

from function.contract.api import KIND_INFERENCE_CLUSTER, KIND_MODEL_DEPLOYMENT, KIND_MODEL_REPLICA
from function.contract.capacity import replica_usage
from function.tools import localrender

ROOT = localrender.ROOT
MD = ROOT / "apis" / "modeldeployment"
MR = ROOT / "apis" / "modelreplica"


def run_preview(fleet_dir: str, deployment: str, replicas_dir: str | None, output: str,
                crossplane_bin: str | None, core_bin: str | None,
                replicas_override: int | None = None) -> int:
    try:
        tools = localrender.find_tools(crossplane_bin, core_bin)
        with localrender.serve_locally() as address, tempfile.TemporaryDirectory() as tmp:
            if replicas_override is not None:
                # A what-if: the same deployment scaled, written beside the others.
                docs = load_dir(pathlib.Path(deployment))
                docs[0].setdefault("spec", {})["replicas"] = replicas_override
                deployment = str(pathlib.Path(tmp) / "deployment.yaml")
                pathlib.Path(deployment).write_text(yaml.safe_dump_all(docs))
            stage1, stage2 = render_all(tools, address, pathlib.Path(fleet_dir),
                                        pathlib.Path(deployment),
                                        pathlib.Path(replicas_dir) if replicas_dir else None,
                                        pathlib.Path(tmp))
    except localrender.RenderError as exc:
        click.echo(f"preview failed: {exc}", err=True)
        return 1
    if output == "yaml":
        # The deployment with its status, each replica with the status stage 2
        # gave it (not stage 1's copy), then each replica's composed objects.
        docs = [d for d in stage1 if d.get("kind") not in ("Result", KIND_MODEL_REPLICA)]
        docs += [_composite(c) for _, c in sorted(stage2.items())]
        for _, composed in sorted(stage2.items()):
            docs += [d for d in composed if d.get("kind") not in ("Result", KIND_MODEL_REPLICA)]
        click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
    else:
        click.echo(table(stage1, stage2, load_dir(pathlib.Path(fleet_dir)),
                         load_dir(pathlib.Path(replicas_dir)) if replicas_dir else []))
    return 0


def render_all(tools, address, fleet: pathlib.Path, deployment: pathlib.Path,
               replicas: pathlib.Path | None, tmp: pathlib.Path):
    required = [fleet] + ([replicas] if replicas else [])
    stage1 = localrender.render(tools, address, deployment, MD / "composition.yaml",
                                required=required, observed=replicas,
                                xrd=MD / "definition.yaml")
    stage2 = {}
    for mr in (d for d in stage1 if d.get("kind") == KIND_MODEL_REPLICA):
        path = tmp / f"{mr['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(mr))
        stage2[mr["metadata"]["name"]] = localrender.render(
            tools, address, path, MR / "composition.yaml", required=[fleet],
            xrd=MR / "definition.yaml")
    return stage1, stage2


def load_dir(path: pathlib.Path) -> list[dict]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def _composite(docs: list[dict]) -> dict:
    return next(d for d in docs if d.get("kind") == KIND_MODEL_REPLICA)


def table(stage1: list[dict], stage2: Mapping[str, list[dict]], fleet: list[dict],
          existing: list[dict]) -> str:
    md = next(d for d in stage1 if d.get("kind") == KIND_MODEL_DEPLOYMENT)
    placed = [d for d in stage1 if d.get("kind") == KIND_MODEL_REPLICA]
    status = md.get("status") or {}
    lines = [f"ModelDeployment {md['metadata'].get('namespace', '')}/{md['metadata']['name']}: "
             + _counts(status)]
    rows = [("REPLICA", "CLUSTER", "ENGINE", "POOL", "NODES", "OBJECTS")]
    for mr in sorted(placed, key=lambda m: int(m["metadata"]["labels"]
                                                ["modelplane.ai/replica-index"])):
        objects = [d for d in stage2.get(mr["metadata"]["name"], [])
                   if d.get("kind") not in (KIND_MODEL_REPLICA, "Result")]
        for i, engine in enumerate(mr["spec"]["engines"]):
            usage = replica_usage([engine])
            rows.append((mr["metadata"]["name"] if i == 0 else "",
                         mr["spec"]["clusterName"] if i == 0 else "", engine["name"],
                         engine["members"][0]["nodePoolName"],
                         str(sum(usage.values())), str(len(objects)) if i == 0 else ""))
    lines += _columns(rows)

    ledger: dict[tuple[str, str], int] = {}
    mine = {(m["metadata"].get("namespace"), m["metadata"]["name"]) for m in placed}
    for mr in placed + [e for e in existing if e.get("kind") == KIND_MODEL_REPLICA and
                        (e["metadata"].get("namespace"), e["metadata"]["name"]) not in mine]:
        for pool, n in replica_usage(mr["spec"]["engines"]).items():
            key = (mr["spec"]["clusterName"], pool)
            ledger[key] = ledger.get(key, 0) + n
    pools = [("CLUSTER", "POOL", "NODES", "USED", "FREE")]
    for ic in sorted((d for d in fleet if d.get("kind") == KIND_INFERENCE_CLUSTER),
                     key=lambda d: d["metadata"]["name"]):
        for p in ic["spec"].get("nodePools") or []:
            used = ledger.get((ic["metadata"]["name"], p["name"]), 0)
            pools.append((ic["metadata"]["name"], p["name"], str(p["nodes"]), str(used),
                          str(max(0, p["nodes"] - used))))
    lines += ["", "Pools after placement:", *_columns(pools)]

    lines += ["", "Objects each cluster receives:"]
    for mr in sorted(placed, key=lambda m: m["metadata"]["name"]):
        lines.append(f"  {mr['metadata']['name']} -> {mr['spec']['clusterName']}")
        for d in stage2.get(mr["metadata"]["name"], []):
            if d.get("kind") in (KIND_MODEL_REPLICA, "Result"):
                continue
            inner = ((d.get("spec") or {}).get("forProvider") or {}).get("manifest")
            shown = inner if d.get("kind") == "Object" and isinstance(inner, dict) else d
            via = " (provider-kubernetes Object)" if shown is not d else ""
            lines.append(f"    {shown.get('kind')} {shown['metadata'].get('name')}{via}")

    unscheduled = status.get("unscheduled") or []
    if unscheduled:
        lines += ["", "Unscheduled:"]
        for u in unscheduled:
            lines.append(f"  replica {u['index']}: {u['reason']}")
            # Each cluster's own verdict, as `kubectl get md -o yaml` shows it.
            lines += [f"    {c['name']}: {c['reason']}" for c in u.get("clusters") or []]
    for c in status.get("conditions") or []:
        if c.get("type") in ("ReplicasScheduled", "ReplicasReady"):
            lines.append(f"{c['type']}={c['status']} ({c.get('reason', '')}): "
                         f"{c.get('message', '')}")
    return "\n".join(lines)


def _counts(status: Mapping[str, Any]) -> str:
    r = status.get("replicas") or {}
    return (f"{r.get('desired', 0)} desired, {r.get('scheduled', 0)} scheduled, "
            f"{r.get('ready', 0)} ready")


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]

