package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	pb "github.com/envoyproxy/gateway/proto/extension"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func runRewrite(t *testing.T, req *pb.PostTranslateModifyRequest) *pb.PostTranslateModifyResponse {
	t.Helper()
	rw := &rewriter{opts: testOpts, rules: testRules}
	resp, err := rw.rewrite(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func findRoute(t *testing.T, resp *pb.PostTranslateModifyResponse, rc, name string) *routev3.Route {
	t.Helper()
	for _, c := range resp.Routes {
		if c.Name != rc {
			continue
		}
		for _, vh := range c.VirtualHosts {
			for _, r := range vh.Routes {
				if strings.HasPrefix(r.Name, "httproute/default/"+name+"/") {
					return r
				}
			}
		}
	}
	t.Fatalf("no route %s in %s", name, rc)
	return nil
}

func findCluster(resp *pb.PostTranslateModifyResponse, name string) *clusterv3.Cluster {
	for _, c := range resp.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func extProcPerRoute(t *testing.T, a *anypb.Any) *extprocv3.ExtProcPerRoute {
	t.Helper()
	if a == nil {
		return nil
	}
	pr := &extprocv3.ExtProcPerRoute{}
	if err := a.UnmarshalTo(pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

func hcmOf(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.DefaultFilterChain.Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	return hcm
}

func TestPoolOnlyRuleGoesToThePoolsOriginalDstClusterWithItsFilterOn(t *testing.T) {
	resp := runRewrite(t, translateRequest(t))
	r := findRoute(t, resp, testRouteConfig, "pool-only")
	if got := r.GetRoute().GetCluster(); got != "inferencepool/default/pool-a" {
		t.Fatalf("route cluster = %q", got)
	}
	pr := extProcPerRoute(t, r.TypedPerFilterConfig[extProcFilterName(poolRef{"default", "pool-a"})])
	if pr == nil || pr.GetDisabled() || pr.GetOverrides().GetProcessingMode().GetRequestBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		t.Fatalf("pool-a filter not enabled on its route: %v", pr)
	}
	if pr.GetOverrides().GetFailureModeAllow().GetValue() {
		t.Fatal("FailClose pool must not allow failures")
	}

	c := findCluster(resp, "inferencepool/default/pool-a")
	if c == nil || c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.LbPolicy != clusterv3.Cluster_CLUSTER_PROVIDED {
		t.Fatalf("pool cluster = %v", c)
	}
	if cfg := c.GetOriginalDstLbConfig(); !cfg.GetUseHttpHeader() || cfg.GetHttpHeaderName() != "x-gateway-destination-endpoint" {
		t.Fatalf("original_dst_lb_config = %v", cfg)
	}
}

func TestWeightedRuleSplitsOffOnlyThePoolsShare(t *testing.T) {
	resp := runRewrite(t, translateRequest(t))
	r := findRoute(t, resp, testRouteConfig, "split")
	ws := r.GetRoute().GetWeightedClusters()
	want := map[string]uint32{"httproute/default/split/rule/0": 80, "inferencepool/default/pool-b": 20}
	if got := weights(ws); len(got) != 2 || got["httproute/default/split/rule/0"] != 80 || got["inferencepool/default/pool-b"] != 20 {
		t.Fatalf("weighted clusters = %v, want %v", got, want)
	}
	filter := extProcFilterName(poolRef{"default", "pool-b"})
	if r.TypedPerFilterConfig[filter] != nil {
		t.Fatal("the EPP must not see the Service's share: no route-level enable")
	}
	for _, c := range ws.Clusters {
		pr := extProcPerRoute(t, c.TypedPerFilterConfig[filter])
		switch c.Name {
		case "inferencepool/default/pool-b":
			if pr == nil || pr.GetDisabled() || !pr.GetOverrides().GetFailureModeAllow().GetValue() {
				t.Fatalf("pool-b's share: want its FailOpen filter enabled, got %v", pr)
			}
		default:
			if pr != nil {
				t.Fatalf("%s must not enable the EPP", c.Name)
			}
		}
	}
}

func TestRoutesWithoutPoolsAndOtherListenersAreUntouched(t *testing.T) {
	req := translateRequest(t)
	before := proto.Clone(&pb.PostTranslateModifyRequest{Routes: req.Routes, Listeners: req.Listeners}).(*pb.PostTranslateModifyRequest)
	resp := runRewrite(t, req)
	for _, rc := range []string{testRouteConfig, "default/other/http"} {
		if got, want := findRoute(t, resp, rc, "plain"), findRoute(t, &pb.PostTranslateModifyResponse{Routes: before.Routes}, rc, "plain"); !proto.Equal(got, want) {
			t.Fatalf("%s: plain route changed:\n%v\nwant\n%v", rc, got, want)
		}
	}
	if !proto.Equal(resp.Listeners[1], before.Listeners[1]) {
		t.Fatal("a listener whose routes use no pool changed")
	}
	if !proto.Equal(resp.Routes[1], before.Routes[1]) {
		t.Fatal("a route configuration without pools changed")
	}
}

func TestPoolWithoutEndpointPickerFailsItsShareWith500(t *testing.T) {
	resp := runRewrite(t, translateRequest(t))
	a := findRoute(t, resp, testRouteConfig, "no-epp").GetRoute()
	if got := weights(a.GetWeightedClusters()); len(got) != 1 || got[invalidCluster] != 1 {
		t.Fatalf("no-epp route: weighted clusters %v, want only %s", got, invalidCluster)
	}
	if a.ClusterNotFoundResponseCode != routev3.RouteAction_INTERNAL_SERVER_ERROR {
		t.Fatalf("cluster_not_found_response_code = %v", a.ClusterNotFoundResponseCode)
	}
	if findCluster(resp, "inferencepool/default/pool-c") != nil {
		t.Fatal("a pool without EPP got a cluster")
	}
}

func TestFiltersVirtualHostsAndClustersForTheListenerThatUsesPools(t *testing.T) {
	resp := runRewrite(t, translateRequest(t))
	hcm := hcmOf(t, resp.Listeners[0])
	var names []string
	for _, f := range hcm.HttpFilters {
		names = append(names, f.Name)
	}
	want := []string{
		"envoy.filters.http.cors",
		"envoy.filters.http.ext_proc/inferencepool/default/pool-a",
		"envoy.filters.http.ext_proc/inferencepool/default/pool-b",
		routerFilter,
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("HCM filters = %v, want %v", names, want)
	}
	ep := &extprocv3.ExternalProcessor{}
	if err := hcm.HttpFilters[2].GetTypedConfig().UnmarshalTo(ep); err != nil {
		t.Fatal(err)
	}
	mode := ep.GetProcessingMode()
	if mode.GetRequestBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED || mode.GetResponseBodyMode() != extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
		mode.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND || mode.GetResponseHeaderMode() != extprocv3.ProcessingMode_SEND {
		t.Fatalf("processing mode = %v", mode)
	}
	if !ep.FailureModeAllow {
		t.Fatal("pool-b is FailOpen: failure_mode_allow must be true")
	}
	g := ep.GetGrpcService().GetEnvoyGrpc()
	if g.GetClusterName() != "inferencepool-epp/default/epp-b/9002" || g.GetAuthority() != "epp-b.default.svc:9002" {
		t.Fatalf("ext_proc grpc service = %v", g)
	}

	// Off by default on the virtual host, for both pools.
	vh := resp.Routes[0].VirtualHosts[0]
	for _, p := range []string{"pool-a", "pool-b"} {
		if pr := extProcPerRoute(t, vh.TypedPerFilterConfig[extProcFilterName(poolRef{"default", p})]); !pr.GetDisabled() {
			t.Fatalf("%s: filter not disabled on the virtual host", p)
		}
	}

	epp := findCluster(resp, "inferencepool-epp/default/epp-a/9002")
	// EDS through Envoy's Google gRPC client: an envoy_grpc cluster would have to
	// be static in Envoy Gateway's bootstrap (Envoy rejects one added over CDS).
	eds := epp.GetEdsClusterConfig().GetEdsConfig().GetApiConfigSource().GetGrpcServices()[0].GetGoogleGrpc()
	if epp == nil || epp.GetType() != clusterv3.Cluster_EDS || epp.TransportSocket == nil ||
		eds.GetTargetUri() != "127.0.0.1:5005" || eds.GetChannelCredentials() != nil {
		t.Fatalf("EPP cluster = %v", epp)
	}
	if _, ok := epp.TypedExtensionProtocolOptions[httpProtocolOptionsKey]; !ok {
		t.Fatal("EPP cluster must speak h2 (gRPC)")
	}
	for _, c := range resp.Clusters {
		for _, g := range c.GetEdsClusterConfig().GetEdsConfig().GetApiConfigSource().GetGrpcServices() {
			if g.GetEnvoyGrpc() != nil {
				t.Fatalf("cluster %s reads EDS through a cluster, which Envoy refuses over CDS", c.Name)
			}
		}
	}
	for _, name := range []string{"httproute/default/plain/rule/0", "httproute/default/split/rule/0"} {
		if findCluster(resp, name) == nil {
			t.Fatalf("EG's cluster %s was dropped", name)
		}
	}
}

func TestRewriteIsStableOnItsOwnOutput(t *testing.T) {
	once := runRewrite(t, translateRequest(t))
	twice := runRewrite(t, &pb.PostTranslateModifyRequest{
		Clusters: once.Clusters, Secrets: once.Secrets, Listeners: once.Listeners, Routes: once.Routes,
	})
	if r1, r2 := findRoute(t, once, testRouteConfig, "split"), findRoute(t, twice, testRouteConfig, "split"); !proto.Equal(r1, r2) {
		t.Fatalf("split route changed on a second pass:\n%v\n%v", r1, r2)
	}
	if len(hcmOf(t, twice.Listeners[0]).HttpFilters) != 4 || len(twice.Clusters) != len(once.Clusters) {
		t.Fatal("a second pass duplicated filters or clusters")
	}
}

func TestWithoutPoolClustersTheRequestPassesThrough(t *testing.T) {
	req := translateRequest(t)
	for _, c := range req.Clusters {
		c.Metadata = nil // as if no rule had an InferencePool backend
	}
	want := proto.Clone(req).(*pb.PostTranslateModifyRequest)
	resp := runRewrite(t, req)
	got := &pb.PostTranslateModifyRequest{Clusters: resp.Clusters, Listeners: resp.Listeners, Routes: resp.Routes}
	if !proto.Equal(got, want) {
		t.Fatal("output differs from input without any pool")
	}
}

func TestEGAlreadyWeightedRuleKeepsItsEntriesAndGainsThePool(t *testing.T) {
	req := translateRequest(t)
	r := findRoute(t, &pb.PostTranslateModifyResponse{Routes: req.Routes}, testRouteConfig, "split")
	// EG splits per backend when it must (e.g. a Service without endpoints).
	r.GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
		Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: invalidCluster, Weight: wrapU32(80)}},
	}}
	resp := runRewrite(t, req)
	got := weights(findRoute(t, resp, testRouteConfig, "split").GetRoute().GetWeightedClusters())
	if len(got) != 2 || got[invalidCluster] != 80 || got["inferencepool/default/pool-b"] != 20 {
		t.Fatalf("weighted clusters = %v", got)
	}
}

