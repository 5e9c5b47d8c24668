"""Names of the modelplane.ai API that every module shares."""

GROUP = "modelplane.ai"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# The composite kinds (hack/gen_xrds.py names them; one Composition each).
KIND_INFERENCE_CLUSTER = "InferenceCluster"
KIND_MODEL_DEPLOYMENT = "ModelDeployment"
KIND_MODEL_REPLICA = "ModelReplica"
KIND_MODEL_CACHE = "ModelCache"
KIND_INFERENCE_QUOTA = "InferenceQuota"

# Labels the scheduler puts on every ModelReplica; keys under GROUP/ are
# reserved, so users cannot forge them through template metadata.
LABEL_DEPLOYMENT = f"{GROUP}/deployment"
LABEL_CLUSTER = f"{GROUP}/cluster"
LABEL_REPLICA_INDEX = f"{GROUP}/replica-index"
# The ModelCache a ModelReplica mounts: its cache requires the replicas by it.
LABEL_MODEL_CACHE = f"{GROUP}/model-cache"
# The node label that pins pods to their pool.
LABEL_POOL = f"{GROUP}/pool"

# Required-resource names the scheduler asks Crossplane for.
REQUIRE_CLUSTERS = "inference-clusters"
REQUIRE_REPLICAS = "model-replicas"
REQUIRE_CLUSTER = "inference-cluster"
REQUIRE_MODEL_CACHE = "model-cache"
REQUIRE_QUOTAS = "inference-quotas"
REQUIRE_NAMESPACES = "namespaces"
REQUIRE_QUOTA_CLUSTERS = "quota-clusters"  # every cluster, when a quota applies
REQUIRE_NODES = "nodes"  # the control-plane cluster's Nodes of one pool: "nodes/<pool>"
