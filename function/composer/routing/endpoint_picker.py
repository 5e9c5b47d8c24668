"""Router EndpointPicker for Unified: an InferencePool and endpoint picker over every serving pod.

llm-d's aggregated serving ("intelligent inference scheduling"): instead of
a Service spreading requests blindly, the gateway asks the endpoint picker
which serving pod takes each request. The picker runs one scheduling profile
(`single-profile-handler`, no prefill/decode decider) that scores every pod
on prefix-cache affinity (a prompt goes where its prefix is likely cached)
and load (queue depth, KV-cache utilization) and picks the best. That pays
off when a replica has several serving pods (`copies`, several engines)
and requests share prefixes (system prompts, conversations).

The pods are left as the backends composed them: the InferencePool targets
the serving port (8000) that Standalone pods and gang leaders already
expose, so no sidecar and no flag is needed, and the engines serve exactly
as under router Service. The routing objects are `epp.objects` (see there);
a malformed MODELPLANE_* setting composes no routing and says so in
`Routed`, the workloads are still composed.

The prefix scorer's `blockSizeTokens` is the serving engines' KV block size
(`--block-size`, vLLM; `--page-size`, SGLang; default 16); when engines
differ, the first engine's, with a warning.
"""

from __future__ import annotations

from typing import Any

from function.composer.composed import Backends
from function.composer.model import Replica
from function.composer.routing import Routing, epp
from function.composer.routing.gateway import endpoint
from function.composer.status import NotRouted
from function.contract.enums import Router
from function.contract.records import Cluster

WHO = Router.ENDPOINT_PICKER


class EndpointPickerRouting:
    def route(self, replica: Replica, cluster: Cluster, backends: Backends) -> Routing:
        config = epp.settings(WHO)
        if isinstance(config, NotRouted):
            return Routing(not_routed=config)
        sizes = epp.block_sizes(backends.serving_pods, backends.notes, WHO)
        first = next(iter(sizes.values()))
        if len(set(sizes.values())) > 1:
            backends.notes.append(
                f"{WHO}: the engines use different KV block sizes ("
                + ", ".join(f"{name!r} {size}" for name, size in sizes.items())
                + f"); the endpoint picker's prefix cache assumes {first}, the first "
                f"engine's: set the same --block-size (--page-size) on every engine")
        return Routing(objects=epp.objects(replica, cluster, config, picker_config(first)),
                       endpoint=endpoint(cluster, replica))


def picker_config(block_size_tokens: int) -> dict[str, Any]:
    """One profile over every serving pod: prefix-cache affinity and load, then the best."""
    return epp.picker_config([{"type": "single-profile-handler"},
                              *epp.scoring_plugins(block_size_tokens)],
                             [epp.profile("default")])


LAYER = EndpointPickerRouting()
