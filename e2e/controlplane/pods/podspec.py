"""What a kubelet works out from a Pod before it starts a container: env and files.

- `container_env`: a container's environment as a kubelet builds it: `envFrom`
  (ConfigMap/Secret, with prefix), then `env` in order, each value `$(VAR)`-
  expanded against what came before; `valueFrom` reads the downward API
  (`fieldRef`: metadata.name/namespace/uid, labels['k'], annotations['k'],
  status.podIP/podIPs, spec.nodeName, spec.serviceAccountName) or a
  ConfigMap/Secret key through a lookup callable. A missing required key is an
  error, as kubelet's CreateContainerConfigError is. `resourceFieldRef` is not
  supported (an error, not a guess).
- `expand`: kubelet's `$(VAR)` expansion of command and args.
- `materialise_volumes`: ConfigMap, Secret, downwardAPI and projected volumes
  written as files, emptyDir as an empty directory, one directory per volume
  under the pod's own directory. Other volume types (PVCs, hostPath, CSI) get
  none: a process that reads them fails on its own.
- `refresh_volumes`: a running pod's ConfigMap/Secret/downwardAPI/projected
  volumes follow their sources, each changed file replaced atomically, as
  kubelet's do; a subPath mount is a copy made at start and does not follow.
- `rewrite_paths`: a process runs in the root mount namespace, so a path under
  a container mountPath is rewritten to the volume's directory, in argv and env
  values, wherever it is a whole argument or follows `=`. It cannot rewrite
  paths the program computes, has compiled in, or reads from inside a mounted
  file; nor does it mount anything (no mount namespace).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

# (kind "ConfigMap" | "Secret", namespace, name) -> its data, decoded to text, or
# None when it does not exist. Secrets' base64 `data` is decoded by the caller
# or passed through `decode_secret`.
Lookup = Callable[[str, str, str], "Mapping[str, str] | None"]


class PodConfigError(RuntimeError):
    """Like kubelet's CreateContainerConfigError: the container cannot start."""


