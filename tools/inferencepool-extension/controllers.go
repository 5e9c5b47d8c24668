package main

import (
	"context"
	"log/slog"

	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// setupControllers wires the status writer and the EDS sync to the
// manager's cache (the hooks read the API server directly instead).
func setupControllers(mgr ctrl.Manager, eds *cachev3.LinearCache, controllerName string, log *slog.Logger) error {
	c := mgr.GetClient()
	err := ctrl.NewControllerManagedBy(mgr).Named("inferencepool-status").
		For(&infv1.InferencePool{}).
		Watches(&gwv1.HTTPRoute{}, handler.EnqueueRequestsFromMapFunc(poolsOfRoute)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(poolsOfService(c))).
		Complete(&statusWriter{c: c, controllerName: controllerName})
	if err != nil {
		return err
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "all"}}}
	})
	return ctrl.NewControllerManagedBy(mgr).Named("epp-endpoints").
		Watches(&infv1.InferencePool{}, all).
		Watches(&corev1.Service{}, all).
		Watches(&discoveryv1.EndpointSlice{}, all).
		Complete(&edsSync{c: c, cache: eds, log: log})
}

// poolsOfRoute: a route's change may change the status of the pools it names.
func poolsOfRoute(_ context.Context, o client.Object) []reconcile.Request {
	hr, ok := o.(*gwv1.HTTPRoute)
	if !ok {
		return nil
	}
	var out []reconcile.Request
	for i := range hr.Spec.Rules {
		for _, b := range ruleBackends(hr, i) {
			if b.Pool != nil {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: b.Pool.Namespace, Name: b.Pool.Name}})
			}
		}
	}
	return out
}

// poolsOfService: an EPP Service's change may change ResolvedRefs.
func poolsOfService(c client.Client) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var pools infv1.InferencePoolList
		if err := c.List(ctx, &pools, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, p := range pools.Items {
			if ref := p.Spec.EndpointPickerRef; ref != nil && string(ref.Name) == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
			}
		}
		return out
	}
}
