#!/usr/bin/env bash
# patch.sh OUTDIR [MODULE_DIR]: copy the Envoy Gateway module that go.mod pins (from
# the module cache, downloaded if missing and checked against go.sum; MODULE_DIR
# instead, for tests) to OUTDIR/gateway, rewrite two of its files there, write
# OUTDIR/go.mod and go.sum (this folder's, plus a replace directive naming the copy)
# and print the go build flag that uses them (-modfile=...). hack/tools.sh runs it
# when building this tool.
# (`go build -overlay` would be lighter, but the go command refuses to overlay files
# in the module cache.)
#
# What main.go cannot reach through a variable, because upstream wrote a constant or
# a struct literal:
#   internal/xds/runner/runner.go       the xDS server listens on 127.0.0.1 (upstream
#                                       0.0.0.0), reads its certificates from
#                                       $EG_XDS_CERT_DIR (upstream /certs) and its port
#                                       from $EG_XDS_PORT (upstream 18000)
#   internal/provider/kubernetes/kubernetes.go
#                                       the topology-injector webhook listens on
#                                       127.0.0.1 (upstream every interface)
# Every edit replaces one whole line (compared without its indentation) that must
# occur exactly once: if upstream changes it, this fails loudly instead of building
# a binary that listens on every interface.
set -euo pipefail

die() { echo "hack/tools/envoy-gateway/patch.sh: $*" >&2; exit 1; }

out=${1:?usage: patch.sh OUTDIR [MODULE_DIR]}
cd "$(dirname "$0")"
mod=github.com/envoyproxy/gateway
here=$PWD
if [ -n "${2:-}" ]; then
  src=$2
else
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
cp -R "$src" "$out/gateway"
chmod -R u+w "$out/gateway"

# edit FILE OLD NEW: replace the one line of FILE that is OLD (indentation aside)
# by NEW (which may hold several lines, each indented as OLD was).
edit() {
  local file=$1 n
  n=$(OLD="$2" awk '{ l = $0; sub(/^[ \t]+/, "", l) } l == ENVIRON["OLD"] { n++ } END { print n + 0 }' "$file")
  [ "$n" = 1 ] || die "expected exactly one line '$2' in $mod/${file#"$out"/gateway/}, found $n"
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

# file REL: the copy's REL.
file() {
  [ -f "$out/gateway/$1" ] || die "no $1 in $mod"
  echo "$out/gateway/$1"
}

xds=$(file internal/xds/runner/runner.go)
edit "$xds" '"path/filepath"' $'"os"\n"path/filepath"'
edit "$xds" 'XdsServerAddress = "0.0.0.0"' 'XdsServerAddress = "127.0.0.1" // hack/tools/envoy-gateway/patch.sh'
for f in Cert:tls.crt Key:tls.key Ca:ca.crt; do
  edit "$xds" "xdsTLS${f%%:*}Filepath = \"/certs/${f#*:}\"" \
    "// xdsTLS${f%%:*}Filepath: a variable, at the end of this file (patch.sh)"
done
edit "$xds" 'addr := net.JoinHostPort(XdsServerAddress, strconv.Itoa(bootstrap.DefaultXdsServerPort))' \
  'addr := net.JoinHostPort(XdsServerAddress, xdsServerPort()) // patch.sh'
cat >>"$xds" <<'EOF'

// Added by function-model-serving's hack/tools/envoy-gateway/patch.sh: the xDS
// server's certificates come from $EG_XDS_CERT_DIR (upstream: /certs), its port from
// $EG_XDS_PORT (upstream: 18000).
var (
	xdsTLSCertFilepath = filepath.Join(xdsCertDir(), "tls.crt")
	xdsTLSKeyFilepath  = filepath.Join(xdsCertDir(), "tls.key")
	xdsTLSCaFilepath   = filepath.Join(xdsCertDir(), "ca.crt")
)

func xdsCertDir() string {
	if d := os.Getenv("EG_XDS_CERT_DIR"); d != "" {
		return d
	}
	return "/certs"
}

func xdsServerPort() string {
	if p := os.Getenv("EG_XDS_PORT"); p != "" {
		return p
	}
	return strconv.Itoa(bootstrap.DefaultXdsServerPort)
}
EOF

k8s=$(file internal/provider/kubernetes/kubernetes.go)
edit "$k8s" 'Port:     webhookTLSPort,' $'Port:     webhookTLSPort,\nHost:     "127.0.0.1", // hack/tools/envoy-gateway/patch.sh'

cp "$here/go.sum" "$out/go.sum"
{ cat "$here/go.mod"; echo; echo "replace $mod => $out/gateway"; } >"$out/go.mod"
echo "-modfile=$out/go.mod"
