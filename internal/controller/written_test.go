package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

func gatewayAt(rv, serviceCIDR string) *vpnv1.VPNGateway {
	return &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", UID: "u1", ResourceVersion: rv},
		Status:     vpnv1.VPNGatewayStatus{ServiceCIDR: serviceCIDR},
	}
}

// A pass that starts while the cache still shows the object from before the last write
// starts from what was written; any other resourceVersion is the truth again.
func TestWrittenRecall(t *testing.T) {
	var w written[*vpnv1.VPNGateway]
	got, stale := w.recall(gatewayAt("1", ""))
	if got.Status.ServiceCIDR != "" || len(stale) != 1 || stale[0] != "1" {
		t.Fatalf("nothing remembered: got %+v, stale %v", got.Status, stale)
	}
	w.record([]string{"1", "2"}, gatewayAt("2", "100.64.0.0/24")) // finalizer (rv 2), then status

	for _, rv := range []string{"1", "2"} {
		got, stale = w.recall(gatewayAt(rv, ""))
		if got.Status.ServiceCIDR != "100.64.0.0/24" || len(stale) != 2 {
			t.Errorf("cache at %s (before the write): got %+v, stale %v; want the written status", rv, got.Status, stale)
		}
	}
	other := gatewayAt("1", "")
	other.UID = "u2" // deleted and created again under the same name
	if got, _ = w.recall(other); got.Status.ServiceCIDR != "" {
		t.Errorf("another object of the same name got the remembered status")
	}
	if got, _ = w.recall(gatewayAt("3", "100.64.1.0/24")); got.Status.ServiceCIDR != "100.64.1.0/24" {
		t.Errorf("cache past the write: got %+v, want the cached object", got.Status)
	}
	if got, _ = w.recall(gatewayAt("1", "")); got.Status.ServiceCIDR != "" {
		t.Errorf("the entry outlived the cache catching up")
	}
}

func TestNotStatusOnly(t *testing.T) {
	base := gatewayAt("1", "")
	cases := map[string]struct {
		change func(*vpnv1.VPNGateway)
		want   bool
	}{
		"status":               {func(g *vpnv1.VPNGateway) { g.Status.ServiceCIDR = "100.64.0.0/24" }, false},
		"own finalizer added":  {func(g *vpnv1.VPNGateway) { g.Finalizers = []string{FinalizerAddresses} }, false},
		"other finalizer":      {func(g *vpnv1.VPNGateway) { g.Finalizers = []string{"example.com/x"} }, true},
		"generation":           {func(g *vpnv1.VPNGateway) { g.Generation++ }, true},
		"label":                {func(g *vpnv1.VPNGateway) { g.Labels = map[string]string{"a": "b"} }, true},
		"annotation":           {func(g *vpnv1.VPNGateway) { g.Annotations = map[string]string{"a": "b"} }, true},
		"deletion":             {func(g *vpnv1.VPNGateway) { now := metav1.Now(); g.DeletionTimestamp = &now }, true},
		"owner":                {func(g *vpnv1.VPNGateway) { g.OwnerReferences = []metav1.OwnerReference{{Name: "x"}} }, true},
		"resourceVersion only": {func(g *vpnv1.VPNGateway) {}, false},
	}
	for name, c := range cases {
		n := base.DeepCopy()
		n.ResourceVersion = "2"
		c.change(n)
		if got := notStatusOnly.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: n}); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
	withOwn := base.DeepCopy()
	withOwn.Finalizers = []string{FinalizerAddresses}
	if !notStatusOnly.Update(event.UpdateEvent{ObjectOld: withOwn, ObjectNew: base}) {
		t.Errorf("the operator's finalizer removed by someone else is not passed")
	}
}
