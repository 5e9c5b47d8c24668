"""`function-model-serving preview`: both render stages through the real CLI.

Stage 1 renders a ModelDeployment on a fleet directory (InferenceClusters as
required resources, optional existing ModelReplicas as the ledger and as the
observed replicas); stage 2 renders each ModelReplica it placed down to the
objects its cluster receives. The table shows where every replica and engine
landed and what that leaves free per pool; unscheduled replicas show why.

A deployment that mounts a ModelCache (`modelCacheRef`) finds it among the
fleet directory's documents or the `--caches` directory's. The cache is
rendered too, with the replicas stage 1 placed (OnDemand stages where they
land) and its auth Secret assumed to exist (preview never reads secrets), to
show each cluster's cache objects; stage 2 then sees the cache Ready on
every cluster it stages, as it will be once hydrated, to show the mounts.

ModelServices in the fleet directory, in the deployment's namespace, are
rendered too (stage 3), with the ModelEndpoints the previewed replicas get
once they serve: the deployment is rendered again with its placed replicas
observed as Serving at the endpoints stage 2 gave them, so the scheduler
itself emits their endpoints; each service then selects among those and the
fleet directory's own ModelEndpoints (external providers). The table shows
each service's address and the share of its traffic every endpoint would take.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import click
import yaml

from function.contract.api import (
    COMPOSITION_RESOURCE_NAME,
    KIND_INFERENCE_CLUSTER,
    KIND_MODEL_CACHE,
    KIND_MODEL_DEPLOYMENT,
    KIND_MODEL_ENDPOINT,
    KIND_MODEL_REPLICA,
    KIND_MODEL_SERVICE,
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_REPLICA_INDEX,
)
from function.contract.cacheview import cache_ref
from function.contract.capacity import merged, replica_usage
from function.contract.nodes import describe, packed, resolve
from function.contract.records import parse_cluster
from function.contract.enums import CachePhase
from function.contract.names import replica_resource_key
from function.tools import localrender, stackpreview

ROOT = localrender.ROOT
MD = ROOT / "apis" / "modeldeployment"
MR = ROOT / "apis" / "modelreplica"
MC = ROOT / "apis" / "modelcache"
MS = ROOT / "apis" / "modelservice"


def run_preview(fleet_dir: str, deployment: str, replicas_dir: str | None, output: str,
                crossplane_bin: str | None, core_bin: str | None,
                replicas_override: int | None = None, caches_dir: str | None = None,
                platform_dir: str | None = None) -> int:
    try:
        tools = localrender.find_tools(crossplane_bin, core_bin)
        with localrender.serve_locally() as address, tempfile.TemporaryDirectory() as tmp:
            if replicas_override is not None:
                # A what-if: the same deployment scaled, written beside the others.
                docs = load_dir(pathlib.Path(deployment))
                docs[0].setdefault("spec", {})["replicas"] = replicas_override
                deployment = str(pathlib.Path(tmp) / "deployment.yaml")
                pathlib.Path(deployment).write_text(yaml.safe_dump_all(docs))
            stage1, staged, stage2 = render_all(
                tools, address, pathlib.Path(fleet_dir), pathlib.Path(deployment),
                pathlib.Path(replicas_dir) if replicas_dir else None, pathlib.Path(tmp),
                pathlib.Path(caches_dir) if caches_dir else None,
                pathlib.Path(platform_dir) if platform_dir else None)
            routes = render_routes(tools, address, pathlib.Path(fleet_dir),
                                   pathlib.Path(deployment),
                                   pathlib.Path(replicas_dir) if replicas_dir else None,
                                   stage1, stage2, pathlib.Path(tmp))
            stacks = stackpreview.render_stacks(tools, address, pathlib.Path(fleet_dir),
                                                pathlib.Path(tmp))
    except localrender.RenderError as exc:
        click.echo(f"preview failed: {exc}", err=True)
        return 1
    if output == "yaml":
        # The deployment with its status, each replica with the status stage 2
        # gave it (not stage 1's copy), then each replica's composed objects.
        docs = [d for d in stage1 if d.get("kind") not in ("Result", KIND_MODEL_REPLICA)]
        docs += [d for d in staged if d.get("kind") != "Result"]
        docs += [_composite(c) for _, c in sorted(stage2.items())]
        for _, composed in sorted(stage2.items()):
            docs += [d for d in composed if d.get("kind") not in ("Result", KIND_MODEL_REPLICA)]
        docs += [d for d in routes if d.get("kind") != "Result"]
        docs += stackpreview.documents(stacks)
        click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)
    else:
        click.echo(table(stage1, stage2, load_dir(pathlib.Path(fleet_dir)),
                         load_dir(pathlib.Path(replicas_dir)) if replicas_dir else [], staged)
                   + "\n".join(route_lines(routes, stage1) + stackpreview.lines(stacks)))
    return 0


def render_all(tools, address, fleet: pathlib.Path, deployment: pathlib.Path,
               replicas: pathlib.Path | None, tmp: pathlib.Path,
               caches: pathlib.Path | None = None, platform: pathlib.Path | None = None):
    """Stage 1, the deployment's ModelCache rendered (or []), and stage 2."""
    ledger, own = replica_inputs(replicas, deployment, tmp) if replicas else (None, None)
    required = [fleet] + ([caches] if caches else []) + ([ledger] if ledger else []) + (
        [platform] if platform is not None and platform.is_dir() else [])
    stage1 = localrender.render(tools, address, deployment, MD / "composition.yaml",
                                required=required, observed=own,
                                xrd=MD / "definition.yaml")
    placed = [d for d in stage1 if d.get("kind") == KIND_MODEL_REPLICA]
    staged, ready = render_cache(tools, address, fleet, caches, stage1, placed, tmp)
    stage2 = {}
    for mr in placed:
        path = tmp / f"{mr['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(mr))
        stage2[mr["metadata"]["name"]] = localrender.render(
            tools, address, path, MR / "composition.yaml",
            required=[fleet, *ready, localrender.owner_file(stage1, mr, tmp)],
            xrd=MR / "definition.yaml")
    return stage1, staged, stage2