func TestRuleReadErrorFailsTheHook(t *testing.T) {
	rw := &rewriter{opts: testOpts, rules: func(context.Context, ruleKey) ([]ruleBackend, error) {
		return nil, errors.New("API server down")
	}}
	if _, err := rw.rewrite(context.Background(), translateRequest(t)); err == nil {
		t.Fatal("want an error so Envoy Gateway keeps the last good config (failOpen: false)")
	}
}

func TestParseRuleKey(t *testing.T) {
	for name, want := range map[string]*ruleKey{
		"httproute/ns/r/rule/3":                  {"ns", "r", 3},
		"httproute/ns/r/rule/3/backend/1":        {"ns", "r", 3},
		"httproute/ns/r/rule/12/match/0/foo_com": {"ns", "r", 12},
		"httproute/ns/r/rule/3x":                 nil,
		"grpcroute/ns/r/rule/0":                  nil,
		"invalid-backend-cluster":                nil,
	} {
		got, ok := parseRuleKey(name)
		if (want == nil) == ok || (ok && got != *want) {
			t.Errorf("parseRuleKey(%q) = %v, %v; want %v", name, got, ok, want)
		}
	}
}

func TestListenOnlyOnLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:5005": true, "[::1]:5005": true, "127.0.0.9:1": true,
		"0.0.0.0:5005": false, ":5005": false, "10.1.2.3:5005": false, "localhost:5005": false} {
		if err := loopbackOnly(addr); (err == nil) != ok {
			t.Errorf("loopbackOnly(%q) = %v", addr, err)
		}
	}
}
