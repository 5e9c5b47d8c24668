#!/usr/bin/env bash
# patch.sh OUTDIR [MODULE_DIR]: copy the Envoy Gateway module that go.mod pins (from
# the module cache, downloaded if missing and checked against go.sum; MODULE_DIR
# instead, for tests) to OUTDIR/gateway, rewrite six of its files there, write
# OUTDIR/go.mod and go.sum (this folder's, plus a replace directive naming the copy)
# and print the go build flag that uses them (-modfile=...). hack/tools.sh runs it
# when building this tool.
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
# and, for the Envoy it starts under Host infrastructure (one controller and one
# Envoy per cluster on one machine, each cluster on a loopback address of its own):
#   internal/utils/net/ip.go            Envoy's listeners and its readiness listener
#                                       (:19003) bind $EG_PROXY_ADDRESS (upstream
#                                       0.0.0.0, a constant)
#   internal/xds/bootstrap/bootstrap.go its admin interface binds $EG_PROXY_ADDRESS
#                                       too (upstream 127.0.0.1, a constant)
#   internal/infrastructure/host/proxy_infra.go
#                                       it dials xDS at 127.0.0.1:$EG_XDS_PORT, where
#                                       the patched server listens (upstream
#                                       0.0.0.0:18000, a literal)
#   internal/wasm/httpserver.go         the Wasm cache server listens on
#                                       $EG_WASM_ADDRESS (upstream :18002 on every
#                                       interface, which a second controller cannot bind)
# Unset, each variable keeps upstream's value.
# Every edit replaces one whole line that must occur exactly once: if upstream changes
# it, this fails loudly instead of building a binary that listens on every interface.
# The copy, the line edits and the go.mod that names the copy: ../patchlib.sh.
set -euo pipefail
cd "$(dirname "$0")"
source ../patchlib.sh
patch_module "${1:?usage: patch.sh OUTDIR [MODULE_DIR]}" github.com/envoyproxy/gateway gateway "${2:-}"

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

ip=$(file internal/utils/net/ip.go)
edit "$ip" 'package net' $'package net\n\nimport "os"'
edit "$ip" 'IPv4ListenerAddress = "0.0.0.0"' \
  '// IPv4ListenerAddress: a variable, at the end of this file (patch.sh)'
cat >>"$ip" <<'EOF'

// Added by function-model-serving's hack/tools/envoy-gateway/patch.sh: the address
// every Envoy listener and the readiness listener bind, $EG_PROXY_ADDRESS (upstream:
// 0.0.0.0), so each cluster's Envoy on one machine has a loopback address of its own.
var IPv4ListenerAddress = ProxyAddress("0.0.0.0")

// ProxyAddress is $EG_PROXY_ADDRESS, or def when it is unset (patch.sh).
func ProxyAddress(def string) string {
	if a := os.Getenv("EG_PROXY_ADDRESS"); a != "" {
		return a
	}
	return def
}
EOF

boot=$(file internal/xds/bootstrap/bootstrap.go)
edit "$boot" 'EnvoyAdminAddress   = "127.0.0.1"' \
  '// EnvoyAdminAddress: a variable, at the end of this file (patch.sh)'
cat >>"$boot" <<'EOF'

// Added by function-model-serving's hack/tools/envoy-gateway/patch.sh: Envoy's admin
// interface binds $EG_PROXY_ADDRESS too (upstream: 127.0.0.1).
var EnvoyAdminAddress = netutils.ProxyAddress("127.0.0.1")
EOF

host=$(file internal/infrastructure/host/proxy_infra.go)
edit "$host" '"path/filepath"' $'"os"\n"path/filepath"'
edit "$host" '"strings"' $'"strconv"\n"strings"'
edit "$host" 'XdsServerHost:   new("0.0.0.0"),' \
  $'XdsServerHost:   new("127.0.0.1"),         // patch.sh: where the patched xDS server listens\nXdsServerPort:   new(hostXdsServerPort()), // patch.sh: $EG_XDS_PORT'
cat >>"$host" <<'EOF'

// Added by function-model-serving's hack/tools/envoy-gateway/patch.sh: the Envoy this
// controller starts dials its xDS server at $EG_XDS_PORT (upstream: 18000), the port
// the patched server listens on.
func hostXdsServerPort() int32 {
	if p, err := strconv.Atoi(os.Getenv("EG_XDS_PORT")); err == nil && p > 0 && p < 65536 {
		return int32(p)
	}
	return bootstrap.DefaultXdsServerPort
}
EOF

wasm=$(file internal/wasm/httpserver.go)
edit "$wasm" '"net/http"' $'"net/http"\n"os"'
edit "$wasm" 'Addr:              fmt.Sprintf(":%d", serverPort),' \
  'Addr:              wasmServerAddress(), // patch.sh: $EG_WASM_ADDRESS'
cat >>"$wasm" <<'EOF'

// Added by function-model-serving's hack/tools/envoy-gateway/patch.sh: the Wasm cache
// server listens on $EG_WASM_ADDRESS (upstream: :18002 on every interface, which a
// second controller on the same machine cannot bind).
func wasmServerAddress() string {
	if a := os.Getenv("EG_WASM_ADDRESS"); a != "" {
		return a
	}
	return fmt.Sprintf(":%d", serverPort)
}
EOF

patch_done
