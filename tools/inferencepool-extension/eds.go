package main

import (
	"context"
	"log/slog"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// eppLoadAssignments resolves each routable pool's EPP Service to the ready
// addresses of its EndpointSlices, on the target port behind the Service
// port the pool names. There is no kube-proxy or cluster DNS on `make
// cluster`, so the Service's ClusterIP or name would lead nowhere.
func eppLoadAssignments(pools []infv1.InferencePool, services []corev1.Service, slices []discoveryv1.EndpointSlice) map[string]*endpointv3.ClusterLoadAssignment {
	out := map[string]*endpointv3.ClusterLoadAssignment{}
	for i := range pools {
		p := poolFrom(&pools[i])
		if !p.routable() {
			continue
		}
		name := eppClusterName(p.Namespace, p.EPPService, p.EPPPort)
		cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
		out[name] = cla // an EPP not (yet) resolved has no endpoints: ext_proc fails, per failureMode
		portName, ok := servicePortName(services, p.Namespace, p.EPPService, p.EPPPort)
		if !ok {
			continue
		}
		var eps []*endpointv3.LbEndpoint
		for _, s := range slices {
			if s.Namespace != p.Namespace || s.Labels[discoveryv1.LabelServiceName] != p.EPPService {
				continue
			}
			target, ok := slicePort(s, portName)
			if !ok {
				continue
			}
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue // nil means ready, as for kube-proxy
				}
				for _, a := range e.Addresses {
					eps = append(eps, lbEndpoint(a, target))
				}
			}
		}
		if len(eps) > 0 {
			cla.Endpoints = []*endpointv3.LocalityLbEndpoints{{LbEndpoints: eps}}
		}
	}
	return out
}

func servicePortName(services []corev1.Service, ns, name string, port uint32) (string, bool) {
	for _, s := range services {
		if s.Namespace != ns || s.Name != name {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if uint32(sp.Port) == port {
				return sp.Name, true
			}
		}
	}
	return "", false
}

func slicePort(s discoveryv1.EndpointSlice, name string) (uint32, bool) {
	for _, p := range s.Ports {
		n := ""
		if p.Name != nil {
			n = *p.Name
		}
		if n == name && p.Port != nil {
			return uint32(*p.Port), true
		}
	}
	return 0, false
}

// edsSync recomputes every EPP's endpoints into the EDS cache. Any change
// to a pool, Service or EndpointSlice enqueues the same key: the sets are
// small, and one full recompute can't miss a dependency.
type edsSync struct {
	c     client.Reader
	cache *cachev3.LinearCache
	log   *slog.Logger
}

func newEDSCache() *cachev3.LinearCache { return cachev3.NewLinearCache(resourcev3.EndpointType) }

func (e *edsSync) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var pools infv1.InferencePoolList
	var services corev1.ServiceList
	var slices discoveryv1.EndpointSliceList
	for _, l := range []client.ObjectList{&pools, &services, &slices} {
		if err := e.c.List(ctx, l); err != nil {
			return reconcile.Result{}, err
		}
	}
	res := map[string]types.Resource{}
	for name, cla := range eppLoadAssignments(pools.Items, services.Items, slices.Items) {
		res[name] = cla
		e.log.Debug("EPP endpoints", "cluster", name, "endpoints", len(cla.GetEndpoints()))
	}
	return reconcile.Result{}, e.cache.SetResources(res)
}
