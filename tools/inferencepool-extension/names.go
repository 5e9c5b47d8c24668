package main

import (
	"fmt"
	"regexp"
	"strconv"
)

// Names shared by the hooks, the EDS server and the tests. Envoy Gateway names
// what it generates from the HTTPRoute (internal/gatewayapi/helpers.go in
// v1.9.1): a rule's cluster is "httproute/NS/NAME/rule/I", a backendRef's
// setting "httproute/NS/NAME/rule/I/backend/J", and an xDS route
// "httproute/NS/NAME/rule/I/match/K/HOST". We key everything on the rule.
const (
	// The EPP writes the endpoint it picked into this request header
	// (Endpoint Picker Protocol, docs/proposals/004-endpoint-picker-protocol).
	destinationHeader = "x-gateway-destination-endpoint"

	// Metadata namespace on the clusters the Cluster hook tags.
	metadataNamespace = "fms.inferencepool-extension"

	// The stat prefix of Envoy's gRPC client to our EDS server.
	edsStatPrefix = "inferencepool_extension_eds"

	httpConnectionManager = "envoy.filters.network.http_connection_manager"
	routerFilter          = "envoy.filters.http.router"
)

// ruleKey names one rule of one HTTPRoute.
type ruleKey struct {
	Namespace, Name string
	Rule            int
}

func (k ruleKey) String() string { return fmt.Sprintf("%s/%s/%d", k.Namespace, k.Name, k.Rule) }

// The EG prefix, then the rule index, then either the end (the rule's
// cluster) or "/" (a setting's cluster, or a route's match and host).
var egRuleName = regexp.MustCompile(`^httproute/([^/]+)/([^/]+)/rule/(\d+)(?:/|$)`)

// parseRuleKey reads the rule from an EG cluster or route name.
func parseRuleKey(name string) (ruleKey, bool) {
	m := egRuleName.FindStringSubmatch(name)
	if m == nil {
		return ruleKey{}, false
	}
	i, err := strconv.Atoi(m[3])
	if err != nil {
		return ruleKey{}, false
	}
	return ruleKey{Namespace: m[1], Name: m[2], Rule: i}, true
}

// poolClusterName is the ORIGINAL_DST cluster that carries a pool's traffic.
func poolClusterName(p poolRef) string {
	return fmt.Sprintf("inferencepool/%s/%s", p.Namespace, p.Name)
}

// eppClusterName is the cluster of a pool's endpoint picker; its endpoints
// come from our EDS server, so it is keyed by the EPP Service and port.
func eppClusterName(namespace, service string, port uint32) string {
	return fmt.Sprintf("inferencepool-epp/%s/%s/%d", namespace, service, port)
}

// extProcFilterName is the pool's ext_proc filter in an HCM; one per pool,
// so each pool keeps its own EPP and failure mode.
func extProcFilterName(p poolRef) string {
	return fmt.Sprintf("envoy.filters.http.ext_proc/inferencepool/%s/%s", p.Namespace, p.Name)
}
