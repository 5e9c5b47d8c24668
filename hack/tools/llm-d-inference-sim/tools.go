//go:build tools

// Package tools pins the llm-d inference simulator, the engine stand-in that
// e2e/controlplane/pods runs in place of vLLM and SGLang containers
// (hack/tools.sh --dataplane). v0.10.2 is the only tag the module proxy serves
// here; `go install ...@v0.10.2` fails (it asks for the version list), this
// module plus `go build` does not.
package tools

import _ "github.com/llm-d/llm-d-inference-sim/cmd/llm-d-inference-sim"