def replica_inputs(replicas: pathlib.Path, deployment: pathlib.Path,
                   tmp: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path | None]:
    """The directory's ModelReplicas as Crossplane sees them: all of them are the
    ledger (a required resource), and the deployment's own are also its observed
    composed resources, each under the key the scheduler gives it (a replica
    written by hand carries none). Both files hold the same copy of each own
    replica: render keeps one object per name."""
    md = load_dir(deployment)[0]
    name, namespace = md["metadata"]["name"], md["metadata"].get("namespace")
    ledger, own = [], []
    for mr in load_dir(replicas):
        meta = mr.get("metadata") or {}
        labels = meta.get("labels") or {}
        if mr.get("kind") == KIND_MODEL_REPLICA and meta.get("namespace") == namespace \
                and labels.get(LABEL_DEPLOYMENT) == name:
            key = replica_resource_key(labels.get(LABEL_CLUSTER, ""),
                                       labels.get(LABEL_REPLICA_INDEX, ""))
            annotations = {COMPOSITION_RESOURCE_NAME: key, **(meta.get("annotations") or {})}
            mr = {**mr, "metadata": {**meta, "annotations": annotations}}
            own.append(mr)
        ledger.append(mr)
    (tmp / "ledger.yaml").write_text(yaml.safe_dump_all(ledger))
    if not own:
        return tmp / "ledger.yaml", None
    (tmp / "observed-replicas.yaml").write_text(yaml.safe_dump_all(own))
    return tmp / "ledger.yaml", tmp / "observed-replicas.yaml"


