#!/usr/bin/env bash
# Build the pinned crossplane binaries from the Go module proxy into a cache
# outside the repo, reusing them when present. Prints nothing but errors on a
# cache hit; fails loudly (non-zero, with the build log) on any error.
#
#   hack/tools.sh            build what is missing, print the two paths
#   hack/tools.sh --env      print CROSSPLANE_CLI=... and CROSSPLANE_CORE=... lines
#
# The versions live in hack/tools/*/go.mod (with go.sum), so a build is
# reproducible and the cache key is the hash of those files.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
cache=${FMS_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/function-model-serving/tools}
mkdir -p "$cache"

command -v go >/dev/null || { echo "hack/tools.sh: go is not on PATH; it is needed to build the crossplane CLI" >&2; exit 1; }

# build NAME PACKAGE: build hack/tools/NAME into $cache/NAME-<hash>/crossplane.
build() {
  local name=$1 pkg=$2 src="$here/tools/$1" key dir log
  key=$(cat "$src/go.mod" "$src/go.sum" "$src/tools.go" | sha256sum | cut -c1-12)
  dir="$cache/$name-$key"
  if [ ! -x "$dir/crossplane" ]; then
    mkdir -p "$dir"
    log="$dir/build.log"
    echo "building $name ($pkg) into $dir; this takes several minutes once" >&2
    # -mod=mod: go.sum pins every module; the proxy refuses version listing,
    # so never ask it for @latest.
    # A per-process temp name: two concurrent builds must not trip each other.
    if ! (cd "$src" && GOFLAGS=-mod=mod go build -trimpath -o "$dir/crossplane.$$" "$pkg") >"$log" 2>&1; then
      cat "$log" >&2
      echo "hack/tools.sh: building $name failed (log above)" >&2
      exit 1
    fi
    mv -f "$dir/crossplane.$$" "$dir/crossplane"
  fi
  echo "$dir/crossplane"
}

cli=$(build crossplane-cli github.com/crossplane/cli/v2/cmd/crossplane)
core=$(build crossplane-core github.com/crossplane/crossplane/v2/cmd/crossplane)

if [ "${1:-}" = "--env" ]; then
  echo "CROSSPLANE_CLI=$cli"
  echo "CROSSPLANE_CORE=$core"
else
  echo "$cli"
  echo "$core"
fi
