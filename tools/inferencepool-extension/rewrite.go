package main

import (
	"context"
	"fmt"
	"sort"

	pb "github.com/envoyproxy/gateway/proto/extension"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ruleBackend is one backendRef of an HTTPRoute rule.
type ruleBackend struct {
	Pool   *poolRef // nil: not an InferencePool
	Weight uint32
}

// ruleSource returns a rule's backendRefs, or nil when the route or rule is
// gone. It reads the API server directly: never older than what Envoy
// Gateway translated, and if newer, EG translates again and calls us again.
type ruleSource func(context.Context, ruleKey) ([]ruleBackend, error)

// invalidCluster is the name EG gives a weighted rule's share that can't be
// served: no such cluster exists, so Envoy answers cluster_not_found_response_code.
const invalidCluster = "invalid-backend-cluster"

type rewriter struct {
	opts  options
	rules ruleSource
}

// rewrite is the Translation hook: it routes each InferencePool backend
// through its EPP. Only the pool's own share of a rule changes; the rest of
// Envoy Gateway's output passes through untouched.
func (r *rewriter) rewrite(ctx context.Context, req *pb.PostTranslateModifyRequest) (*pb.PostTranslateModifyResponse, error) {
	resp := &pb.PostTranslateModifyResponse{
		Clusters: req.Clusters, Secrets: req.Secrets, Listeners: req.Listeners, Routes: req.Routes,
	}
	tagged, err := taggedRules(req.Clusters)
	if err != nil || len(tagged) == 0 {
		return resp, err
	}

	// Rewrite the routes; remember which pools each route configuration uses.
	backends := map[ruleKey][]ruleBackend{}
	usedBy := map[string]map[poolRef]pool{} // route configuration name -> pools
	for _, rc := range req.Routes {
		for _, vh := range rc.VirtualHosts {
			for _, rt := range vh.Routes {
				key, ok := parseRuleKey(rt.Name)
				if !ok || tagged[key] == nil {
					continue
				}
				bs, seen := backends[key]
				if !seen {
					if bs, err = r.rules(ctx, key); err != nil {
						return nil, fmt.Errorf("reading HTTPRoute rule %s: %w", key, err)
					}
					backends[key] = bs
				}
				for _, p := range rewriteRoute(rt, bs, tagged[key]) {
					if usedBy[rc.Name] == nil {
						usedBy[rc.Name] = map[poolRef]pool{}
					}
					usedBy[rc.Name][p.poolRef] = p
				}
			}
		}
	}
	if len(usedBy) == 0 {
		return resp, nil
	}

	// The pools' filters are off on every virtual host of a configuration that
	// uses them, and on again only where rewriteRoute enabled them.
	for _, rc := range req.Routes {
		for _, p := range usedBy[rc.Name] {
			for _, vh := range rc.VirtualHosts {
				if vh.TypedPerFilterConfig == nil {
					vh.TypedPerFilterConfig = map[string]*anypb.Any{}
				}
				vh.TypedPerFilterConfig[extProcFilterName(p.poolRef)] = perRouteDisabled()
			}
		}
	}
	if err := addFilters(req.Listeners, usedBy, r.opts); err != nil {
		return nil, err
	}

	// One ORIGINAL_DST cluster per pool and one EDS cluster per EPP.
	all := map[poolRef]pool{}
	for _, ps := range usedBy {
		for ref, p := range ps {
			all[ref] = p
		}
	}
	added := []*clusterv3.Cluster{}
	for _, p := range sortedPools(all) {
		added = append(added, poolCluster(p), eppCluster(p, r.opts))
	}
	resp.Clusters = mergeClusters(req.Clusters, added)
	return resp, nil
}

// taggedRules collects what the Cluster hook wrote: for each HTTPRoute rule
// with InferencePool backends, the pools as Envoy Gateway saw them.
func taggedRules(clusters []*clusterv3.Cluster) (map[ruleKey]map[poolRef]pool, error) {
	out := map[ruleKey]map[poolRef]pool{}
	for _, c := range clusters {
		md := c.GetMetadata().GetFilterMetadata()[metadataNamespace]
		if md == nil {
			continue
		}
		key, ok := parseRuleKey(c.Name)
		if !ok {
			continue
		}
		pools, err := poolsFromStruct(md)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: reading our metadata: %w", c.Name, err)
		}
		if out[key] == nil {
			out[key] = map[poolRef]pool{}
		}
		for _, p := range pools {
			out[key][p.poolRef] = p
		}
	}
	return out, nil
}

