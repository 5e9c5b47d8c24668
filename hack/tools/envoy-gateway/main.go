// Command envoy-gateway is upstream's Envoy Gateway controller (cmd/envoy-gateway),
// built from the Go module proxy at the version go.mod pins (hack/tools.sh --e2e),
// with every listener the EnvoyGateway config file cannot place moved to loopback
// or turned off, so the local control plane can run it as a process:
//
//   - controller-runtime's metrics server: EG passes no options, so it would bind
//     ":8080" (taken by provider-kubernetes); "0" turns it off. EG_CR_METRICS_ADDR.
//   - controller-runtime's health probe: hard-coded ":8081" in
//     internal/provider/kubernetes; 127.0.0.1:18081 by default. EG_HEALTH_PROBE_ADDR.
//   - the topology-injector webhook's port and certificate directory (hard-coded
//     9443 and /certs): EG_WEBHOOK_PORT, EG_WEBHOOK_CERT_DIR.
//
// What a variable cannot reach (the xDS server's address and certificate paths are
// constants, the webhook's host a struct literal) overlay.sh rewrites at build time.
package main

import (
	"fmt"
	"os"
	"strconv"
	_ "unsafe" // for go:linkname

	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/envoyproxy/gateway/cmd/envoy-gateway/root"
)

// Upstream: "Exposed to allow disabling health probe listener in tests."
//
//go:linkname healthProbeBindAddress github.com/envoyproxy/gateway/internal/provider/kubernetes.healthProbeBindAddress
var healthProbeBindAddress string

//go:linkname webhookTLSPort github.com/envoyproxy/gateway/internal/provider/kubernetes.webhookTLSPort
var webhookTLSPort int

//go:linkname webhookTLSCertDir github.com/envoyproxy/gateway/internal/provider/kubernetes.webhookTLSCertDir
var webhookTLSCertDir string

func getenv(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	metricsserver.DefaultBindAddress = getenv("EG_CR_METRICS_ADDR", "0")
	healthProbeBindAddress = getenv("EG_HEALTH_PROBE_ADDR", "127.0.0.1:18081")
	if v := os.Getenv("EG_WEBHOOK_PORT"); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			_, _ = fmt.Fprintln(os.Stderr, "EG_WEBHOOK_PORT:", err)
			os.Exit(2)
		}
		webhookTLSPort = p
	}
	webhookTLSCertDir = getenv("EG_WEBHOOK_CERT_DIR", webhookTLSCertDir)

	if err := root.GetRootCommand(nil).ExecuteContext(ctrl.SetupSignalHandler()); err != nil {
		_, _ = fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
