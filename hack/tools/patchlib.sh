# Sourced by hack/tools/TOOL/patch.sh from its own folder (its go.mod and go.sum are
# read from the working directory): what every build-time patch of a pinned module
# does. hack/tools.sh hashes this file into the cache key of every tool with a patch.sh.
#
#   patch_module OUT MODULE COPY [MODULE_DIR]
#       copy MODULE at the version ./go.mod pins (from the module cache, downloaded if
#       missing and checked against go.sum; MODULE_DIR instead, for tests) to OUT/COPY;
#       sets $out (absolute), $mod, $copy
#   file REL        the copy's REL (fails if upstream has no such file)
#   edit FILE OLD NEW
#       replace the one line of FILE that is OLD (compared without its indentation) by
#       NEW (which may hold several lines, each indented as OLD was). The line must occur
#       exactly once: if upstream changes it, the build fails loudly instead of building
#       a binary without the patch.
#   patch_done      write OUT/go.mod (./go.mod plus a replace naming the copy) and go.sum,
#                   and print the go build flag that uses them (-modfile=...)
#
# (`go build -overlay` would be lighter, but the go command refuses to overlay files in
# the module cache.)
set -euo pipefail

patch_name="hack/tools/$(basename "$PWD")/patch.sh"
here=$PWD

die() { echo "$patch_name: $*" >&2; exit 1; }

patch_module() {
  out=$1 mod=$2
  local name=$3 src=${4:-}
  if [ -z "$src" ]; then
    # Download first: on a cold module cache `go list -m` fetches only the module's
    # go.mod and prints no directory. A bare path means the version go.mod requires,
    # checked against go.sum.
    GOFLAGS=-mod=mod go mod download "$mod" || die "go mod download $mod failed"
    src=$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "$mod") || die "go list -m $mod failed"
  fi
  [ -d "$src" ] || die "no module directory for $mod: '$src'"
  [ ! -e "$out" ] || die "$out exists"
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  copy=$out/$name
  cp -R "$src" "$copy"
  chmod -R u+w "$copy"
}

file() {
  [ -f "$copy/$1" ] || die "no $1 in $mod"
  echo "$copy/$1"
}

edit() {
  local file=$1 n
  n=$(OLD="$2" awk '{ l = $0; sub(/^[ \t]+/, "", l) } l == ENVIRON["OLD"] { n++ } END { print n + 0 }' "$file")
  [ "$n" = 1 ] || die "expected exactly one line '$2' in $mod/${file#"$copy"/}, found $n"
  OLD="$2" NEW="$3" awk '{ l = $0; sub(/^[ \t]+/, "", l) }
    l == ENVIRON["OLD"] {
      indent = substr($0, 1, length($0) - length(l))
      k = split(ENVIRON["NEW"], lines, "\n")
      for (i = 1; i <= k; i++) print indent lines[i]
      next
    }
    { print }' "$file" >"$file.new"
  mv "$file.new" "$file"
}

patch_done() {
  cp "$here/go.sum" "$out/go.sum"
  { cat "$here/go.mod"; echo; echo "replace $mod => $copy"; } >"$out/go.mod"
  echo "-modfile=$out/go.mod"
}