// rewriteRoute points the pools' share of a route at their ORIGINAL_DST
// clusters and returns the pools it now uses. Envoy Gateway gives a pool no
// endpoints: alone in a rule, the route's cluster is empty (503); weighted
// with Services, the pool is an empty locality of the rule's cluster, which
// Envoy skips, so the Services take all traffic. Either way the pool's
// weight goes to a weighted cluster of its own, whose per-filter config
// turns the pool's ext_proc on for the requests that go there and no others.
func rewriteRoute(rt *routev3.Route, backends []ruleBackend, tagged map[poolRef]pool) []pool {
	action := rt.GetRoute()
	if action == nil {
		return nil // redirect or direct response (e.g. a filter's): not ours to change
	}
	var poolEntries []*routev3.WeightedCluster_ClusterWeight
	var used []pool
	var other, invalid uint32
	for _, b := range backends {
		switch p, known := tagged[derefPool(b.Pool)]; {
		case b.Weight == 0:
		case b.Pool == nil:
			other += b.Weight
		case !known || !p.routable():
			// No EPP to ask, or EG hasn't translated this pool yet: its share
			// fails like any invalid backendRef (500), never reaches another.
			invalid += b.Weight
		default:
			used = append(used, p)
			poolEntries = append(poolEntries, &routev3.WeightedCluster_ClusterWeight{
				Name:                 poolClusterName(p.poolRef),
				Weight:               wrapperspb.UInt32(b.Weight),
				TypedPerFilterConfig: map[string]*anypb.Any{extProcFilterName(p.poolRef): perRouteEnabled(p)},
			})
		}
	}
	if len(poolEntries) == 0 && invalid == 0 {
		return nil
	}

	ours := map[string]bool{}
	for _, e := range poolEntries {
		ours[e.Name] = true
	}
	var entries []*routev3.WeightedCluster_ClusterWeight
	switch cs := action.ClusterSpecifier.(type) {
	case *routev3.RouteAction_Cluster:
		if other > 0 { // the rule's cluster still serves the other backendRefs
			entries = append(entries, &routev3.WeightedCluster_ClusterWeight{Name: cs.Cluster, Weight: wrapperspb.UInt32(other)})
		}
		if invalid > 0 {
			action.ClusterNotFoundResponseCode = routev3.RouteAction_INTERNAL_SERVER_ERROR
		}
	case *routev3.RouteAction_WeightedClusters:
		// EG already split the rule (per-backend clusters); a pool, having no
		// endpoints, is never among its entries. Ours are dropped so that a
		// second pass over our own output changes nothing.
		for _, e := range cs.WeightedClusters.GetClusters() {
			if !ours[e.Name] {
				entries = append(entries, e)
			}
		}
	default:
		return nil
	}
	if invalid > 0 {
		entries = append(entries, &routev3.WeightedCluster_ClusterWeight{Name: invalidCluster, Weight: wrapperspb.UInt32(invalid)})
	}
	entries = append(entries, poolEntries...)

	if len(entries) == 1 && len(poolEntries) == 1 {
		// The pool is the whole rule: a plain route, the filter on for it.
		if rt.TypedPerFilterConfig == nil {
			rt.TypedPerFilterConfig = map[string]*anypb.Any{}
		}
		rt.TypedPerFilterConfig[extProcFilterName(used[0].poolRef)] = perRouteEnabled(used[0])
		action.ClusterSpecifier = &routev3.RouteAction_Cluster{Cluster: poolEntries[0].Name}
		return used
	}
	action.ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{Clusters: entries}}
	return used
}

func derefPool(p *poolRef) poolRef {
	if p == nil {
		return poolRef{}
	}
	return *p
}

// addFilters puts each pool's ext_proc filter, just before the router, into
// every HCM whose RDS route configuration uses the pool.
func addFilters(listeners []*listenerv3.Listener, usedBy map[string]map[poolRef]pool, o options) error {
	for _, l := range listeners {
		chains := append([]*listenerv3.FilterChain{}, l.FilterChains...)
		if l.DefaultFilterChain != nil {
			chains = append(chains, l.DefaultFilterChain)
		}
		for _, fc := range chains {
			for _, f := range fc.Filters {
				if f.Name != httpConnectionManager || f.GetTypedConfig() == nil {
					continue
				}
				hcm := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					return fmt.Errorf("listener %s: %w", l.Name, err)
				}
				pools := usedBy[hcm.GetRds().GetRouteConfigName()]
				if len(pools) == 0 {
					continue
				}
				if err := insertFilters(hcm, pools, o); err != nil {
					return fmt.Errorf("listener %s: %w", l.Name, err)
				}
				f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)}
			}
		}
	}
	return nil
}

func insertFilters(hcm *hcmv3.HttpConnectionManager, pools map[poolRef]pool, o options) error {
	router := -1
	present := map[string]bool{}
	for i, f := range hcm.HttpFilters {
		present[f.Name] = true
		if f.Name == routerFilter {
			router = i
		}
	}
	if router < 0 {
		return fmt.Errorf("HCM has no %s filter", routerFilter)
	}
	var add []*hcmv3.HttpFilter
	for _, p := range sortedPools(pools) {
		if !present[extProcFilterName(p.poolRef)] {
			add = append(add, extProcFilter(p, o))
		}
	}
	filters := append([]*hcmv3.HttpFilter{}, hcm.HttpFilters[:router]...)
	filters = append(filters, add...)
	hcm.HttpFilters = append(filters, hcm.HttpFilters[router:]...)
	return nil
}

// mergeClusters appends ours, replacing any of the same name: the hook may
// see its own output again when Envoy Gateway retranslates.
func mergeClusters(have, ours []*clusterv3.Cluster) []*clusterv3.Cluster {
	mine := map[string]bool{}
	for _, c := range ours {
		mine[c.Name] = true
	}
	out := make([]*clusterv3.Cluster, 0, len(have)+len(ours))
	for _, c := range have {
		if !mine[c.Name] {
			out = append(out, c)
		}
	}
	return append(out, ours...)
}

// sortedPools keeps the output stable, so Envoy sees no spurious updates.
func sortedPools(m map[poolRef]pool) []pool {
	out := make([]pool, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out
}