def render_cache(tools, address, fleet: pathlib.Path, caches: pathlib.Path | None,
                 stage1: list[dict], placed: list[dict], tmp: pathlib.Path):
    """The deployment's ModelCache rendered with the placed replicas, and a file
    holding it Ready on every cluster it stages (what stage 2 reads)."""
    md = next(d for d in stage1 if d.get("kind") == KIND_MODEL_DEPLOYMENT)
    ref = cache_ref(((md.get("spec") or {}).get("template") or {}).get("spec") or {})
    namespace = md["metadata"].get("namespace")
    found = [d for d in load_dir(fleet) + (load_dir(caches) if caches else [])
             if d.get("kind") == KIND_MODEL_CACHE and ref is not None
             and d["metadata"]["name"] == ref.name and d["metadata"].get("namespace") == namespace]
    if not found:
        return [], []
    mc = found[0]
    source = mc["spec"].get("huggingFace") or mc["spec"].get("uri") or {}
    secrets = [{"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": source["authSecret"]["name"], "namespace": namespace}}] \
        if source.get("authSecret") else []
    (tmp / "cache-inputs.yaml").write_text(yaml.safe_dump_all(placed + secrets))
    (tmp / "cache.yaml").write_text(yaml.safe_dump(mc))
    def stage(observed: pathlib.Path | None = None) -> list[dict]:
        return localrender.render(tools, address, tmp / "cache.yaml", MC / "composition.yaml",
                                  required=[fleet, tmp / "cache-inputs.yaml"], observed=observed,
                                  xrd=MC / "definition.yaml")
    staged = stage()
    # A remote cluster's Job waits until its observe-only Object finds the auth Secret
    # there: shown as once the platform has synced it (docs/caches.md).
    found_there = [{**d, "status": {"conditions": [{"type": "Ready", "status": "True"},
                                                   {"type": "Synced", "status": "True"}]}}
                   for d in staged if d.get("kind") == "Object" and _observe_only(d)]
    if found_there:
        (tmp / "cache-secrets.yaml").write_text(yaml.safe_dump_all(found_there))
        staged = stage(tmp / "cache-secrets.yaml")
    rendered = next(d for d in staged if d.get("kind") == KIND_MODEL_CACHE)
    clusters = ((rendered.get("status") or {}).get("clusters")) or []
    hydrated = {**mc, "status": {"clusters": [
        {"name": c["name"], "phase": CachePhase.READY.value} for c in clusters]}}
    (tmp / "cache-ready.yaml").write_text(yaml.safe_dump(hydrated))
    return staged, [tmp / "cache-ready.yaml"]


def render_routes(tools, address, fleet: pathlib.Path, deployment: pathlib.Path,
                  replicas: pathlib.Path | None, stage1: list[dict],
                  stage2: Mapping[str, list[dict]], tmp: pathlib.Path) -> list[dict]:
    """Stage 3: the fleet directory's ModelServices in the deployment's namespace,
    each rendered with the previewed replicas' ModelEndpoints (as once they
    serve) and the fleet's own; [] when there are none."""
    md = next(d for d in stage1 if d.get("kind") == KIND_MODEL_DEPLOYMENT)
    namespace = md["metadata"].get("namespace")
    docs = load_dir(fleet)
    services = [d for d in docs if d.get("kind") == KIND_MODEL_SERVICE
                and d["metadata"].get("namespace") == namespace]
    if not services:
        return []
    serving = []
    for mr in (d for d in stage1 if d.get("kind") == KIND_MODEL_REPLICA):
        rendered = _composite(stage2[mr["metadata"]["name"]])
        endpoint = (rendered.get("status") or {}).get("endpoint")
        if endpoint:  # stage 1's copy: it names its composed-resource key
            serving.append({**mr, "status": {"phase": "Serving", "endpoint": endpoint}})
    (tmp / "serving.yaml").write_text(yaml.safe_dump_all(serving))
    again = localrender.render(tools, address, deployment, MD / "composition.yaml",
                               required=[fleet, tmp / "serving.yaml",
                                         *([tmp / "ledger.yaml"] if replicas else [])],
                               observed=tmp / "serving.yaml", xrd=MD / "definition.yaml")
    endpoints = [d for d in again if d.get("kind") == KIND_MODEL_ENDPOINT]
    (tmp / "endpoints.yaml").write_text(yaml.safe_dump_all(endpoints))
    out = []
    for ms in sorted(services, key=lambda d: d["metadata"]["name"]):
        path = tmp / f"service-{ms['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(ms))
        out += localrender.render(tools, address, path, MS / "composition.yaml",
                                  required=[fleet, tmp / "endpoints.yaml"],
                                  xrd=MS / "definition.yaml")
    return out


