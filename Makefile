# function-model-serving: the two commands are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test venv tools generate check-generated clean

# Set up and preview an example deployment on the example fleet. By default
# the multinode gang scaled to 4 replicas: the fleet fits 3, so the fourth
# shows its reasons. DEPLOYMENT=... and REPLICAS=... preview others.
REPLICAS ?= $(if $(DEPLOYMENT),,4)
export REPLICAS
demo: venv
	@eval "$$(bash hack/tools.sh --env)" && export CROSSPLANE_CLI CROSSPLANE_CORE && \
	  $(VENV)/bin/function-model-serving preview --fleet examples/fleet \
	    --deployment $${DEPLOYMENT:-examples/deployments/multinode-gang.yaml} \
	    $${REPLICAS:+--replicas $$REPLICAS}

# Set up and run the tests (builds the pinned crossplane CLI once, cached
# outside the repo in ~/.cache/function-model-serving/tools).
test: venv lint
	@eval "$$(bash hack/tools.sh --env)" && export CROSSPLANE_CLI CROSSPLANE_CORE && \
	  $(PY) -m pytest $(PYTEST_ARGS)

# The linter over every Python file and the type checker over function/ (both
# configured in pyproject.toml); part of `make test`.
.PHONY: lint
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The virtualenv is rebuilt only when pyproject.toml changes.
venv: $(VENV)/.stamp
$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,bench]'
	@touch $@

tools:
	bash hack/tools.sh

# Also the binaries of a local Kubernetes + Crossplane control plane (etcd,
# kube-*, kubectl, kwok, LWS, provider-kubernetes, crane, Envoy Gateway) and the
# processes its pods run as (the llm-d inference simulator for engines, the EPP,
# the P/D sidecar), cached the same way.
.PHONY: tools-e2e tools-dataplane
tools-e2e:
	bash hack/tools.sh --e2e --dataplane

tools-dataplane:
	bash hack/tools.sh --dataplane

# Regenerate the XRDs, the pydantic models and docs/reference.md from hack/gen_xrds.py,
# and the serving stack's versions and manifests (function/cluster/stackdata/) from
# hack/tools/*/go.mod and crds/ (hack/gen_stack.py).
generate: venv
	$(PY) hack/gen_xrds.py
	$(PY) hack/gen_models.py
	$(PY) hack/gen_reference.py
	$(PY) hack/gen_stack.py

check-generated: venv
	$(PY) hack/gen_xrds.py --check
	$(PY) hack/gen_models.py --check
	$(PY) hack/gen_reference.py --check
	$(PY) hack/gen_stack.py --check

# Copy the CRDs of every API the functions compose but do not own (Gateway API, the
# Inference Extension, LWS, provider-kubernetes, KEDA, Envoy Gateway, the Prometheus
# Operator) from the Go modules hack/tools/* pin into crds/ (through the module
# proxy); check-vendored fails when a copy is stale or crds/ holds a stray file.
# The unit tests validate against crds/ and `make cluster` installs the same files.
# With them, the charts of the controllers the serving stack installs, rendered by
# helm (built once by hack/tools.sh --helm) into manifests/ (hack/vendor_charts.py);
# `make generate` then turns both into the stack's data.
.PHONY: vendor-crds check-vendored
vendor-crds: venv
	$(PY) hack/vendor_crds.py
	$(PY) hack/vendor_charts.py

check-vendored: venv
	$(PY) hack/vendor_crds.py --check
	$(PY) hack/vendor_charts.py --check

clean:
	rm -rf $(VENV) .pytest_cache

# Drive the gRPC server with concurrent clients for 10 minutes (LOAD_SECONDS);
# fails on any error or when the server's memory grows.
LOAD_SECONDS ?= 600
.PHONY: load
load: venv
	$(PY) -m benchmarks.load --seconds $(LOAD_SECONDS) --clients 16

# The real scheduler's placements against an exact solver's optimum (HiGHS), on a
# seeded corpus of fragmentation traps; the last line is Pack's ratio to optimal.
# QUALITY_ARGS="--seed 23" measures a held-out corpus (--per-trap N: more cases).
.PHONY: placement-quality
placement-quality: venv
	$(PY) -m benchmarks.quality $(QUALITY_ARGS)

# Scheduler and composer against their protobuf floor, fleets S/M/L.
.PHONY: bench
bench: venv
	$(PY) -m benchmarks.bench

