//go:build tools

// Package tools pins go-containerregistry's crane, which hack/build-image.sh
// uses to assemble the function's runtime image without a Docker daemon.
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
