package main

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// isPoolRef: a backendRef to an InferencePool (group inference.networking.k8s.io).
func isPoolRef(ref gwv1.BackendObjectReference) bool {
	return ref.Group != nil && string(*ref.Group) == infv1.GroupVersion.Group &&
		ref.Kind != nil && *ref.Kind == "InferencePool"
}

// liveRules reads rules with a client that bypasses any cache (the
// manager's API reader), for the reason ruleSource gives.
func liveRules(c client.Reader) ruleSource {
	return func(ctx context.Context, key ruleKey) ([]ruleBackend, error) {
		var hr gwv1.HTTPRoute
		if err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, &hr); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
		return ruleBackends(&hr, key.Rule), nil
	}
}

func ruleBackends(hr *gwv1.HTTPRoute, rule int) []ruleBackend {
	if rule < 0 || rule >= len(hr.Spec.Rules) {
		return nil
	}
	var out []ruleBackend
	for _, b := range hr.Spec.Rules[rule].BackendRefs {
		w := uint32(1) // Gateway API's default weight
		if b.Weight != nil {
			w = uint32(max(*b.Weight, 0))
		}
		rb := ruleBackend{Weight: w}
		if isPoolRef(b.BackendObjectReference) {
			ns := hr.Namespace
			if b.Namespace != nil {
				ns = string(*b.Namespace)
			}
			rb.Pool = &poolRef{Namespace: ns, Name: string(b.Name)}
		}
		out = append(out, rb)
	}
	return out
}
