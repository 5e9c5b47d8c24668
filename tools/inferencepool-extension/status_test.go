package main

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const egController = "gateway.envoyproxy.io/gatewayclass-controller"

func ptrTo[T any](v T) *T { return &v }

// statusWorld: Gateway "gw" of Envoy Gateway's class, Gateway "foreign" of
// another class, an HTTPRoute "r" attaching pool "p" to both, the EPP Service.
func statusWorld(routeAccepted bool, pool *infv1.InferencePool, extra ...client.Object) client.Client {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = gwv1.Install(s)
	_ = infv1.Install(s)
	acc := metav1.ConditionFalse
	if routeAccepted {
		acc = metav1.ConditionTrue
	}
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "r"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}, {Name: "foreign"}}},
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
				Group: ptrTo(gwv1.Group("inference.networking.k8s.io")), Kind: ptrTo(gwv1.Kind("InferencePool")), Name: "p",
			}}}}}},
		},
		Status: gwv1.HTTPRouteStatus{RouteStatus: gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{{
			ParentRef: gwv1.ParentReference{Name: "gw"}, ControllerName: egController,
			Conditions: []metav1.Condition{{Type: "Accepted", Status: acc, Reason: "Accepted", LastTransitionTime: metav1.Now()}},
		}}}},
	}
	objs := []client.Object{
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "eg"}, Spec: gwv1.GatewayClassSpec{ControllerName: egController}},
		&gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: gwv1.GatewayClassSpec{ControllerName: "example.com/other"}},
		&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gw"}, Spec: gwv1.GatewaySpec{GatewayClassName: "eg"}},
		&gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "foreign"}, Spec: gwv1.GatewaySpec{GatewayClassName: "other"}},
		route, pool,
	}
	return fake.NewClientBuilder().WithScheme(s).WithObjects(append(objs, extra...)...).
		WithStatusSubresource(&infv1.InferencePool{}).Build()
}

func testPool(epp bool) *infv1.InferencePool {
	p := &infv1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", Generation: 3},
		Spec: infv1.InferencePoolSpec{
			Selector:    infv1.LabelSelector{MatchLabels: map[infv1.LabelKey]infv1.LabelValue{"app": "m"}},
			TargetPorts: []infv1.Port{{Number: 8000}},
		},
		Status: infv1.InferencePoolStatus{Parents: []infv1.ParentStatus{
			{ParentRef: infv1.ParentReference{Name: "theirs"}, ControllerName: "example.com/other",
				Conditions: []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted", LastTransitionTime: metav1.Now()}}},
			{ParentRef: infv1.ParentReference{Name: "gone"}, ControllerName: egController}, // ours, route detached since
		}},
	}
	if epp {
		p.Spec.EndpointPickerRef = &infv1.EndpointPickerRef{Kind: "Service", Name: "epp", Port: &infv1.Port{Number: 9002}}
	}
	return p
}

func eppService(port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "epp"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc", Port: port}}},
	}
}

func reconcileStatus(t *testing.T, c client.Client) []infv1.ParentStatus {
	t.Helper()
	sw := &statusWriter{c: c, controllerName: egController}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "p"}}
	if _, err := sw.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var got infv1.InferencePool
	if err := c.Get(context.Background(), req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	return got.Status.Parents
}

// ourEntry returns our entry for Gateway default/gw, failing on any other of ours.
func ourEntry(t *testing.T, parents []infv1.ParentStatus) infv1.ParentStatus {
	t.Helper()
	var mine []infv1.ParentStatus
	theirs := 0
	for _, p := range parents {
		switch p.ControllerName {
		case egController:
			mine = append(mine, p)
		case "example.com/other":
			theirs++
		}
	}
	if theirs != 1 {
		t.Fatalf("another controller's entry was not kept: %+v", parents)
	}
	if len(mine) != 1 || mine[0].ParentRef.Name != "gw" || mine[0].ParentRef.Namespace != "default" || mine[0].ParentRef.Kind != "Gateway" {
		t.Fatalf("want exactly our entry for default/gw (not the foreign class's Gateway, not the stale one): %+v", mine)
	}
	return mine[0]
}

func wantCondition(t *testing.T, p infv1.ParentStatus, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(p.Conditions, typ)
	if c == nil || c.Status != status || c.Reason != reason || c.ObservedGeneration != 3 {
		t.Fatalf("%s = %+v, want %s/%s at generation 3", typ, c, status, reason)
	}
}

func TestStatusAcceptedAndResolved(t *testing.T) {
	p := ourEntry(t, reconcileStatus(t, statusWorld(true, testPool(true), eppService(9002))))
	wantCondition(t, p, "Accepted", metav1.ConditionTrue, "Accepted")
	wantCondition(t, p, "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs")
}

func TestStatusRouteNotAcceptedAndEPPPortMissing(t *testing.T) {
	p := ourEntry(t, reconcileStatus(t, statusWorld(false, testPool(true), eppService(9999))))
	wantCondition(t, p, "Accepted", metav1.ConditionFalse, "HTTPRouteNotAccepted")
	wantCondition(t, p, "ResolvedRefs", metav1.ConditionFalse, "InvalidExtensionRef")
}

func TestStatusEPPServiceMissing(t *testing.T) {
	p := ourEntry(t, reconcileStatus(t, statusWorld(true, testPool(true))))
	wantCondition(t, p, "ResolvedRefs", metav1.ConditionFalse, "InvalidExtensionRef")
}

func TestStatusWithoutEndpointPickerRef(t *testing.T) {
	p := ourEntry(t, reconcileStatus(t, statusWorld(true, testPool(false))))
	wantCondition(t, p, "Accepted", metav1.ConditionFalse, "EndpointPickerRefMissing")
	wantCondition(t, p, "ResolvedRefs", metav1.ConditionFalse, "InvalidExtensionRef")
}

func TestStatusIsStableAcrossReconciles(t *testing.T) {
	c := statusWorld(true, testPool(true), eppService(9002))
	first := ourEntry(t, reconcileStatus(t, c))
	second := ourEntry(t, reconcileStatus(t, c))
	a, b := meta.FindStatusCondition(first.Conditions, "Accepted"), meta.FindStatusCondition(second.Conditions, "Accepted")
	if !a.LastTransitionTime.Equal(&b.LastTransitionTime) {
		t.Fatal("an unchanged condition moved its lastTransitionTime")
	}
}
