"""The handlers: one module per composite kind, the entry RunFunction dispatches to.

Each handler is the shared prologue (prologue.py: validate, refuse, prune)
around the body of its engine: the scheduler (ModelDeployment), the composer
(ModelReplica, ModelCache, ModelService), the cluster observer
(InferenceCluster); InferenceQuota and ModelEndpoint compose nothing and keep
their small bodies here. The engines import the contract and the request kit,
never a handler nor each other.
"""

from __future__ import annotations

from collections.abc import Callable

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.contract.api import (
    KIND_INFERENCE_CLUSTER,
    KIND_INFERENCE_QUOTA,
    KIND_MODEL_CACHE,
    KIND_MODEL_DEPLOYMENT,
    KIND_MODEL_ENDPOINT,
    KIND_MODEL_REPLICA,
    KIND_MODEL_SERVICE,
)
from function.handlers import (
    inferencecluster,
    inferencequota,
    modelcache,
    modeldeployment,
    modelendpoint,
    modelreplica,
    modelservice,
)
from function.kit.request import Request

Handler = Callable[[Request, fnv1.RunFunctionResponse], None]

HANDLERS: dict[str, Handler] = {
    KIND_INFERENCE_CLUSTER: inferencecluster.run,
    KIND_MODEL_DEPLOYMENT: modeldeployment.run,
    KIND_MODEL_REPLICA: modelreplica.run,
    KIND_MODEL_CACHE: modelcache.run,
    KIND_INFERENCE_QUOTA: inferencequota.run,
    KIND_MODEL_ENDPOINT: modelendpoint.run,
    KIND_MODEL_SERVICE: modelservice.run,
}
