package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	pb "github.com/envoyproxy/gateway/proto/extension"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// hooks is the gRPC service Envoy Gateway calls (proto/extension in EG v1.9.1).
// Cluster and Translation do the work; the other hooks hand their input back
// unchanged, so an EnvoyGateway config that subscribes to them still works.
type hooks struct {
	pb.UnimplementedEnvoyGatewayExtensionServer
	rw  *rewriter
	log *slog.Logger
}

// PostClusterModify is called for each cluster of a rule whose backendRefs
// include resources we registered (backendResources), with those resources.
// It only tags the cluster with the pools: the Translation hook, which sees
// listeners and routes too, does the rewrite. The Cluster hook is the one
// place EG hands us the pools themselves.
func (h *hooks) PostClusterModify(_ context.Context, req *pb.PostClusterModifyRequest) (*pb.PostClusterModifyResponse, error) {
	c := req.GetCluster()
	pools, err := poolsIn(req.GetPostClusterContext().GetBackendExtensionResources())
	if err != nil || len(pools) == 0 || c == nil {
		return &pb.PostClusterModifyResponse{Cluster: c}, err
	}
	md, err := poolsToStruct(pools)
	if err != nil {
		return nil, err
	}
	if c.Metadata == nil {
		c.Metadata = &corev3.Metadata{}
	}
	if c.Metadata.FilterMetadata == nil {
		c.Metadata.FilterMetadata = map[string]*structpb.Struct{}
	}
	c.Metadata.FilterMetadata[metadataNamespace] = md
	return &pb.PostClusterModifyResponse{Cluster: c}, nil
}

// poolsIn decodes the InferencePools among EG's extension resources.
func poolsIn(resources []*pb.ExtensionResource) ([]pool, error) {
	var out []pool
	for _, r := range resources {
		var u unstructured.Unstructured
		if err := json.Unmarshal(r.GetUnstructuredBytes(), &u.Object); err != nil {
			return nil, fmt.Errorf("decoding an extension resource: %w", err)
		}
		if u.GetAPIVersion() != infv1.GroupVersion.String() || u.GetKind() != "InferencePool" {
			continue
		}
		var ip infv1.InferencePool
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ip); err != nil {
			return nil, fmt.Errorf("InferencePool %s/%s: %w", u.GetNamespace(), u.GetName(), err)
		}
		out = append(out, poolFrom(&ip))
	}
	return out, nil
}

func (h *hooks) PostTranslateModify(ctx context.Context, req *pb.PostTranslateModifyRequest) (*pb.PostTranslateModifyResponse, error) {
	resp, err := h.rw.rewrite(ctx, req)
	if err != nil {
		h.log.Error("translation hook failed", "err", err)
	}
	return resp, err
}

func (h *hooks) PostRouteModify(_ context.Context, req *pb.PostRouteModifyRequest) (*pb.PostRouteModifyResponse, error) {
	return &pb.PostRouteModifyResponse{Route: req.GetRoute()}, nil
}

func (h *hooks) PostVirtualHostModify(_ context.Context, req *pb.PostVirtualHostModifyRequest) (*pb.PostVirtualHostModifyResponse, error) {
	return &pb.PostVirtualHostModifyResponse{VirtualHost: req.GetVirtualHost()}, nil
}

func (h *hooks) PostHTTPListenerModify(_ context.Context, req *pb.PostHTTPListenerModifyRequest) (*pb.PostHTTPListenerModifyResponse, error) {
	return &pb.PostHTTPListenerModifyResponse{Listener: req.GetListener()}, nil
}

func (h *hooks) PostEndpointsModify(_ context.Context, req *pb.PostEndpointsModifyRequest) (*pb.PostEndpointsModifyResponse, error) {
	return &pb.PostEndpointsModifyResponse{LoadAssignment: req.GetLoadAssignment()}, nil
}
