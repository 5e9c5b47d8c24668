//go:build tools

// Package tools pins helm's CLI, which renders the charts of the stack's
// controllers at build time (hack/vendor_crds.py).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
