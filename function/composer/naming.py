"""Names, labels and composed-resource keys of everything a replica composes.

Object names are `<replica>[-<engine>[-<role>]]-<digest>-<tag>` (see
`function.contract.names.tagged_label`): readable first, then a digest of the
namespace, replica, parts and tag, then a tag for the kind. The same name
serves on the control plane and on a remote cluster, where every replica's
objects land in a namespace named like the replica's own, so:

* two replicas never share a name, in one namespace or across namespaces
  (the digest covers the namespace: two same-named deployments in two
  namespaces get disjoint names even if a cluster ever hosts both in one
  namespace);
* a LeaderWorkerSet never takes a Service's name: LWS creates a headless
  Service named after itself and skips creating it when one exists, which
  would leave the gang without DNS for its leader and deadlock it. The tags
  differ (`lws` vs `svc`) and sit at the end, so the names cannot be equal;
* every name is a DNS-1035 label of at most 63 characters; LeaderWorkerSet
  names are kept to 45 so the StatefulSets, pods and labels LWS derives from
  them (`<lws>-<group>-<worker>`, `<sts>-<revision hash>`) stay within 63.

Composed-resource keys name what a resource is for, with the kind in the key
for workloads: an engine turning from Standalone into a gang drops the
Deployment's key and adds the LeaderWorkerSet's, so Crossplane deletes the
one and creates the other instead of trying to turn one kind into another.
"""

from __future__ import annotations

from function.composer.model import Engine, Member, Replica
from function.composer.placement import Owner
from function.contract.api import GROUP, LABEL_DEPLOYMENT, LABEL_REPLICA
from function.contract.names import MAX, dns_label, tagged_label

# Pod and object labels. Values are DNS labels of at most 63 characters.
# LABEL_REPLICA (contract/api.py) is on every object and pod of a replica.
LABEL_ENGINE = f"{GROUP}/engine"        # pods of one engine
LABEL_ROLE = f"{GROUP}/role"            # Standalone, Leader or Worker
LABEL_WORKLOAD = f"{GROUP}/workload"    # pods of one Deployment/LWS: its selector

MAX_LWS_NAME = 45


SERVICE_TAG = "svc"


def replica_label(replica: Replica) -> str:
    """The replica as a label value (ModelReplica names may be up to 253 characters)."""
    return dns_label(replica.name)


def object_labels(replica: Replica) -> dict[str, str]:
    labels = {LABEL_REPLICA: replica_label(replica)}
    if replica.deployment:
        labels[LABEL_DEPLOYMENT] = dns_label(replica.deployment)
    return dict(sorted(labels.items()))


def object_name(replica: Replica, *parts: str, tag: str, max_length: int = MAX) -> str:
    """`<replica>[-<parts>]-<digest>-<tag>`; routing layers name their own objects with it,
    each with a tag no other object uses."""
    return object_name_of(replica.namespace, replica.name, *parts, tag=tag,
                          max_length=max_length)


def object_name_of(namespace: str, name: str, *parts: str, tag: str, max_length: int = MAX) -> str:
    """object_name from the replica's namespace and name alone (what another composite,
    a ModelService's slice, knows of it)."""
    return tagged_label(name, *parts, tag=tag, max_length=max_length,
                        identity=(namespace, name, *parts, tag))


def deployment_name(replica: Replica, engine: Engine) -> str:
    return object_name(replica, engine.name, tag="deploy")


def leaderworkerset_name(replica: Replica, engine: Engine) -> str:
    return object_name(replica, engine.name, tag="lws", max_length=MAX_LWS_NAME)


def claim_template_name(replica: Replica, engine: Engine, member: Member,
                        digest: str = "") -> str:
    """A member's template; `digest` that of its requests where they changed (claims.py)."""
    return object_name(replica, engine.name, member.role.lower(), *([digest] if digest else []),
                       tag="claims")


def service_name(replica: Replica, purpose: str = "") -> str:
    return object_name(replica, *([purpose] if purpose else []), tag=SERVICE_TAG)


def service_name_of(namespace: str, name: str) -> str:
    """A replica's serving Service, from its namespace and name."""
    return object_name_of(namespace, name, tag=SERVICE_TAG)


def route_name(replica: Replica) -> str:
    return object_name(replica, tag="route")


def fleet_route_name(replica: Replica) -> str:
    return object_name(replica, tag="fleet")


def namespace_object_name(replica: Replica) -> str:
    return object_name(replica, tag="ns")


def owner(replica: Replica) -> Owner:
    """The replica as the owner of the Objects placement wraps its objects in."""
    return Owner(replica.namespace, object_labels(replica), namespace_object_name(replica))


def workload_key(engine: Engine) -> str:
    return f"{engine.name}-{'leaderworkerset' if engine.is_gang else 'deployment'}"


def claim_template_key(engine: Engine, member: Member) -> str:
    return f"{engine.name}-{member.role.lower()}-claims"
