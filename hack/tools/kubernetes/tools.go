//go:build tools

// Package tools pins the Kubernetes control plane binaries of the local e2e
// control plane (hack/tools.sh --e2e). k8s.io/kubernetes replaces its staging
// modules with ./staging/..., which a dependent module does not inherit: go.mod
// replaces each with the published module at the matching v0.x version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
