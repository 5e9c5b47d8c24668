package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	pb "github.com/envoyproxy/gateway/proto/extension"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The fixture is shaped like Envoy Gateway v1.9.1's translation of one
// Gateway listener "default/gw/http" with four HTTPRoutes:
//
//	pool-only: one rule, backendRef InferencePool pool-a
//	split:     one rule, Service svc (weight 80) + InferencePool pool-b (weight 20, FailOpen)
//	plain:     one rule, Service svc only
//	no-epp:    one rule, InferencePool pool-c without endpointPickerRef
//
// EG puts a rule's backendRefs into one cluster "httproute/NS/NAME/rule/I"
// (a pool is an empty locality of it) and calls the Cluster hook with the
// rule's custom backend resources; the routes' names carry the rule.
const testRouteConfig = "default/gw/http"

var testOpts = options{XDSAddress: "127.0.0.1:5005", EPPTLS: true, MessageTimeout: 10 * time.Second}

func poolJSON(t *testing.T, name, epp, failureMode string) []byte {
	t.Helper()
	spec := map[string]any{
		"selector":    map[string]any{"matchLabels": map[string]any{"app": name}},
		"targetPorts": []any{map[string]any{"number": 8000}},
	}
	if epp != "" {
		spec["endpointPickerRef"] = map[string]any{"name": epp, "port": map[string]any{"number": 9002}, "failureMode": failureMode}
	}
	raw, err := json.Marshal(map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec":     spec,
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func ruleCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 "httproute/default/" + name + "/rule/0",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{}}},
	}
}

func routeTo(name string) *routev3.Route {
	return &routev3.Route{
		Name:  "httproute/default/" + name + "/rule/0/match/0/*",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/" + name}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "httproute/default/" + name + "/rule/0"},
			Timeout:          nil,
		}},
	}
}

func hcmListener(name, routeConfig string) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "http-10080",
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			RouteConfigName: routeConfig,
			ConfigSource:    &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "envoy.filters.http.cors"}, // EG's filters precede the router
			{Name: routerFilter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
	return &listenerv3.Listener{
		Name: name,
		DefaultFilterChain: &listenerv3.FilterChain{Filters: []*listenerv3.Filter{{
			Name: httpConnectionManager, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}}},
	}
}

// translateRequest runs the Cluster hook over the rule clusters as EG does,
// then assembles the Translation hook's request.
func translateRequest(t *testing.T) *pb.PostTranslateModifyRequest {
	t.Helper()
	h := &hooks{}
	resources := map[string][][]byte{
		"pool-only": {poolJSON(t, "pool-a", "epp-a", "FailClose")},
		"split":     {poolJSON(t, "pool-b", "epp-b", "FailOpen")},
		"plain":     nil,
		"no-epp":    {poolJSON(t, "pool-c", "", "")},
	}
	var clusters []*clusterv3.Cluster
	for _, name := range []string{"pool-only", "split", "plain", "no-epp"} {
		c := ruleCluster(name)
		if len(resources[name]) > 0 { // EG calls the hook only with resources
			var ers []*pb.ExtensionResource
			for _, raw := range resources[name] {
				ers = append(ers, &pb.ExtensionResource{UnstructuredBytes: raw})
			}
			resp, err := h.PostClusterModify(context.Background(), &pb.PostClusterModifyRequest{
				Cluster: c, PostClusterContext: &pb.PostClusterExtensionContext{BackendExtensionResources: ers},
			})
			if err != nil {
				t.Fatal(err)
			}
			c = resp.Cluster
		}
		clusters = append(clusters, c)
	}
	return &pb.PostTranslateModifyRequest{
		Clusters: clusters,
		Listeners: []*listenerv3.Listener{
			hcmListener("default/gw/http", testRouteConfig),
			hcmListener("default/other/http", "default/other/http"),
		},
		Routes: []*routev3.RouteConfiguration{
			{Name: testRouteConfig, VirtualHosts: []*routev3.VirtualHost{{
				Name: "gw/*", Domains: []string{"*"},
				Routes: []*routev3.Route{routeTo("pool-only"), routeTo("split"), routeTo("plain"), routeTo("no-epp")},
			}}},
			{Name: "default/other/http", VirtualHosts: []*routev3.VirtualHost{{
				Name: "other/*", Domains: []string{"*"}, Routes: []*routev3.Route{routeTo("plain")},
			}}},
		},
	}
}

// testRules is the API server's view of the four HTTPRoutes.
func testRules(_ context.Context, k ruleKey) ([]ruleBackend, error) {
	pool := func(n string) *poolRef { return &poolRef{Namespace: "default", Name: n} }
	switch k.Name {
	case "pool-only":
		return []ruleBackend{{Pool: pool("pool-a"), Weight: 1}}, nil
	case "split":
		return []ruleBackend{{Weight: 80}, {Pool: pool("pool-b"), Weight: 20}}, nil
	case "plain":
		return []ruleBackend{{Weight: 1}}, nil
	case "no-epp":
		return []ruleBackend{{Pool: pool("pool-c"), Weight: 1}}, nil
	}
	return nil, nil
}

func weights(ws *routev3.WeightedCluster) map[string]uint32 {
	out := map[string]uint32{}
	for _, c := range ws.GetClusters() {
		out[c.Name] = c.GetWeight().GetValue()
	}
	return out
}

func wrapU32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
