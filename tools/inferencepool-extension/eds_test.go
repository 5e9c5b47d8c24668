package main

import (
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

func slice(svc string, port int32, eps map[string]*bool) discoveryv1.EndpointSlice {
	s := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		Ports:      []discoveryv1.EndpointPort{{Name: ptrTo("grpc"), Port: ptrTo(port)}},
	}
	for ip, ready := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ready}})
	}
	return s
}

func TestEPPEndpointsFollowReadyEndpointSliceAddressesOnTheTargetPort(t *testing.T) {
	pools := []infv1.InferencePool{*testPool(true)}
	// Service port 9002 targets 9003 on the pods: the slice carries 9003.
	svc := eppService(9002)
	slices := []discoveryv1.EndpointSlice{
		slice("epp", 9003, map[string]*bool{"10.0.0.1": ptrTo(true), "10.0.0.2": ptrTo(false), "10.0.0.3": nil}),
		slice("unrelated", 9003, map[string]*bool{"10.0.0.9": ptrTo(true)}),
	}
	got := eppLoadAssignments(pools, []corev1.Service{*svc}, slices)
	cla := got["inferencepool-epp/default/epp/9002"]
	if cla == nil || len(got) != 1 {
		t.Fatalf("load assignments = %v", got)
	}
	var addrs []string
	for _, le := range cla.GetEndpoints() {
		for _, e := range le.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetPortValue() != 9003 {
				t.Fatalf("port %d, want the target port 9003", sa.GetPortValue())
			}
			addrs = append(addrs, sa.GetAddress())
		}
	}
	sort.Strings(addrs)
	if len(addrs) != 2 || addrs[0] != "10.0.0.1" || addrs[1] != "10.0.0.3" {
		t.Fatalf("endpoints = %v, want the ready ones 10.0.0.1 and 10.0.0.3", addrs)
	}
}

func TestEPPWithoutServiceHasAnEmptyAssignment(t *testing.T) {
	got := eppLoadAssignments([]infv1.InferencePool{*testPool(true), *testPool(false)}, nil,
		[]discoveryv1.EndpointSlice{slice("epp", 9003, map[string]*bool{"10.0.0.1": nil})})
	cla, ok := got["inferencepool-epp/default/epp/9002"]
	if !ok || len(got) != 1 || len(cla.GetEndpoints()) != 0 {
		t.Fatalf("want one empty assignment (so Envoy drops stale endpoints), got %v", got)
	}
}
