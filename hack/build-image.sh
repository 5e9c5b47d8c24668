#!/usr/bin/env bash
# Build the function's runtime image as an image tarball, without a Docker
# daemon, from real parts:
#
#   layer 1  a Debian 12 (bookworm) minbase root filesystem made by debootstrap,
#            with python3 (3.11) and security updates, stripped of apt caches,
#            docs, man pages and locales, plus the non-root user 65532
#   layer 2  /venv: a virtualenv made by that python3, holding this project's
#            wheel and its dependencies (binary wheels only), installed by pip
#            in a chroot from a wheelhouse resolved on the host
#
# assembled by go-containerregistry's crane (built from the Go module proxy)
# against a throwaway registry on loopback, with entrypoint
# `/venv/bin/function-model-serving serve` and user 65532:65532. The result is
# a docker-archive tarball (manifest.json + config + gzipped layers), which is
# what `crossplane xpkg build --embed-runtime-image-tarball` loads.
#
#   hack/build-image.sh                 build what is missing; print the tarball's path
#   hack/build-image.sh --output PATH   also copy the tarball to PATH
#
# Everything expensive is cached under ~/.cache/function-model-serving
# (FMS_CACHE), keyed by its inputs:
#   tools/crane-<hash of hack/tools/crane/*>/crane
#   rootfs/<suite>-<hash of the base recipe>/{rootfs/,base.tar}
#   image/<hash of base, recipe, pyproject.toml, README.md, function/>/runtime.tar
# The image key is the project's sources, not the dependency versions PyPI
# resolves to: set FMS_IMAGE_REBUILD=1 to resolve again.
#
# Needs root (debootstrap, chroot, unshare), go, and network to the Debian
# mirror, PyPI and the Go module proxy on a cache miss. Fails loudly, with the
# log of the failing step, on any error; never falls back to anything.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${FMS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/function-model-serving}
tool_cache=${FMS_TOOL_CACHE:-$cache/tools}

