#!/usr/bin/env bash
# Build a small Go program of ours, tools/NAME, into a cache directory:
#   hack/build-go-tool.sh dracel     the Kubernetes DRA CEL reference evaluator
#   hack/build-go-tool.sh crdcheck   the API server's CRD validation of our XRDs
#
# Rebuilds only when the binary is missing or a source file of tools/NAME
# changed: the sha256 of go.mod, go.sum and *.go is stored next to the binary.
# Prints the binary's path on stdout; everything else goes to stderr.
# Any failure exits non-zero (the differential test then fails, never skips).
#
#   CACHE   output directory (else $FMS_TOOL_CACHE, as hack/tools.sh;
#           default ${XDG_CACHE_HOME:-$HOME/.cache}/function-model-serving/tools)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: hack/build-go-tool.sh NAME (a folder under tools/)}"
src="$root/tools/$name"
[[ -d "$src" ]] || { echo "build-go-tool: no such tool: $src" >&2; exit 1; }
cache="${CACHE:-${FMS_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/function-model-serving/tools}}"
bin="$cache/$name"
stamp="$cache/$name.sha256"

command -v go >/dev/null || { echo "build-go-tool: 'go' is not on PATH" >&2; exit 1; }

# No debug information, and the flags of hack/tools.sh, so packages shared with its
# builds (Envoy Gateway's, for the InferencePool extension) compile once.
build_flags=(-trimpath -gcflags=all=-dwarf=false "-ldflags=-s -w")

# Hash the sources (and the Go version and build flags, which change the binary too).
hash="$(
  cd "$src"
  { go env GOVERSION; echo "${build_flags[*]}"; find . -maxdepth 1 -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) \
      | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -d' ' -f1
)"

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$hash" ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$cache"
echo "build-go-tool: building $bin (the first build downloads its modules, a few minutes)" >&2
rm -f "$stamp"
# -mod=readonly: go.mod/go.sum are committed and must already be complete.
(cd "$src" && go build -mod=readonly "${build_flags[@]}" -o "$bin.tmp" .) >&2 || {
  echo "build-go-tool: go build failed in $src" >&2
  exit 1
}
mv -f "$bin.tmp" "$bin"
echo "$hash" >"$stamp"
echo "$bin"
