#!/usr/bin/env bash
# patch.sh OUTDIR [MODULE_DIR]: copy the provider-kubernetes module that go.mod pins to
# OUTDIR/provider, let its Object controllers (namespaced and cluster-scoped) take their
# creation grace period from $PROVIDER_KUBERNETES_CREATION_GRACE_PERIOD (a Go duration;
# unset or invalid, upstream's 30s), write OUTDIR/go.mod and go.sum and print the go
# build flag that uses them. hack/tools.sh runs it when building this tool.
#
# Why: crossplane-runtime's managed reconciler checks the creation grace period before
# it handles a deletion, so an Object deleted within 30 s of its creation waits until
# the 30 s have passed (and then its exponential requeue) even after the remote object
# is gone: a ModelDeployment applied and deleted at once took 30-45 s to go. The grace
# exists for eventually consistent cloud APIs; a Kubernetes API server reads its own
# writes, and the local control plane sets 1s (e2e/controlplane/core.py). Upstream's
# option (managed.WithCreationGracePeriod) exists; only no flag reaches it.
set -euo pipefail
cd "$(dirname "$0")"
source ../patchlib.sh
patch_module "${1:?usage: patch.sh OUTDIR [MODULE_DIR]}" \
  github.com/crossplane-contrib/provider-kubernetes provider "${2:-}"

for scope in namespaced cluster; do
  object=$(file "internal/controller/$scope/object/object.go")
  edit "$object" 'managed.WithDeterministicExternalName(true),' \
    $'managed.WithDeterministicExternalName(true),\nmanaged.WithCreationGracePeriod(creationGracePeriod()), // hack/tools/provider-kubernetes/patch.sh'
  cat >"$(dirname "$object")/zz_creation_grace_period.go" <<'EOF'
package object

import (
	"os"
	"time"
)

// Added by function-model-serving's hack/tools/provider-kubernetes/patch.sh: the
// creation grace period is $PROVIDER_KUBERNETES_CREATION_GRACE_PERIOD (a Go duration),
// or upstream's 30s when it is unset or not a duration of zero or more.
func creationGracePeriod() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PROVIDER_KUBERNETES_CREATION_GRACE_PERIOD")); err == nil && d >= 0 {
		return d
	}
	return 30 * time.Second
}
EOF
done

patch_done