# The base: Debian 12, whose python3 is 3.11 (the Dockerfile uses the same).
suite=bookworm
arch=amd64
variant=minbase
include=python3
py_version=3.11
glibc_minor=36 # bookworm's glibc is 2.36: the newest manylinux tag we accept
mirror=${FMS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${FMS_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# pip runs from its wheel inside the chroot; the venv itself gets no pip.
pip_version=24.3.1
uid=65532
image_path=/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

out_copy=
while [ $# -gt 0 ]; do
  case $1 in
    --output|-o) out_copy=${2:?--output needs a path}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "hack/build-image.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

die() { echo "hack/build-image.sh: $*" >&2; exit 1; }
say() { echo "build-image: $*" >&2; }
# run LOG CMD...: run CMD with its output in LOG; on failure print LOG and stop.
run() {
  local log=$1; shift
  if ! "$@" >>"$log" 2>&1; then
    tail -n 200 "$log" >&2
    die "failed: $* (log above, full log in $log)"
  fi
}

[ "$(id -u)" = 0 ] || die "needs root: debootstrap, chroot and unshare build the image (CI runs as root)"
[ "$(uname -m)" = x86_64 ] || die "builds a linux/amd64 image and needs an x86_64 host to run its chroot"
command -v go >/dev/null || die "go is not on PATH; it is needed to build crane"
for tool in unshare chroot tar sha256sum flock findmnt; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH"
done
python=${PYTHON:-python3}
"$python" -m pip --version >/dev/null 2>&1 || die "$python -m pip does not work; it resolves the wheels"

mkdir -p "$cache" "$tool_cache"
# One build at a time per cache (concurrent `make test` runs share it).
exec 9>"$cache/.build-image.lock"
flock 9

# never_mounted DIR: refuse to delete anything while a mount lives under DIR.
never_mounted() {
  if findmnt -rn -o TARGET | awk -v d="$1" 'index($0, d) == 1 { found = 1 } END { exit !found }'; then
    die "something is still mounted under $1; not touching it"
  fi
}

# Under the lock, a leftover .tmp-* is from a build that failed or was killed:
# its log was printed then; drop it now.
for stale in "$cache"/rootfs/.tmp-* "$cache"/image/.tmp-*; do
  [ -e "$stale" ] || continue
  never_mounted "$stale"
  rm -rf "$stale"
done

# prune DIR N: keep the N most recently built entries of a cache directory.
prune() {
  local dir=$1 keep=$2 old
  [ -d "$dir" ] || return 0
  while IFS= read -r old; do
    never_mounted "$dir/$old"
    rm -rf "${dir:?}/$old"
  done < <(cd "$dir" && ls -1t | tail -n +"$((keep + 1))") # names are hashes
}

# ---------------------------------------------------------------- crane
build_crane() {
  local src=$here/tools/crane key dir
  key=$(cat "$src/go.mod" "$src/go.sum" "$src/tools.go" | sha256sum | cut -c1-12)
  dir=$tool_cache/crane-$key
  if [ ! -x "$dir/crane" ]; then
    mkdir -p "$dir"
    say "building crane into $dir (once)"
    # -mod=mod with go.sum pinning every module; never @latest (the proxy
    # refuses version listing).
    if ! (cd "$src" && GOFLAGS=-mod=mod go build -trimpath -o "$dir/crane.$$" \
          github.com/google/go-containerregistry/cmd/crane) >"$dir/build.log" 2>&1; then
      cat "$dir/build.log" >&2
      die "building crane failed (log above)"
    fi
    mv -f "$dir/crane.$$" "$dir/crane"
  fi
  echo "$dir/crane"
}

# ---------------------------------------------------------------- base
ensure_debootstrap() {
  command -v debootstrap >/dev/null && return
  say "installing debootstrap with apt-get"
  local log
  log=$(mktemp)
  run "$log" apt-get update
  run "$log" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap
  rm -f "$log"
}

# in_root ROOT CMD...: run CMD chrooted in ROOT with /proc mounted, in a
# private mount namespace (nothing leaks to the host, even on failure), with a
# clean environment.
in_root() {
  local root=$1; shift
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --mount --fork -- /bin/sh -ec 'root=$1; shift
    mount -t proc proc "$root/proc"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"' sh "$root" "$@"
}

# make_rootfs DIR LOG: debootstrap, upgrade, add the user, strip.
make_rootfs() {
  local root=$1 log=$2
  run "$log" debootstrap --variant="$variant" --arch="$arch" --include="$include" \
    "$suite" "$root" "$mirror"
  # Security and point-release updates, then forget the package lists.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # The build talks to the configured mirrors; the image keeps the canonical ones.
  local aptopts=(-o "Acquire::Check-Valid-Until=false"
    -o "Dir::Etc::SourceList=/etc/apt/build.list" -o "Dir::Etc::SourceParts=-")
  printf 'deb %s %s %s-updates main\ndeb %s %s-security main\n' \
    "$mirror" "$suite" "$suite" "$security_mirror" "$suite" >"$root/etc/apt/build.list"
  cp -L /etc/resolv.conf "$root/etc/resolv.conf"
  run "$log" in_root "$root" apt-get "${aptopts[@]}" update
  run "$log" in_root "$root" apt-get "${aptopts[@]}" -y --no-install-recommends dist-upgrade
  run "$log" in_root "$root" apt-get clean
  rm -f "$root/etc/apt/build.list"

  run "$log" in_root "$root" groupadd --gid "$uid" nonroot
  run "$log" in_root "$root" useradd --uid "$uid" --gid "$uid" --create-home \
    --home-dir /home/nonroot --shell /usr/sbin/nologin nonroot

  local got
  got=$(in_root "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [ "$got" = "$py_version" ] || die "the $suite rootfs has python $got, expected $py_version"

  # Strip: no apt lists or caches, no docs (copyright files stay), no man or
  # info pages, no translations, no logs, nothing of the build host.
  case $root in "$cache"/*/rootfs) ;; *) die "refusing to strip $root: not a rootfs in $cache" ;; esac
  never_mounted "$root"
  rm -rf "${root:?}"/var/lib/apt/lists/* "${root:?}"/var/cache/apt/* "${root:?}"/var/cache/debconf/*-old \
    "${root:?}"/var/lib/dpkg/*-old "${root:?}"/var/cache/ldconfig/aux-cache "${root:?}"/var/log/* \
    "${root:?}"/usr/share/man/* "${root:?}"/usr/share/info/* "${root:?}"/usr/share/locale/* \
    "${root:?}"/usr/share/lintian "${root:?}"/usr/share/linda "${root:?}"/usr/share/bug \
    "${root:?}"/dev/* "${root:?}"/proc/* "${root:?}"/sys/* "${root:?}"/run/* "${root:?}"/tmp/* "${root:?}"/var/tmp/* \
    "${root:?}"/root/.[!.]* "${root:?}"/etc/resolv.conf "${root:?}"/etc/hostname "${root:?}"/etc/machine-id
  find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  mkdir -p "$root/var/log/apt"
}

# layer_tar DIR OUT [PATH...]: a layer tarball of PATHs (default: all) in DIR,
# names sorted, numeric owners kept; never device files, /proc or /sys contents.
layer_tar() {
  local dir=$1 out=$2; shift 2
  [ $# -gt 0 ] || set -- .
  tar --create --file "$out" --directory "$dir" --sort=name --numeric-owner \
    --format=posix --pax-option=delete=atime,delete=ctime \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' "$@"
}

build_base() {
  local recipe key dir tmp
  # The key: every input of the base, including the code that makes it.
  recipe=$(printf '%s\n' "$suite" "$arch" "$variant" "$include" "$py_version" "$uid"
           declare -f make_rootfs layer_tar in_root)
  key=$(printf '%s' "$recipe" | sha256sum | cut -c1-12)
  dir=$cache/rootfs/$suite-$key
  if [ ! -f "$dir/base.tar" ]; then
    ensure_debootstrap
    mkdir -p "$cache/rootfs"
    tmp=$(mktemp -d "$cache/rootfs/.tmp-$suite-$key.XXXXXX")
    say "debootstrap $suite ($variant + $include) from $mirror into $dir (once, a few minutes)"
    make_rootfs "$tmp/rootfs" "$tmp/build.log"
    layer_tar "$tmp/rootfs" "$tmp/base.tar"
    never_mounted "$tmp"
    rm -rf "$dir"
    mv "$tmp" "$dir"
    prune "$cache/rootfs" 2
  fi
  touch "$dir"
  echo "$dir"
}

# ---------------------------------------------------------------- app
# The wheel tags the rootfs's python accepts: cp311 on manylinux up to glibc 2.36.
platform_args() {
  local m
  for m in $(seq "$glibc_minor" -1 5); do
    printf -- '--platform\nmanylinux_2_%s_x86_64\n' "$m"
  done
  printf -- '--platform\n%s\n' manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64
}

# make_wheelhouse DIR LOG: this project's wheel, built on the host, plus every
# dependency as a binary wheel for the image's python, and pip itself.
make_wheelhouse() {
  local wh=$1 log=$2 plats
  mkdir -p "$wh/wheels" "$wh/pip"
  run "$log" "$python" -m pip wheel --no-deps --wheel-dir "$wh/wheels" "$repo"
  mapfile -t plats < <(platform_args)
  run "$log" "$python" -m pip download --dest "$wh/wheels" \
    --only-binary=:all: --implementation cp --python-version "$py_version" "${plats[@]}" \
    "$wh"/wheels/function_model_serving-*.whl
  run "$log" "$python" -m pip download --dest "$wh/pip" --no-deps \
    --only-binary=:all: "pip==$pip_version"
}

# make_venv ROOT WHEELHOUSE LOG: /venv in a copy of the base rootfs.
make_venv() {
  local root=$1 wh=$2 log=$3 version
  version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/function/__version__.py")
  mkdir -p "$root/tmp/wheelhouse"
  cp -r "$wh/." "$root/tmp/wheelhouse/"
  run "$log" in_root "$root" python3 -m venv --without-pip /venv
  run "$log" in_root "$root" /venv/bin/python /tmp/wheelhouse/pip/pip-"$pip_version"-py3-none-any.whl/pip \
    install --no-index --find-links /tmp/wheelhouse/wheels --only-binary=:all: --no-cache-dir \
    --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
    "function-model-serving==$version"
  run "$log" in_root "$root" /venv/bin/python /tmp/wheelhouse/pip/pip-"$pip_version"-py3-none-any.whl/pip \
    check --disable-pip-version-check
  run "$log" in_root "$root" /venv/bin/function-model-serving serve --help
  run "$log" in_root "$root" /venv/bin/python -c 'import function.runtime.fn, grpc, cel_expr_python'
  # The selector evaluation worker the server starts (contract/devicecel/sandbox.py)
  # starts here too: it says it is ready, and ends with its standard input.
  run "$log" in_root "$root" /venv/bin/python -m function.contract.devicecel.worker </dev/null
  rm -f "$root"/venv/bin/Activate.ps1 "$root"/venv/bin/activate.csh "$root"/venv/bin/activate.fish
  never_mounted "$root"
  rm -rf "$root/tmp/wheelhouse"
}

# start_registry DIR: crane's registry on a free loopback port; sets
# registry_pid and reg (host:port).
start_registry() {
  local dir=$1 port
  mkdir -p "$dir/blobs"
  "$crane" registry serve --address 127.0.0.1:0 --disk "$dir/blobs" >"$dir/registry.log" 2>&1 &
  registry_pid=$!
  for _ in $(seq 100); do
    port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$dir/registry.log")
    if [ -n "$port" ]; then reg=127.0.0.1:$port; return; fi
    kill -0 "$registry_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/registry.log" >&2
  die "crane registry serve did not start"
}

build_image() {
  local base=$1 version key dir tmp reg ref log
  version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo/function/__version__.py")
  [ -n "$version" ] || die "no __version__ in function/__version__.py"
  key=$( { echo "$base"; echo "$crane"; declare -f make_wheelhouse make_venv build_image platform_args
           echo "$pip_version $py_version $image_path"
           cd "$repo" && find pyproject.toml README.md function -type f \
             ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum
         } | sha256sum | cut -c1-12)
  dir=$cache/image/$key
  if [ -f "$dir/runtime.tar" ] && [ -z "${FMS_IMAGE_REBUILD:-}" ]; then
    touch "$dir" # pruning keeps the most recently used
    echo "$dir/runtime.tar"
    return
  fi
  mkdir -p "$cache/image"
  tmp=$(mktemp -d "$cache/image/.tmp-$key.XXXXXX")
  log=$tmp/build.log
  say "resolving wheels for python $py_version from PyPI"
  make_wheelhouse "$tmp/wheelhouse" "$log"
  say "installing the wheels into /venv in a chroot of $base/rootfs"
  cp -a "$base/rootfs" "$tmp/rootfs"
  make_venv "$tmp/rootfs" "$tmp/wheelhouse" "$log"
  layer_tar "$tmp/rootfs" "$tmp/venv.tar" ./venv
  (cd "$tmp/wheelhouse/wheels" && ls) >"$tmp/wheels.txt"

  say "assembling the image with crane"
  mkdir -p "$tmp/registry"
  registry_pid=
  trap '[ -n "${registry_pid:-}" ] && kill "$registry_pid" 2>/dev/null; true' EXIT
  start_registry "$tmp/registry"
  ref=function-model-serving-runtime:v$version
  run "$log" "$crane" append --oci-empty-base -f "$base/base.tar" -t "$reg/fms/base:build"
  run "$log" "$crane" mutate "$reg/fms/base:build" --append "$tmp/venv.tar" \
    --set-platform linux/amd64 \
    --entrypoint /venv/bin/function-model-serving,serve \
    --user "$uid:$uid" --workdir /home/nonroot --exposed-ports 9443/tcp \
    --env "PATH=$image_path" --env LANG=C.UTF-8 \
    --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
    --label org.opencontainers.image.title=function-model-serving \
    --label "org.opencontainers.image.version=v$version" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    --label org.opencontainers.image.source=https://github.com/modelplane-ai/function-model-serving \
    --label "org.opencontainers.image.base.name=debian:$suite ($variant, debootstrap)" \
    -t "$ref" -o "$tmp/runtime.tar"
  kill "$registry_pid" 2>/dev/null || true
  wait "$registry_pid" 2>/dev/null || true
  registry_pid=
  trap - EXIT

  never_mounted "$tmp"
  rm -rf "$tmp/rootfs" "$tmp/registry" "$tmp/wheelhouse" "$tmp/venv.tar"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  prune "$cache/image" 3
  say "image $ref: $(du -h "$dir/runtime.tar" | cut -f1) compressed, in $dir/runtime.tar"
  echo "$dir/runtime.tar"
}

crane=$(build_crane)
base=$(build_base)
image=$(build_image "$base")
if [ -n "$out_copy" ]; then
  mkdir -p "$(dirname "$out_copy")"
  cp -f "$image" "$out_copy"
fi
echo "$image"
