"""Names of the modelplane.ai API that every module shares."""

from function.contract.names import unique_label

GROUP = "modelplane.ai"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# The composite kinds (hack/gen_xrds.py names them; one Composition each).
KIND_INFERENCE_CLUSTER = "InferenceCluster"
KIND_MODEL_DEPLOYMENT = "ModelDeployment"
KIND_MODEL_REPLICA = "ModelReplica"
KIND_MODEL_CACHE = "ModelCache"
KIND_INFERENCE_QUOTA = "InferenceQuota"
KIND_MODEL_ENDPOINT = "ModelEndpoint"
KIND_MODEL_SERVICE = "ModelService"

# Labels the scheduler puts on every ModelReplica; keys under GROUP/ are
# reserved, so users cannot forge them through template metadata.
LABEL_DEPLOYMENT = f"{GROUP}/deployment"
# Every object and pod a ModelReplica composes, and the ResourceClaims made from its
# ResourceClaimTemplates: what tells the project's device claims from others'
# (contract/allocated.py).
LABEL_REPLICA = f"{GROUP}/replica"
LABEL_CLUSTER = f"{GROUP}/cluster"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
# The ModelCache a ModelReplica mounts: its cache requires the replicas by it.
LABEL_MODEL_CACHE = f"{GROUP}/model-cache"
# The InferenceCluster whose gateway fronts the fleet: ModelServices attach
# their routes to its spec.gateway unless they name a cluster themselves.
LABEL_FRONT_DOOR = f"{GROUP}/front-door"
# The Host a replica's fleet route on its cluster gateway matches
# (composer/routing/gateway.py): `<replica>.<namespace>.` + this. A front door
# reaches a replica by sending its cluster gateway this Host, which Envoy sets
# per chosen endpoint (the endpoint's hostname, `auto_host_rewrite`), so every
# replica of a weighted split is reached at the same path from one Envoy cluster,
# with health and retries across them (docs/front-door.md). `.internal` is
# reserved for private use (ICANN, 2024): public DNS never answers for it.
REPLICA_HOST_SUFFIX = "replica.modelplane.internal"
# The Host of a slice of a ModelService's replicas behind one cluster gateway
# (composer/modelservice/slices.py): `<slice>.<namespace>.` + this.
SLICE_HOST_SUFFIX = "slice.modelplane.internal"
# Set by a front door's backendRef on requests to its endpoint (`<namespace>/<name>`)
# where two endpoints of one route rule share an address (two replicas behind one
# cluster gateway): Envoy keys an Envoy cluster's hosts by address, so such
# endpoints would merge into one host, with one of their Hosts; a filter on each
# backendRef makes Envoy Gateway give each its own cluster (composer/modelservice).
HEADER_ENDPOINT = "x-modelplane-endpoint"
# Crossplane's key for a composed resource (its name in the composite's desired state).
COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"


def replica_host(namespace: str, name: str) -> str:
    """The Host that selects a ModelReplica on its cluster gateway:
    `<name>.<namespace>.replica.modelplane.internal`. A namespace is one label, so
    the name before it is unambiguous; a name too long for a hostname of 253
    characters is shortened with a digest of it (names.unique_label)."""
    host = f"{name}.{namespace}.{REPLICA_HOST_SUFFIX}"
    if len(host) <= 253:
        return host
    return f"{unique_label(name)}.{namespace}.{REPLICA_HOST_SUFFIX}"


# Where every engine the composer runs answers its readiness probe (vLLM and SGLang
# answer there), and so where a front door checks a replica (its ModelEndpoint's
# healthPath, scheduler/endpoints.py).
ENGINE_HEALTH_PATH = "/health"

# A composed pod's name for its ResourceClaim (composer/pods.py), which Kubernetes
# records on the claim it makes from the template.
POD_CLAIM = "devices"

# The node label that pins pods to their pool.
LABEL_POOL = f"{GROUP}/pool"

# Serving pods (a Standalone pod, a gang's leader) carry this label (value: the
# replica) and serve on the port of this name: what routes and a PodMonitor select.
LABEL_SERVING = f"{GROUP}/serving"
SERVING_PORT_NAME = "http"

# Required-resource names the scheduler asks Crossplane for.
REQUIRE_CLUSTERS = "inference-clusters"
REQUIRE_REPLICAS = "model-replicas"
REQUIRE_CLUSTER = "inference-cluster"
REQUIRE_OWNER = "owner-deployment"  # a replica's controller ModelDeployment, by name (trust.py)
REQUIRE_MODEL_CACHE = "model-cache"
REQUIRE_QUOTAS = "inference-quotas"
REQUIRE_NAMESPACES = "namespaces"
# The deployment's or replica's own Namespace, by name: its labels are what an
# InferenceCluster's spec.namespaceSelector admits.
REQUIRE_OWN_NAMESPACE = "own-namespace"
# The platform's Prometheus servers autoscaling may query (scheduler/prometheus.py):
# a cluster-scoped Crossplane EnvironmentConfig of this name.
REQUIRE_PROMETHEUS_SERVERS = "prometheus-servers"
PROMETHEUS_SERVERS = "modelplane-autoscaling"
REQUIRE_QUOTA_CLUSTERS = "quota-clusters"  # every cluster, when a quota applies
REQUIRE_DEPLOYMENTS = "model-deployments"  # every ModelDeployment, under Pack (room.py)
REQUIRE_SERVICES = "model-services"  # a deployment's namespace's ModelServices (drain.py)
REQUIRE_ENDPOINTS = "model-endpoints"  # a ModelService's endpoints of one entry: "model-endpoints/<i>"
REQUIRE_FRONT_DOOR = "front-door"  # the InferenceCluster whose gateway a ModelService uses
REQUIRE_NODES = "nodes"  # the control-plane cluster's Nodes of one pool: "nodes/<pool>"
REQUIRE_SLICES = "resource-slices"         # the control-plane cluster's ResourceSlices, all
REQUIRE_DEVICE_CLASSES = "device-classes"  # and its DeviceClasses, all
REQUIRE_CLAIMS = "resource-claims"         # and its ResourceClaims, every namespace

# Dynamic Resource Allocation's API: ResourceSlices, DeviceClasses, ResourceClaim(Template)s.
DRA_API_VERSION = "resource.k8s.io/v1"
