//go:build tools

// Package tools pins the llm-d inference scheduler module (hack/tools.sh
// --dataplane): cmd/epp, the endpoint picker (EPP), and cmd/pd-sidecar, the
// routing sidecar that sends prefill to a prefill pod and decodes on its own
// pod. The sidecar lives in this module; github.com/llm-d/llm-d-routing-sidecar
// is not served by the module proxy.
package tools

import (
	_ "github.com/llm-d/llm-d-inference-scheduler/cmd/epp"
	_ "github.com/llm-d/llm-d-inference-scheduler/cmd/pd-sidecar"
)