# What the data plane adds to a request, on a real local control plane (a
# measurement, not a test; not part of `make test` or `make e2e`): through the
# gateway against straight to the engine pod, on simulated engines with zero
# latency, for Unified, a ModelService front door, EndpointPicker and
# PrefillDecode (latency p50/p99 and requests/s at concurrency 4), and the
# endpoint picker's prefix-affinity rate against random choice. Starts a control
# plane as `make e2e` does and stops it after; E2E_REUSE=1 uses the one `make
# cluster` left running. TRAFFIC_ARGS="--pairs 200 --modes epp" measures less.
.PHONY: bench-traffic
bench-traffic: venv
	$(PY) -m benchmarks.traffic $(TRAFFIC_ARGS)

# Scale on a real local control plane (#36; a measurement, not part of `make test`
# or `make e2e`): starts `make cluster` with a generated fleet (the control plane
# and five remote clusters of 8-GPU kwok nodes), applies D ModelDeployments at once
# (Unified and PrefillDecode, 1-3 replicas, kwok-only pods), then scales each by
# one; prints time to Ready (p50/p95/all), reconciles per composite, and CPU
# seconds and peak RSS per process. Stops itself within 15 minutes and always
# takes the control plane down. LIVE_ARGS="-d 50" for more deployments.
.PHONY: bench-live
bench-live: venv
	$(PY) -m benchmarks.live $(LIVE_ARGS)

# The function's runtime image, built without a Docker daemon (debootstrap +
# pip in a chroot + crane; needs root), cached in ~/.cache/function-model-serving
# and copied to dist/. See hack/build-image.sh.
.PHONY: image
image:
	bash hack/build-image.sh --output dist/function-model-serving-runtime-v$$(sed -n 's/^__version__ = "\(.*\)"$$/\1/p' function/__version__.py).tar

# The Function package (runtime image embedded) and the Configuration package
# into dist/, with the pinned `crossplane xpkg build`. See hack/build-packages.sh.
.PHONY: package
package:
	@eval "$$(bash hack/tools.sh --env)" && export CROSSPLANE_CLI && \
	  bash hack/build-packages.sh dist

# Fuzz RunFunction with 100,000 generated requests (FUZZ_CASES); CI runs 300.
FUZZ_CASES ?= 100000
.PHONY: fuzz
fuzz: venv
	$(PY) hack/fuzz.py $(FUZZ_CASES)

# A real local control plane, loopback only, no Docker: etcd, a kube-apiserver per
# cluster of FLEET (controller-manager, scheduler, kwok fake nodes with DRA
# ResourceSlices, LeaderWorkerSet), Crossplane with the packages installed from a
# local registry, the function and provider-kubernetes as local processes. Left
# running; `make cluster-down` stops every process it recorded. See e2e/controlplane/.
FLEET ?= examples/fleet
.PHONY: cluster cluster-down
cluster: venv
	$(PY) -m e2e.controlplane up --fleet $(FLEET)

cluster-down:
	$(PY) -m e2e.controlplane down

# Stop or start part of one cluster of the control plane `make cluster` left running,
# to try failover (docs/local-control-plane.md#faults-make-fault): PART=gateway its
# Envoy alone, PART=cluster every process of its API server, PART=engine the engines
# of ModelReplica REPLICA (NAMESPACE when the name is in several). Says what it did.
#   make fault CLUSTER=eu-west-1 PART=gateway ACTION=stop
.PHONY: fault
fault:
	$(PY) -m e2e.controlplane fault --cluster "$(CLUSTER)" --part "$(PART)" --action "$(ACTION)" \
	  $(if $(REPLICA),--replica "$(REPLICA)" $(if $(NAMESPACE),--namespace "$(NAMESPACE)"))

# The end-to-end suite against a real local control plane: starts one from
# examples/fleet (as `make cluster` does), runs e2e/tests, stops it. With
# E2E_REUSE=1 it runs against the control plane `make cluster` left running;
# E2E_TESTS=... runs some of the scenarios. The slowest thirty are listed at the end
# (CI's budget is watched from them).
E2E_TESTS ?= e2e/tests
.PHONY: e2e
e2e: venv
	@eval "$$(bash hack/tools.sh --env)" && export CROSSPLANE_CLI CROSSPLANE_CORE && \
	  $(PY) -m pytest -p no:cacheprovider --durations=30 $(E2E_TESTS) $(PYTEST_ARGS)
