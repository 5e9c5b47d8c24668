//go:build tools

// Package tools pins kwok (fake nodes and pods) for the local e2e control plane
// (hack/tools.sh --e2e). The harness reads its stages from the module's
// kustomize/stage/ (KWOK_SRC).
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
