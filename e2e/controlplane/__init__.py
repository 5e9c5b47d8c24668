"""A real local control plane on loopback, without Docker (`make cluster`).

    from e2e.controlplane import ControlPlane

    cp = ControlPlane.up("examples/fleet")      # start everything (or ControlPlane.load())
    cp.kubeconfig                               # the control plane's kubeconfig
    cp.clusters["eu-west-1"].kubeconfig         # a workload cluster's (InferenceCluster name)
    cp.kubectl("get", "md", "-A")               # CompletedProcess; cluster="eu-west-1" for remote
    cp.stop("apiserver:eu-west-1"); cp.start("apiserver:eu-west-1")
    cp.down()

See core.py for what runs, and `python -m e2e.controlplane --help`.
"""

from e2e.controlplane.core import (DEFAULT_STATE_DIR, ClusterHandle, ControlPlane,
                                   ControlPlaneError, stop_everything)
from e2e.controlplane.waits import ComponentDied, WaitTimeout

__all__ = ["ControlPlane", "ClusterHandle", "ControlPlaneError", "ComponentDied", "WaitTimeout",
           "DEFAULT_STATE_DIR", "stop_everything"]
