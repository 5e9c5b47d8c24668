//go:build tools

// Package tools pins the LeaderWorkerSet controller manager (sigs.k8s.io/lws/cmd)
// for the local e2e control plane (hack/tools.sh --e2e). The harness applies the
// CRDs and webhook manifests from the module's config/ (LWS_SRC).
package tools

import _ "sigs.k8s.io/lws/cmd"
