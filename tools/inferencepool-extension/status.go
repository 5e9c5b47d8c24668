package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// statusWriter keeps InferencePool status.parents: one entry per Gateway of
// ours that an HTTPRoute attaches the pool to, with Accepted and
// ResolvedRefs (reasons from the v1 API). Entries of other controllers stay
// untouched (the Inference Extension's shared ownership model).
type statusWriter struct {
	c client.Client
	// controllerName is Envoy Gateway's GatewayClass controllerName: the
	// Gateways we act for, and the name our entries carry.
	controllerName string
}

const maxParents = 32 // the CRD's limit on status.parents

func (s *statusWriter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var ip infv1.InferencePool
	if err := s.c.Get(ctx, req.NamespacedName, &ip); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ours, err := s.parents(ctx, &ip)
	if err != nil {
		return reconcile.Result{}, err
	}
	merged := mergeParents(ip.Status.Parents, ours, s.controllerName)
	if equality.Semantic.DeepEqual(merged, ip.Status.Parents) {
		return reconcile.Result{}, nil
	}
	ip.Status.Parents = merged
	// A conflict (someone else wrote status meanwhile) returns an error, and
	// the controller retries with a fresh read.
	return reconcile.Result{}, s.c.Status().Update(ctx, &ip)
}

// gatewayKey is a Gateway: namespace/name.
type gatewayKey struct{ Namespace, Name string }

// parents computes our entries for the pool, with the old conditions as the
// base so unchanged conditions keep their lastTransitionTime.
func (s *statusWriter) parents(ctx context.Context, ip *infv1.InferencePool) ([]infv1.ParentStatus, error) {
	var routes gwv1.HTTPRouteList
	if err := s.c.List(ctx, &routes); err != nil {
		return nil, err
	}
	accepted := map[gatewayKey][]string{} // gateway -> routes it accepted
	attached := map[gatewayKey][]string{} // gateway -> routes attaching the pool
	for i := range routes.Items {
		hr := &routes.Items[i]
		if !referencesPool(hr, ip) {
			continue
		}
		for _, pr := range hr.Spec.ParentRefs {
			gw, ok, err := s.ourGateway(ctx, hr.Namespace, pr)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			name := hr.Namespace + "/" + hr.Name
			attached[gw] = append(attached[gw], name)
			if s.routeAccepted(hr, gw) {
				accepted[gw] = append(accepted[gw], name)
			}
		}
	}
	resolved, resolvedMsg, err := s.eppResolved(ctx, ip)
	if err != nil {
		return nil, err
	}

	old := map[gatewayKey][]metav1.Condition{}
	for _, p := range ip.Status.Parents {
		old[parentKey(p.ParentRef, ip.Namespace)] = p.Conditions
	}
	var out []infv1.ParentStatus
	for gw, routes := range attached {
		conds := append([]metav1.Condition(nil), old[gw]...)
		set := func(t infv1.InferencePoolConditionType, ok bool, reason infv1.InferencePoolReason, msg string) {
			st := metav1.ConditionFalse
			if ok {
				st = metav1.ConditionTrue
			}
			meta.SetStatusCondition(&conds, metav1.Condition{
				Type: string(t), Status: st, Reason: string(reason), Message: msg, ObservedGeneration: ip.Generation,
			})
		}
		switch {
		case ip.Spec.EndpointPickerRef == nil:
			set(infv1.InferencePoolConditionAccepted, false, infv1.InferencePoolReasonEndpointPickerRefMissing,
				"this gateway routes InferencePools only through their endpoint picker; set spec.endpointPickerRef")
		case len(accepted[gw]) > 0:
			set(infv1.InferencePoolConditionAccepted, true, infv1.InferencePoolReasonAccepted,
				"accepted through HTTPRoute "+strings.Join(sorted(accepted[gw]), ", "))
		default:
			set(infv1.InferencePoolConditionAccepted, false, infv1.InferencePoolReasonHTTPRouteNotAccepted,
				"no HTTPRoute attaching it is accepted by the Gateway: "+strings.Join(sorted(routes), ", "))
		}
		if resolved {
			set(infv1.InferencePoolConditionResolvedRefs, true, infv1.InferencePoolReasonResolvedRefs, resolvedMsg)
		} else {
			set(infv1.InferencePoolConditionResolvedRefs, false, infv1.InferencePoolReasonInvalidExtensionRef, resolvedMsg)
		}
		group := infv1.Group(gwv1.GroupName)
		out = append(out, infv1.ParentStatus{
			ParentRef:      infv1.ParentReference{Group: &group, Kind: "Gateway", Namespace: infv1.Namespace(gw.Namespace), Name: infv1.ObjectName(gw.Name)},
			ControllerName: infv1.ControllerName(s.controllerName),
			Conditions:     conds,
		})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].ParentRef, out[j].ParentRef
		return a.Namespace < b.Namespace || (a.Namespace == b.Namespace && a.Name < b.Name)
	})
	return out, nil
}

