"""Stage one Hugging Face source into a directory; runs inside the hydration Job.

The Job runs this file's source with `python3 -c <source> <json>` in the
downloader image (hydration.py), so it needs nothing but `huggingface_hub`,
which that image ships. The JSON says what to fetch:
`{"repo", "revision", "dest", "allow": [...], "ignore": [...], "filename"}`.

Resumable: huggingface_hub skips files already complete in `dest`, so a
retried or restarted Job continues where the last one stopped. The branch or
tag asked for is resolved to a commit once and the commit is pinned in
`dest/.modelplane/<digest>.revision`: a resume downloads the same commit
even if the branch moved meanwhile, never a mix of two. The token comes
from HF_TOKEN in the environment (the cache's auth Secret), as
huggingface_hub reads it.

Two failures end the Job at once instead of being retried, with an exit code
the Job's podFailurePolicy names in its Failed condition (hydration.py), so
the cache can say why: the volume is full (NO_SPACE: raise sizeGiB), or the
repository, revision or file does not exist or the token may not read it
(NOT_FOUND).
"""

import errno
import hashlib
import json
import pathlib
import sys

NO_SPACE = 28   # ENOSPC
NOT_FOUND = 3


def pinned(state: pathlib.Path, repo: str, revision: str, resolve) -> str:
    """The commit `revision` resolved to the first time, resolving it now if never."""
    pin = state / (hashlib.sha256(f"{repo}@{revision}".encode()).hexdigest()[:16] + ".revision")
    if pin.exists():
        return pin.read_text().strip()
    commit = resolve(repo, revision)
    pin.write_text(commit + "\n")
    return commit


def main(argv: list) -> int:
    import huggingface_hub as hub

    errors = getattr(hub, "errors", None) or getattr(hub, "utils", None)
    missing = tuple(getattr(errors, n) for n in (
        "RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError",
        "GatedRepoError") if hasattr(errors, n))
    try:
        return stage(hub, json.loads(argv[1]))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        print(f"no space left on the volume: {exc}", file=sys.stderr)
        return NO_SPACE
    except missing as exc:
        print(f"not found, or not readable with the token: {exc}", file=sys.stderr)
        return NOT_FOUND


def stage(hub, spec: dict) -> int:
    dest = pathlib.Path(spec["dest"])
    state = dest / ".modelplane"
    state.mkdir(parents=True, exist_ok=True)
    commit = pinned(state, spec["repo"], spec.get("revision") or "main",
                    lambda repo, rev: hub.HfApi().model_info(repo, revision=rev).sha)
    if spec.get("filename"):
        hub.hf_hub_download(spec["repo"], spec["filename"], revision=commit, local_dir=str(dest))
    else:
        hub.snapshot_download(spec["repo"], revision=commit, local_dir=str(dest),
                              allow_patterns=spec.get("allow") or None,
                              ignore_patterns=spec.get("ignore") or None)
    print(f"staged {spec['repo']}@{commit} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