def decode_secret(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret object's `data` (base64) and `stringData` -> text."""
    out = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    out.update(secret.get("stringData") or {})
    return out


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(value: str, env: Mapping[str, str]) -> str:
    """`$(NAME)` -> env[NAME] when defined (else left as written); `$$` -> `$`."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)
    return _VAR.sub(sub, value)


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Mapping[str, Any], pod_ip: str, path: str) -> str:
    """The downward API value of `fieldPath`; status.podIP is the IP kwok assigned."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    m = _SUBSCRIPT.match(path)
    if m:
        return (meta.get(m.group(1)) or {}).get(m.group(2), "")
    simple: dict[str, str] = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", "default"),
        "metadata.uid": meta.get("uid", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.hostIP": (pod.get("status") or {}).get("hostIP", ""),
    }
    if path not in simple:
        raise PodConfigError(f"fieldRef {path!r} is not supported")
    return simple[path]


def _key(lookup: Lookup, kind: str, namespace: str, ref: Mapping[str, Any]) -> str | None:
    data = lookup(kind, namespace, ref.get("name", ""))
    optional = bool(ref.get("optional"))
    if data is None or ref["key"] not in data:
        if optional:
            return None
        what = "not found" if data is None else f"has no key {ref['key']!r}"
        raise PodConfigError(f"{kind} {namespace}/{ref.get('name')} {what}")
    return data[ref["key"]]


def container_env(pod: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str,
                  lookup: Lookup) -> dict[str, str]:
    """The environment kubelet would give this container (images' own ENV excluded)."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    env: dict[str, str] = {}
    for source in container.get("envFrom") or ():
        prefix = source.get("prefix", "")
        for kind, field in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            ref = source.get(field)
            if ref is None:
                continue
            data = lookup(kind, namespace, ref.get("name", ""))
            if data is None:
                if ref.get("optional"):
                    continue
                raise PodConfigError(f"{kind} {namespace}/{ref.get('name')} not found")
            env.update({prefix + k: v for k, v in data.items()})
    for var in container.get("env") or ():
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(var.get("value", ""), env)
            continue
        source = var["valueFrom"]
        value: str | None
        if "fieldRef" in source:
            value = field_ref(pod, pod_ip, source["fieldRef"]["fieldPath"])
        elif "configMapKeyRef" in source:
            value = _key(lookup, "ConfigMap", namespace, source["configMapKeyRef"])
        elif "secretKeyRef" in source:
            value = _key(lookup, "Secret", namespace, source["secretKeyRef"])
        else:
            raise PodConfigError(f"env {name}: valueFrom {sorted(source)} is not supported")
        if value is not None:
            env[name] = value
    return env


# relative path -> (text, mode): what a volume holds.
Files = dict[str, tuple[str, int]]

# The volume kinds a kubelet writes from a source and keeps in step with it while
# the pod runs (its AtomicWriter volumes). emptyDir is the pod's own; PVC,
# hostPath and CSI volumes get nothing here.
FOLLOWING = ("configMap", "secret", "downwardAPI", "projected")


def follows(volume: Mapping[str, Any]) -> bool:
    """Whether a volume is one of the FOLLOWING kinds."""
    return any(k in volume for k in FOLLOWING)


def _items(files: Files, data: Mapping[str, str], items: Sequence[Mapping[str, Any]] | None,
           mode: int, what: str, optional: bool) -> None:
    if items:
        for item in items:
            if item["key"] not in data:
                if optional:
                    continue
                raise PodConfigError(f"{what} has no key {item['key']!r}")
            files[item["path"]] = (data[item["key"]], item.get("mode", mode))
    else:
        files.update({key: (value, mode) for key, value in data.items()})


def _source(files: Files, namespace: str, source: Mapping[str, Any], pod: Mapping[str, Any],
            pod_ip: str, lookup: Lookup, mode: int) -> None:
    """One volume source (or projection) added to `files`."""
    for kind, field, name_key in (("ConfigMap", "configMap", "name"),
                                  ("Secret", "secret", "secretName")):
        if field in source:
            src = source[field]
            name = src.get(name_key) or src.get("name", "")
            data = lookup(kind, namespace, name)
            optional = bool(src.get("optional"))
            if data is None:
                if optional:
                    return
                raise PodConfigError(f"{kind} {namespace}/{name} not found")
            _items(files, data, src.get("items"), src.get("defaultMode", mode),
                   f"{kind} {namespace}/{name}", optional)
            return
    if "downwardAPI" in source:
        for item in source["downwardAPI"].get("items") or ():
            if "fieldRef" not in item:
                raise PodConfigError(f"downwardAPI item {item.get('path')}: only fieldRef is supported")
            files[item["path"]] = (field_ref(pod, pod_ip, item["fieldRef"]["fieldPath"]),
                                   item.get("mode", mode))


def volume_files(pod: Mapping[str, Any], pod_ip: str, volume: Mapping[str, Any],
                 lookup: Lookup) -> Files:
    """What a ConfigMap, Secret, downwardAPI or projected volume holds now."""
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    files: Files = {}
    if "projected" in volume:
        mode = volume["projected"].get("defaultMode", 0o644)
        for source in volume["projected"].get("sources") or ():
            _source(files, namespace, source, pod, pod_ip, lookup, mode)
    else:
        field = next(k for k in FOLLOWING if k in volume)
        _source(files, namespace, volume, pod, pod_ip, lookup,
                volume[field].get("defaultMode", 0o644))
    return files


def sync_files(directory: Path, files: Files) -> list[str]:
    """Make `directory` hold exactly `files`; the relative paths that changed.

    A changed file is written beside itself and renamed over the old one, so a
    reader sees the whole old or the whole new content (kubelet swaps the whole
    volume at once; per file is what a plain directory allows). A file whose key
    is gone is removed, as kubelet's volume drops it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    changed = []
    for rel, (text, mode) in sorted(files.items()):
        path = directory / rel
        try:
            same = path.read_text() == text and path.stat().st_mode & 0o7777 == mode
        except (FileNotFoundError, NotADirectoryError):
            same = False
        if same:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        changed.append(rel)
    wanted = {directory / rel for rel in files}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and path not in wanted:
            path.unlink()
            changed.append(str(path.relative_to(directory)))
    return changed


def materialise_volumes(pod: Mapping[str, Any], pod_ip: str, root: Path,
                        lookup: Lookup) -> dict[str, Path]:
    """Write the pod's file volumes under root/volumes/NAME; return name -> directory."""
    out: dict[str, Path] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        name = volume["name"]
        directory = root / "volumes" / name
        if "emptyDir" in volume:
            directory.mkdir(parents=True, exist_ok=True)
        elif follows(volume):
            sync_files(directory, volume_files(pod, pod_ip, volume, lookup))
        else:
            continue  # PVC, hostPath, CSI...: nothing local to offer
        out[name] = directory
    return out


def refresh_volumes(pod: Mapping[str, Any], pod_ip: str, root: Path,
                    lookup: Lookup) -> list[str]:
    """Bring a running pod's ConfigMap, Secret, downwardAPI and projected volumes in
    step with their sources, as kubelet does (a webhook's certificate Secret is
    filled after its pod starts); `volume/path` of each file that changed. A
    source that cannot be read now (deleted) keeps the files it had, as in kubelet.
    SubPath mounts are copies (container_mounts) and do not follow."""
    changed = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        if not follows(volume):
            continue
        try:
            files = volume_files(pod, pod_ip, volume, lookup)
        except PodConfigError:
            continue
        name = volume["name"]
        changed += [f"{name}/{rel}" for rel in sync_files(root / "volumes" / name, files)]
    return changed


def following(pod: Mapping[str, Any]) -> frozenset[str]:
    """The names of the pod's volumes that follow their source (FOLLOWING)."""
    return frozenset(v["name"] for v in (pod.get("spec") or {}).get("volumes") or ()
                     if follows(v))


def container_mounts(container: Mapping[str, Any], volumes: Mapping[str, Path],
                     subpaths: Path | None = None,
                     frozen: Collection[str] = ()) -> list[tuple[str, Path]]:
    """(mountPath, host path) of the container's mounts that have a directory.

    A subPath mount of a volume named in `frozen` is copied to `subpaths/INDEX`
    and maps there: kubelet bind-mounts the file as it is when the container
    starts, and refresh_volumes' later writes must not reach it.
    """
    mounts = []
    for index, mount in enumerate(container.get("volumeMounts") or ()):
        if mount["name"] not in volumes:
            continue
        host = volumes[mount["name"]] / mount.get("subPath", "")
        if mount.get("subPath") and subpaths is not None and mount["name"] in frozen \
                and host.exists():
            host = _copy(host, subpaths / str(index) / host.name)
        mounts.append((mount["mountPath"].rstrip("/") or "/", host))
    return mounts


def _copy(src: Path, dst: Path) -> Path:
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)  # a restart copies the volume as it is then
    elif dst.exists() or dst.is_symlink():
        dst.unlink()
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy2(src, dst)
    return dst


def rewrite_paths(values: Sequence[str], mounts: Sequence[tuple[str, Path]]) -> list[str]:
    """Rewrite paths under a mountPath to the host directory, longest mount first.

    A path is rewritten when it is the whole value or follows `=` (`--config=/x`);
    `/configs` is not under the mount `/config`.
    """
    ordered = sorted(mounts, key=lambda m: len(m[0]), reverse=True)

    def one(value: str) -> str:
        head, sep, tail = value.partition("=") if not value.startswith("/") else ("", "", value)
        for mount_path, host in ordered:
            if tail == mount_path or tail.startswith(mount_path + "/"):
                return head + sep + str(host) + tail[len(mount_path):]
        return value
    return [one(v) for v in values]
