package main

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// poolRef names an InferencePool.
type poolRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// pool is what the rewrite needs of an InferencePool: where its EPP is and
// how to talk to its model servers. It travels from the Cluster hook to the
// Translation hook in cluster metadata, so the rewrite uses the pool exactly
// as Envoy Gateway saw it during this translation.
type pool struct {
	poolRef
	// EPPService and EPPPort: the Service (in the pool's namespace) and its
	// port. Empty when the pool has no usable endpointPickerRef; such a pool
	// gets no rewrite (its status says why).
	EPPService string `json:"eppService,omitempty"`
	EPPPort    uint32 `json:"eppPort,omitempty"`
	// FailOpen maps the EPP's failureMode to ext_proc's failure_mode_allow.
	FailOpen bool `json:"failOpen,omitempty"`
	// H2C: the model servers speak HTTP/2 cleartext (appProtocol kubernetes.io/h2c).
	H2C bool `json:"h2c,omitempty"`
}

func (p pool) routable() bool { return p.EPPService != "" && p.EPPPort != 0 }

// eppProblem says why a pool's endpointPickerRef can't be used, or "".
func eppProblem(ip *infv1.InferencePool) string {
	ref := ip.Spec.EndpointPickerRef
	switch {
	case ref == nil:
		return "spec.endpointPickerRef is not set"
	case ref.Group != nil && *ref.Group != "":
		return fmt.Sprintf("endpointPickerRef group %q is not supported (only core Services)", *ref.Group)
	case ref.Kind != "" && ref.Kind != "Service":
		return fmt.Sprintf("endpointPickerRef kind %q is not supported (only Service)", ref.Kind)
	case ref.Name == "":
		return "endpointPickerRef.name is empty"
	case ref.Port == nil || ref.Port.Number <= 0:
		return "endpointPickerRef.port is required for a Service"
	}
	return ""
}

func poolFrom(ip *infv1.InferencePool) pool {
	p := pool{
		poolRef: poolRef{Namespace: ip.Namespace, Name: ip.Name},
		H2C:     ip.Spec.AppProtocol == infv1.AppProtocolH2C,
	}
	if eppProblem(ip) == "" {
		ref := ip.Spec.EndpointPickerRef
		p.EPPService = string(ref.Name)
		p.EPPPort = uint32(ref.Port.Number)
		// The API defaults failureMode to FailClose; only FailOpen opens.
		p.FailOpen = ref.FailureMode == infv1.EndpointPickerFailOpen
	}
	return p
}

// poolsToStruct and poolsFromStruct carry pools in cluster metadata.
func poolsToStruct(pools []pool) (*structpb.Struct, error) {
	raw, err := json.Marshal(map[string]any{"pools": pools})
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	return s, s.UnmarshalJSON(raw)
}

func poolsFromStruct(s *structpb.Struct) ([]pool, error) {
	if s == nil {
		return nil, nil
	}
	raw, err := s.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var v struct {
		Pools []pool `json:"pools"`
	}
	return v.Pools, json.Unmarshal(raw, &v)
}