def route_lines(routes: list[dict], stage1: list[dict]) -> list[str]:
    """Each service's address and the share of its traffic each endpoint would take."""
    services = [d for d in routes if d.get("kind") == KIND_MODEL_SERVICE]
    if not services:
        return []
    mine = {d["metadata"]["name"] for d in stage1 if d.get("kind") == KIND_MODEL_REPLICA}
    lines = ["", "", "Routes (ModelServices of the fleet directory in this namespace):"]
    for ms in services:
        status = ms.get("status") or {}
        lines.append(f"  {ms['metadata']['name']} -> {status.get('address', '(no address)')} "
                     f"({status.get('active', 'None')} entries take traffic)")
        # The service's own entries, then each rule's: a share is of that part's traffic.
        parts = [("", status)] + [(f"rules[{i}] ({r.get('name')}) ", r)
                                  for i, r in enumerate(status.get("rules") or [])]
        rows = [("ENTRY", "ENDPOINT", "SHARE")]
        for label, part in parts:
            entries = [e for e in part.get("entries") or []
                       if e.get("role") == part.get("active")]
            total = sum(e.get("weight", 0) for e in entries if e.get("endpoints"))
            if label and not entries:
                rows.append((label.strip(), "(none)", "0%"))
            for e in entries:
                where = (f"{label}{'endpoints' if e['role'] == 'Primary' else 'fallback'}"
                         f"[{e['index']}]")
                names = e.get("endpoints") or []
                for name in names:
                    share = e["weight"] * 100 / total / len(names) if total else 0
                    rows.append((where, name + (" (this preview)" if name in mine else ""),
                                 f"{share:.4g}%"))
                if not names:
                    rows.append((where, "(none)", "0%"))
        lines += ["    " + r for r in _columns(rows)]
        for c in status.get("conditions") or []:
            if c.get("type") == "Routed":
                lines.append(f"    Routed={c['status']} ({c.get('reason', '')}): "
                             f"{c.get('message', '')}")
    return lines


def load_dir(path: pathlib.Path) -> list[dict]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def _composite(docs: list[dict]) -> dict:
    return next(d for d in docs if d.get("kind") == KIND_MODEL_REPLICA)


def table(stage1: list[dict], stage2: Mapping[str, list[dict]], fleet: list[dict],
          existing: list[dict], staged: Sequence[dict] = ()) -> str:
    md = next(d for d in stage1 if d.get("kind") == KIND_MODEL_DEPLOYMENT)
    placed = [d for d in stage1 if d.get("kind") == KIND_MODEL_REPLICA]
    status = md.get("status") or {}
    lines = [f"ModelDeployment {md['metadata'].get('namespace', '')}/{md['metadata']['name']}: "
             + _counts(status)]
    clusters = {d["metadata"]["name"]: parse_cluster(d) for d in fleet
                if d.get("kind") == KIND_INFERENCE_CLUSTER}
    rows = [("REPLICA", "CLUSTER", "ENGINE", "POOL", "PODS", "DEVICES PER POD", "OBJECTS")]
    for mr in sorted(placed, key=lambda m: int(m["metadata"]["labels"]
                                                ["modelplane.ai/replica-index"])):
        objects = [d for d in stage2.get(mr["metadata"]["name"], [])
                   if d.get("kind") not in (KIND_MODEL_REPLICA, "Result")]
        cluster = clusters.get(mr["spec"]["clusterName"])
        for i, engine in enumerate(mr["spec"]["engines"]):
            pool_name = engine["members"][0]["nodePoolName"]
            pods = replica_usage([engine]).get(pool_name) or {}
            pool = cluster.pool(pool_name) if cluster is not None else None
            each = sorted({describe(resolve(s, pool), pool) for s in pods}) if pool else []
            rows.append((mr["metadata"]["name"] if i == 0 else "",
                         mr["spec"]["clusterName"] if i == 0 else "", engine["name"],
                         pool_name, str(sum(pods.values())), ", ".join(each) or "none",
                         str(len(objects)) if i == 0 else ""))
    lines += _columns(rows)

    held: dict[str, list] = {}
    mine = {(m["metadata"].get("namespace"), m["metadata"]["name"]) for m in placed}
    for mr in placed + [e for e in existing if e.get("kind") == KIND_MODEL_REPLICA and
                        (e["metadata"].get("namespace"), e["metadata"]["name"]) not in mine]:
        held.setdefault(mr["spec"]["clusterName"], []).append(
            replica_usage(mr["spec"]["engines"]))
    pools = [("CLUSTER", "POOL", "NODES", "USED NODES", "DEVICE", "USED", "FREE",
              "MOST FREE ON ONE NODE")]
    for name, cluster in sorted(clusters.items()):
        used = merged(held.get(name, ()))
        for p in cluster.pools:
            bins = packed(p, used.get(p.name) or {})
            free = bins.free_devices()
            kinds = [i for i in range(len(p.devices)) if bins.cap[i]]  # the claimable ones
            first = (name, p.name, str(p.nodes), str(bins.busy_nodes()))
            for row, i in enumerate(kinds):
                total = bins.cap[i] * p.nodes
                pools.append((*(first if row == 0 else ("",) * 4), p.devices[i].name,
                              str(max(0, total - free[i])), f"{free[i]}/{total}",
                              str(max(0, bins.largest_free(i)))))
            if not kinds:
                pools.append((*first, "none", "", "", ""))
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

    # What the deployment composes beside its replicas (a KEDA ScaledObject for
    # spec.autoscaling), on the control plane itself.
    control = [d for d in stage1 if d.get("kind") not in
               (KIND_MODEL_DEPLOYMENT, KIND_MODEL_REPLICA, "Result")]
    if control:
        lines += ["", "Objects on the control plane:"]
        lines += [f"  {d.get('kind')} {d['metadata'].get('name')}" for d in control]

    lines += _cache_lines(staged, placed)

    unscheduled = status.get("unscheduled") or []
    if unscheduled:
        lines += ["", "Unscheduled:"]
        for u in unscheduled:
            lines.append(f"  replica {u['index']}: {u['reason']}")
            # Each cluster's own verdict, as `kubectl get md -o yaml` shows it.
            lines += [f"    {c['name']}: {c['reason']}" for c in u.get("clusters") or []]
    for c in status.get("conditions") or []:
        if c.get("type") in ("ReplicasScheduled", "ReplicasReady", "Autoscaling"):
            lines.append(f"{c['type']}={c['status']} ({c.get('reason', '')}): "
                         f"{c.get('message', '')}")
    return "\n".join(lines)


