"""The recommended DeploymentRuntimeConfig for the function (#33 finding 11):
examples/platform/function-runtime-config.yaml runs the function's pod at Pod
Security "restricted", with a read-only root filesystem, a memory limit and no
ServiceAccount token. (test_examples_validate validates it against Crossplane's
own CRD, vendored in crds/crossplane/.)"""

from __future__ import annotations

import pathlib

import yaml
from pod_security_standards import violations

ROOT = pathlib.Path(__file__).resolve().parent.parent
PATH = ROOT / "examples" / "platform" / "function-runtime-config.yaml"


def pod() -> dict:
    (drc,) = [d for d in yaml.safe_load_all(PATH.read_text()) if d]
    assert (drc["apiVersion"], drc["kind"]) == ("pkg.crossplane.io/v1beta1",
                                                "DeploymentRuntimeConfig")
    return drc["spec"]["deploymentTemplate"]["spec"]["template"]


def test_the_function_pod_meets_pod_security_restricted():
    assert violations(pod(), "restricted") == []


def test_the_function_container_is_read_only_bounded_and_unprivileged():
    spec = pod()["spec"]
    (container,) = spec["containers"]
    # Crossplane fills in the container of this name with the package's image.
    assert container["name"] == "package-runtime"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 65532  # the image's user
    assert container["resources"]["limits"]["memory"] == "1Gi"
    assert spec["automountServiceAccountToken"] is False


def test_the_install_and_security_guides_point_at_it():
    for page in ("install.md", "security.md"):
        assert "examples/platform/function-runtime-config.yaml" in \
            (ROOT / "docs" / page).read_text(), page
