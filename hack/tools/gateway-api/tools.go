//go:build tools

// Package tools pins Gateway API for its CRDs (config/crd/standard of the module,
// GATEWAY_API_SRC in hack/tools.sh --e2e); nothing here is built.
package tools

import _ "sigs.k8s.io/gateway-api/apis/v1"
