//go:build tools

// Package tools pins the Gateway API Inference Extension for its CRDs
// (config/crd/bases of the module, INFERENCE_EXTENSION_SRC in hack/tools.sh
// --e2e): InferencePool inference.networking.k8s.io/v1. Nothing here is built.
package tools

import _ "sigs.k8s.io/gateway-api-inference-extension/api/v1"
