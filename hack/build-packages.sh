#!/usr/bin/env bash
# Build the two Crossplane packages with the pinned crossplane CLI:
#
#   OUT/function-model-serving-vX.Y.Z.xpkg        package/crossplane.yaml (a Function)
#       with the runtime image from hack/build-image.sh embedded
#       (`xpkg build --embed-runtime-image-tarball`)
#   OUT/configuration-model-serving-vX.Y.Z.xpkg   crossplane.yaml (a Configuration)
#       with every XRD and Composition in apis/, and examples/deployments and
#       examples/fleet as the package's examples
#
#   hack/build-packages.sh [OUT]     OUT defaults to dist/; prints the two paths
#
# `xpkg build` reads every *.yaml/*.yml under --package-root (its --ignore
# takes file globs only, never directories), so neither package is built from
# the repository root: .venv/, tests/ and examples/ hold YAML that is not
# package content, and package/crossplane.yaml is a second package meta. Each
# package is built from a staging directory holding exactly its files.
#
# Uses CROSSPLANE_CLI when set, else builds it with hack/tools.sh. Fails
# loudly on any error.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out=${1:-$repo/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)

die() { echo "hack/build-packages.sh: $*" >&2; exit 1; }

if [ -z "${CROSSPLANE_CLI:-}" ]; then
  env_lines=$(bash "$here/tools.sh" --env) || die "hack/tools.sh failed"
  CROSSPLANE_CLI=$(sed -n 's/^CROSSPLANE_CLI=//p' <<<"$env_lines")
fi
[ -x "$CROSSPLANE_CLI" ] || die "$CROSSPLANE_CLI is not an executable crossplane CLI"

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/function/__version__.py")
[ -n "$version" ] || die "no __version__ in function/__version__.py"

image=$(bash "$here/build-image.sh") || die "hack/build-image.sh failed"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# xpkg LOG ARGS...: run `crossplane xpkg build`; print its log on failure.
xpkg() {
  local log=$1; shift
  if ! "$CROSSPLANE_CLI" xpkg build "$@" >"$log" 2>&1; then
    cat "$log" >&2
    die "crossplane xpkg build $* failed (log above)"
  fi
}

# The Function: package/ holds its meta (and, should the function ever take an
# input type, that CRD); no examples of its own.
mkdir -p "$stage/function"
cp -r "$repo/package/." "$stage/function/"
fn_pkg=$out/function-model-serving-v$version.xpkg
xpkg "$stage/function.log" --package-root "$stage/function" \
  --examples-root "$stage/function-examples" \
  --embed-runtime-image-tarball "$image" -o "$fn_pkg"

# The Configuration: the meta and apis/ (XRDs and Compositions); examples are
# the deployments and the fleet a user applies (not examples/functions.yaml,
# which is for `crossplane composition render` only, nor examples/replicas,
# which the scheduler makes).
mkdir -p "$stage/configuration" "$stage/configuration-examples"
cp "$repo/crossplane.yaml" "$stage/configuration/"
cp -r "$repo/apis" "$stage/configuration/apis"
cp -r "$repo/examples/deployments" "$repo/examples/fleet" "$stage/configuration-examples/"
cfg_pkg=$out/configuration-model-serving-v$version.xpkg
xpkg "$stage/configuration.log" --package-root "$stage/configuration" \
  --examples-root "$stage/configuration-examples" -o "$cfg_pkg"

echo "$fn_pkg"
echo "$cfg_pkg"