def _observe_only(obj: Mapping[str, Any]) -> bool:
    return (obj.get("spec") or {}).get("managementPolicies") == ["Observe"]


def _cache_lines(staged: Sequence[dict], placed: list[dict]) -> list[str]:
    """The cache's objects per cluster, and what each replica mounts."""
    mc = next((d for d in staged if d.get("kind") == KIND_MODEL_CACHE), None)
    if mc is None:
        return []
    spec = mc.get("spec") or {}
    lines = ["", f"ModelCache {mc['metadata'].get('namespace', '')}/{mc['metadata']['name']} "
             f"({spec.get('hydration', 'Eager')}), staged per cluster:"]
    by_cluster: dict[str, list[str]] = {}
    for d in staged:
        if d.get("kind") in (KIND_MODEL_CACHE, "Result"):
            continue
        key = ((d.get("metadata") or {}).get("annotations") or {}).get(
            COMPOSITION_RESOURCE_NAME, "")
        inner = ((d.get("spec") or {}).get("forProvider") or {}).get("manifest")
        shown = inner if d.get("kind") == "Object" and isinstance(inner, dict) else d
        via = " (provider-kubernetes Object)" if shown is not d else ""
        if shown is not d and _observe_only(d):
            via = " (observed, never copied: the platform syncs it there; shown as synced)"
        cluster = key.rsplit("-hydrate-", 1)[0] if "-hydrate-" in key else key.rsplit("-", 1)[0]
        by_cluster.setdefault(cluster, []).append(
            f"    {shown.get('kind')} {shown['metadata'].get('name')}{via}")
    for entry in (mc.get("status") or {}).get("clusters") or []:
        lines.append(f"  {entry['name']}: {entry['phase']} ({entry.get('reason', '')})")
        lines += by_cluster.get(entry["name"], [])
    for c in (mc.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Staged" and c.get("status") != "True":
            lines.append(f"  Staged={c['status']} ({c.get('reason', '')}): {c.get('message', '')}")
    for mr in sorted(placed, key=lambda m: m["metadata"]["name"]):
        ref = cache_ref(mr.get("spec") or {})
        if ref is not None:
            lines.append(f"  {mr['metadata']['name']} mounts it read-only at {ref.mount_path} "
                         f"on {mr['spec']['clusterName']} (shown as once Ready there)")
    return lines


def _counts(status: Mapping[str, Any]) -> str:
    r = status.get("replicas") or {}
    return (f"{r.get('desired', 0)} desired, {r.get('scheduled', 0)} scheduled, "
            f"{r.get('ready', 0)} ready")


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]

