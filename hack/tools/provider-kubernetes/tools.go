//go:build tools

// Package tools pins provider-kubernetes for the local e2e control plane
// (hack/tools.sh --e2e), run as a local process. The harness applies its CRDs
// from the module's package/crds (PROVIDER_KUBERNETES_SRC). v1.3.1 needs a
// module the proxy refuses and v1.4.x needs a newer Go than this machine's.
package tools

import _ "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"
