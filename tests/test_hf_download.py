"""The hydration Job's Hugging Face step, run as the Job runs it (`python3 -c
<source> <json>`), against a recording stand-in for huggingface_hub: the
commit is resolved once and pinned, patterns and single files pass through."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from function.composer.modelcache import hydration

STANDIN = '''
import json, os, pathlib
LOG = pathlib.Path(os.environ["HUB_LOG"])
def _log(**kw):
    with LOG.open("a") as f:
        f.write(json.dumps(kw, sort_keys=True) + "\\n")
class errors:
    class RepositoryNotFoundError(Exception):
        pass
def _fail():
    how = os.environ.get("HUB_FAIL")
    if how == "full":
        import errno
        raise OSError(errno.ENOSPC, "No space left on device")
    if how == "missing":
        raise errors.RepositoryNotFoundError("404 Client Error: Repository Not Found")
class _Info:
    def __init__(self, sha): self.sha = sha
class HfApi:
    def model_info(self, repo, revision):
        _log(call="model_info", repo=repo, revision=revision)
        return _Info(os.environ["HUB_COMMIT"])
def snapshot_download(repo, revision, local_dir, allow_patterns, ignore_patterns):
    _fail()
    _log(call="snapshot_download", repo=repo, revision=revision, local_dir=local_dir,
         allow=allow_patterns, ignore=ignore_patterns)
def hf_hub_download(repo, filename, revision, local_dir):
    _log(call="hf_hub_download", repo=repo, filename=filename, revision=revision,
         local_dir=local_dir)
'''


def stage(tmp: pathlib.Path, spec: dict, commit: str, fail: str = "") -> list[dict]:
    (tmp / "hub").mkdir(exist_ok=True)
    (tmp / "hub" / "huggingface_hub.py").write_text(STANDIN)
    log = tmp / "calls.jsonl"
    log.unlink(missing_ok=True)
    [step] = hydration.steps({"source": "HuggingFace", "huggingFace": spec})
    assert step.command[:2] == ("python3", "-c")
    args = [sys.executable, "-c", step.command[2], *step.args]
    # The Job writes into the volume at /mnt/models; here, into tmp.
    args[-1] = args[-1].replace('"/mnt/models"', json.dumps(str(tmp / "models")))
    proc = subprocess.run(args, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp / "hub"), "HUB_LOG": str(log),
                               "HUB_COMMIT": commit, "HUB_FAIL": fail, "PATH": "/usr/bin:/bin"})
    if fail:
        return [{"exit": proc.returncode, "stderr": proc.stderr}]
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_branch_is_resolved_once_and_its_commit_pinned_for_every_resume(tmp_path):
    spec = {"repo": "Qwen/Qwen3-8B", "revision": "main", "sizeGiB": 40,
            "allowPatterns": ["*.safetensors"], "ignorePatterns": ["original/*"]}
    first = stage(tmp_path, spec, commit="aaa111")
    assert first[0] == {"call": "model_info", "repo": "Qwen/Qwen3-8B", "revision": "main"}
    assert first[1] == {"call": "snapshot_download", "repo": "Qwen/Qwen3-8B",
                        "revision": "aaa111", "local_dir": str(tmp_path / "models"),
                        "allow": ["*.safetensors"], "ignore": ["original/*"]}
    # The branch moved on the Hub; a retried pod still downloads the pinned commit.
    again = stage(tmp_path, spec, commit="bbb222")
    assert [c["call"] for c in again] == ["snapshot_download"]
    assert again[0]["revision"] == "aaa111"


def test_a_different_revision_is_pinned_on_its_own(tmp_path):
    stage(tmp_path, {"repo": "Qwen/Qwen3-8B", "revision": "main", "sizeGiB": 1}, "aaa111")
    calls = stage(tmp_path, {"repo": "Qwen/Qwen3-8B", "revision": "v2", "sizeGiB": 1}, "ccc333")
    assert calls[-1]["revision"] == "ccc333"


def test_a_single_file_is_fetched_alone(tmp_path):
    calls = stage(tmp_path, {"repo": "TheBloke/Llama-GGUF", "revision": "main", "sizeGiB": 8,
                             "filename": "llama.Q4_K_M.gguf"}, "ddd444")
    assert calls[-1] == {"call": "hf_hub_download", "repo": "TheBloke/Llama-GGUF",
                         "filename": "llama.Q4_K_M.gguf", "revision": "ddd444",
                         "local_dir": str(tmp_path / "models")}


def test_a_full_volume_and_a_missing_repository_end_with_the_codes_the_job_fails_on(tmp_path):
    spec = {"repo": "Qwen/Qwen3-8B", "revision": "main", "sizeGiB": 1}
    [full] = stage(tmp_path, spec, "aaa111", fail="full")
    assert full["exit"] == hydration.EXIT_NO_SPACE and "no space left" in full["stderr"]
    [missing] = stage(tmp_path, spec, "aaa111", fail="missing")
    assert missing["exit"] == hydration.EXIT_NOT_FOUND and "not found" in missing["stderr"]