// mergeParents keeps other controllers' entries and replaces ours. An entry
// without a controllerName for one of our Gateways is taken over: it can
// only be a stale write (ours, or a stand-in's) for a parent we now own.
func mergeParents(have, ours []infv1.ParentStatus, controllerName string) []infv1.ParentStatus {
	mine := map[gatewayKey]bool{}
	for _, p := range ours {
		mine[parentKey(p.ParentRef, "")] = true
	}
	var out []infv1.ParentStatus
	for _, p := range have {
		switch {
		case string(p.ControllerName) == controllerName:
		case p.ControllerName == "" && mine[parentKey(p.ParentRef, "")]:
		default:
			out = append(out, p)
		}
	}
	out = append(out, ours...)
	if len(out) > maxParents {
		out = out[:maxParents]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func parentKey(r infv1.ParentReference, defaultNS string) gatewayKey {
	ns := string(r.Namespace)
	if ns == "" {
		ns = defaultNS
	}
	return gatewayKey{Namespace: ns, Name: string(r.Name)}
}

func referencesPool(hr *gwv1.HTTPRoute, ip *infv1.InferencePool) bool {
	for _, rule := range hr.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if !isPoolRef(b.BackendObjectReference) || string(b.Name) != ip.Name {
				continue
			}
			ns := hr.Namespace
			if b.Namespace != nil {
				ns = string(*b.Namespace)
			}
			if ns == ip.Namespace {
				return true
			}
		}
	}
	return false
}

// ourGateway resolves a parentRef to a Gateway whose class is ours.
func (s *statusWriter) ourGateway(ctx context.Context, routeNS string, pr gwv1.ParentReference) (gatewayKey, bool, error) {
	if (pr.Group != nil && string(*pr.Group) != gwv1.GroupName) || (pr.Kind != nil && *pr.Kind != "Gateway") {
		return gatewayKey{}, false, nil
	}
	gw := gatewayKey{Namespace: routeNS, Name: string(pr.Name)}
	if pr.Namespace != nil {
		gw.Namespace = string(*pr.Namespace)
	}
	var g gwv1.Gateway
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: gw.Namespace, Name: gw.Name}, &g); err != nil {
		return gw, false, client.IgnoreNotFound(err)
	}
	var gc gwv1.GatewayClass
	if err := s.c.Get(ctx, client.ObjectKey{Name: string(g.Spec.GatewayClassName)}, &gc); err != nil {
		return gw, false, client.IgnoreNotFound(err)
	}
	return gw, string(gc.Spec.ControllerName) == s.controllerName, nil
}

// routeAccepted: Envoy Gateway's status on the route says Accepted=True for gw.
func (s *statusWriter) routeAccepted(hr *gwv1.HTTPRoute, gw gatewayKey) bool {
	for _, p := range hr.Status.Parents {
		ns := hr.Namespace
		if p.ParentRef.Namespace != nil {
			ns = string(*p.ParentRef.Namespace)
		}
		if string(p.ControllerName) != s.controllerName || ns != gw.Namespace || string(p.ParentRef.Name) != gw.Name {
			continue
		}
		if meta.IsStatusConditionTrue(p.Conditions, string(gwv1.RouteConditionAccepted)) {
			return true
		}
	}
	return false
}

// eppResolved: the endpointPickerRef names a Service of the pool's namespace
// that has the port.
func (s *statusWriter) eppResolved(ctx context.Context, ip *infv1.InferencePool) (bool, string, error) {
	if problem := eppProblem(ip); problem != "" {
		return false, problem, nil
	}
	ref := ip.Spec.EndpointPickerRef
	var svc corev1.Service
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: ip.Namespace, Name: string(ref.Name)}, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("endpoint picker Service %s/%s not found", ip.Namespace, ref.Name), nil
		}
		return false, "", err
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return false, "ExternalName Services are not supported as endpoint pickers", nil
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == int32(ref.Port.Number) {
			return true, fmt.Sprintf("endpoint picker Service %s/%s port %d", ip.Namespace, ref.Name, p.Port), nil
		}
	}
	return false, fmt.Sprintf("endpoint picker Service %s/%s has no port %d", ip.Namespace, ref.Name, ref.Port.Number), nil
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
