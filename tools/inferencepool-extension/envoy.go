package main

import (
	"fmt"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// options are the rewrite's settings, from flags.
type options struct {
	// XDSAddress is where Envoy reaches our EDS server (host:port).
	XDSAddress string
	// XDSRootCA (PEM): our server speaks TLS with this certificate (or one
	// it signs), so Envoy's EDS stream verifies it. Empty: plaintext.
	XDSRootCA []byte
	// EPPTLS: dial EPPs over TLS without verifying them (the llm-d EPP
	// serves a self-signed certificate by default).
	EPPTLS bool
	// MessageTimeout bounds each ext_proc exchange with the EPP.
	MessageTimeout time.Duration
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", m, err)) // only on a programming error
	}
	return a
}

const httpProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

func http2Options() map[string]*anypb.Any {
	return map[string]*anypb.Any{httpProtocolOptionsKey: mustAny(&upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
			ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
					Http2ProtocolOptions: &corev3.Http2ProtocolOptions{},
				},
			},
		},
	})}
}

// tlsWithoutVerification: TLS with no validation context, for peers on
// this machine that present self-signed certificates. h2 is offered by ALPN.
func tlsWithoutVerification() *corev3.TransportSocket {
	return &corev3.TransportSocket{
		Name: "envoy.transport_sockets.tls",
		ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(&tlsv3.UpstreamTlsContext{
			CommonTlsContext: &tlsv3.CommonTlsContext{AlpnProtocols: []string{"h2"}},
		})},
	}
}

// poolCluster routes to whichever endpoint the EPP wrote into the
// destination header. Without the header there is no host: Envoy answers
// 503 (EG's listeners don't restore an original destination to fall back on).
func poolCluster(p pool) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                 poolClusterName(p.poolRef),
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST},
		LbPolicy:             clusterv3.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       durationpb.New(10 * time.Second),
		LbConfig: &clusterv3.Cluster_OriginalDstLbConfig_{OriginalDstLbConfig: &clusterv3.Cluster_OriginalDstLbConfig{
			UseHttpHeader:  true,
			HttpHeaderName: destinationHeader,
		}},
	}
	if p.H2C {
		c.TypedExtensionProtocolOptions = http2Options()
	}
	return c
}

// eppCluster reaches a pool's EPP over gRPC (h2). Its endpoints come from
// our EDS server, which follows the EPP Service's EndpointSlices: Envoy
// Gateway does not watch that Service, so endpoints fixed at translation
// time would go stale when the EPP pod comes, goes or becomes ready.
//
// Envoy reaches that server through its Google gRPC client, not a cluster:
// an ApiConfigSource's envoy_grpc cluster must be static in the bootstrap
// (Envoy rejects one added over CDS), and the bootstrap is Envoy Gateway's.
func eppCluster(p pool, o options) *clusterv3.Cluster {
	c := &clusterv3.Cluster{
		Name:                          eppClusterName(p.Namespace, p.EPPService, p.EPPPort),
		ClusterDiscoveryType:          &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		ConnectTimeout:                durationpb.New(10 * time.Second),
		TypedExtensionProtocolOptions: http2Options(),
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{EdsConfig: &corev3.ConfigSource{
			ResourceApiVersion: corev3.ApiVersion_V3,
			ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_GoogleGrpc_{
					GoogleGrpc: edsClient(o),
				}}},
			}},
		}},
	}
	if o.EPPTLS {
		c.TransportSocket = tlsWithoutVerification()
	}
	return c
}

// edsClient is Envoy's Google gRPC client to our EDS server: plaintext on
// loopback, or TLS verified against XDSRootCA.
func edsClient(o options) *corev3.GrpcService_GoogleGrpc {
	g := &corev3.GrpcService_GoogleGrpc{TargetUri: o.XDSAddress, StatPrefix: edsStatPrefix}
	if len(o.XDSRootCA) > 0 {
		g.ChannelCredentials = &corev3.GrpcService_GoogleGrpc_ChannelCredentials{
			CredentialSpecifier: &corev3.GrpcService_GoogleGrpc_ChannelCredentials_SslCredentials{
				SslCredentials: &corev3.GrpcService_GoogleGrpc_SslCredentials{
					RootCerts: &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: o.XDSRootCA}},
				},
			},
		}
	}
	return g
}

func lbEndpoint(ip string, port uint32) *endpointv3.LbEndpoint {
	return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address:       ip,
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}},
	}}}
}

// processingMode is what the Inference Extension's reference data planes
// (Envoy AI Gateway, kgateway, GKE) configure: headers and trailers sent, both
// bodies FULL_DUPLEX_STREAMED, so the EPP reads the request body (model,
// prompt) and the response (usage) without Envoy buffering either.
func processingMode() *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		RequestTrailerMode:  extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		ResponseBodyMode:    extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
	}
}

// extProcFilter is the pool's ext_proc HTTP filter. It is present on every
// route of the HCM, so the virtual hosts disable it and only the pool's own
// routes (or weighted clusters) enable it again: see perRouteEnabled.
func extProcFilter(p pool, o options) *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name: extProcFilterName(p.poolRef),
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&extprocv3.ExternalProcessor{
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: eppClusterName(p.Namespace, p.EPPService, p.EPPPort),
				Authority:   fmt.Sprintf("%s.%s.svc:%d", p.EPPService, p.Namespace, p.EPPPort),
			}}},
			ProcessingMode:   processingMode(),
			FailureModeAllow: p.FailOpen,
			MessageTimeout:   durationpb.New(o.MessageTimeout),
		})},
	}
}

// perRouteDisabled turns a pool's filter off for a virtual host.
func perRouteDisabled() *anypb.Any {
	return mustAny(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Disabled{Disabled: true}})
}

// perRouteEnabled turns it back on for a route or a weighted cluster: the
// more specific config's "disabled" wins when Envoy merges them. The mode and
// failure mode are repeated so an older merge (which took the override's
// processing mode whole) can't fall back to header-only processing.
func perRouteEnabled(p pool) *anypb.Any {
	return mustAny(&extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{Overrides: &extprocv3.ExtProcOverrides{
		ProcessingMode:   processingMode(),
		FailureModeAllow: wrapperspb.Bool(p.FailOpen),
	}}})
}
