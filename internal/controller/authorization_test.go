package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// The five authorization outcomes of docs/design.md, on the real API server, including the flip to
// default-deny when a second peer appears and back when it goes.
func TestAuthorizationOutcomesAndTransitions(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "gw")
	a := gen.VPNPeer(ns, "a", gen.RemoteSubnets("10.20.0.0/16"))
	create(t, gw, pskSecret(ns, "a"), a)

	// One peer, no block: DefaultAllow.
	c := waitCondition(t, a, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonDefaultAllow)
	if c.ObservedGeneration != a.Generation {
		t.Errorf("Authorized.observedGeneration = %d, want %d", c.ObservedGeneration, a.Generation)
	}

	// A second peer without a block: both dark, with docs/design.md's exact message.
	b := gen.VPNPeer(ns, "b", gen.RemoteSubnets("10.30.0.0/16"))
	create(t, pskSecret(ns, "b"), b)
	for _, p := range []*vpnv1.VPNPeer{a, b} {
		waitMessage(t, p, vpnv1.ConditionAuthorized, metav1.ConditionFalse, model.ReasonNoGrants,
			"multi-peer gateway (default-deny) and this peer has no authorization block")
	}

	// a names an exposure: Authorized. b has an empty block: NoGrants with the other message.
	patchAuthz(t, a, &vpnv1.Authorization{Exposures: []string{"api"}})
	patchAuthz(t, b, &vpnv1.Authorization{})
	waitCondition(t, a, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
	waitMessage(t, b, vpnv1.ConditionAuthorized, metav1.ConditionFalse, model.ReasonNoGrants,
		"authorization block is present but grants nothing")

	// b names an exposure the gateway does not have: UnknownGrant, naming it.
	patchAuthz(t, b, &vpnv1.Authorization{Exposures: []string{"api", "nope"}})
	c = waitCondition(t, b, vpnv1.ConditionAuthorized, metav1.ConditionFalse, model.ReasonUnknownGrant)
	if !strings.Contains(c.Message, "nope") {
		t.Errorf("UnknownGrant message %q does not name the unknown exposure", c.Message)
	}
	// ... and the rendered model grants b nothing at all (no partial grant).
	eventually(t, 10*time.Second, func() error {
		m, err := renderedModel(ctx, ns, "gw")
		if err != nil {
			return err
		}
		return expectGrants(m, map[string][]string{"a": {"api"}, "b": nil})
	})

	// b goes away: a keeps its explicit block (Authorized), the gateway is single-peer again.
	if err := env.Client.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, a, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
	// Removing a's block on a single-peer gateway returns it to DefaultAllow.
	patchAuthz(t, a, nil)
	waitCondition(t, a, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonDefaultAllow)
	eventually(t, 10*time.Second, func() error {
		m, err := renderedModel(ctx, ns, "gw")
		if err != nil {
			return err
		}
		return expectGrants(m, map[string][]string{"a": {"api", "db", "erp"}})
	})
}

func TestProtocolMismatchAndMissingGateway(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ns := namespace(t)
	gw := ipsecGateway(ns, "gw")
	wg := gen.VPNPeer(ns, "wg", gen.WireGuardPeer(testWGKey), gen.RemoteSubnets("10.40.0.0/16"))
	orphan := gen.VPNPeer(ns, "orphan", gen.OnGateway("missing"), gen.RemoteSubnets("10.20.0.0/16"))
	create(t, gw, wg, pskSecret(ns, "orphan"), orphan)
	c := waitCondition(t, wg, vpnv1.ConditionAuthorized, metav1.ConditionFalse, model.ReasonProtocolMismatch)
	if !strings.Contains(c.Message, "wireguard") || !strings.Contains(c.Message, "ipsec") {
		t.Errorf("ProtocolMismatch message %q should name both protocols", c.Message)
	}
	waitCondition(t, orphan, vpnv1.ConditionAuthorized, metav1.ConditionFalse, model.ReasonGatewayNotFound)
	// The orphan's gateway appears: it is re-evaluated.
	create(t, ipsecGateway(ns, "missing"))
	waitCondition(t, orphan, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonDefaultAllow)
}

// A reverse exposure granted to a second, disjoint peer: the gateway says so naming both, the
// second peer is dark, and nothing is rendered for its grant.
func TestReverseExposureSecondGrantee(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	gw := ipsecGateway(ns, "gw")
	a := gen.VPNPeer(ns, "owner", gen.RemoteSubnets("10.20.0.0/16"), gen.ReverseGrants("erp"))
	b := gen.VPNPeer(ns, "intruder", gen.RemoteSubnets("10.30.0.0/16"), gen.Grants("api"), gen.ReverseGrants("erp"))
	create(t, gw, pskSecret(ns, "owner"), pskSecret(ns, "intruder"), a, b)

	waitCondition(t, a, vpnv1.ConditionAuthorized, metav1.ConditionTrue, model.ReasonAuthorized)
	waitCondition(t, b, vpnv1.ConditionAuthorized, metav1.ConditionFalse, model.ReasonReverseExposureOutsideSubnets)
	c := waitCondition(t, gw, controller.ConditionGrantsValid, metav1.ConditionFalse, model.ReasonReverseExposureConflict)
	for _, want := range []string{"erp", "owner", "intruder"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("gateway condition %q does not name %q", c.Message, want)
		}
	}
	waitCondition(t, gw, vpnv1.ConditionReady, metav1.ConditionFalse, model.ReasonReverseExposureConflict)
	m, err := renderedModel(ctx, ns, "gw")
	if err != nil {
		t.Fatal(err)
	}
	if err := expectGrants(m, map[string][]string{"owner": {"erp"}, "intruder": nil}); err != nil {
		t.Error(err)
	}
	for _, r := range m.ReverseExposures {
		if r.Name == "erp" && r.Grantee != "owner" {
			t.Errorf("reverse exposure erp rendered for %q, want only owner", r.Grantee)
		}
	}
}

func patchAuthz(t testing.TB, p *vpnv1.VPNPeer, authz *vpnv1.Authorization) {
	t.Helper()
	ctx := context.Background()
	cur := &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
		t.Fatal(err)
	}
	base := cur.DeepCopy()
	cur.Spec.Authorization = authz
	if err := env.Client.Patch(ctx, cur, client.MergeFrom(base)); err != nil {
		t.Fatalf("patching %s authorization: %v", p.Name, err)
	}
	if authz == nil { // a merge patch from a non-nil block to nil sends null: check it took
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil || cur.Spec.Authorization != nil {
			t.Fatalf("authorization of %s not removed: %v %+v", p.Name, err, cur.Spec.Authorization)
		}
	}
}

// renderedModel reads the model the operator rendered into the gateway's ConfigMap.
func renderedModel(ctx context.Context, ns, gw string) (*model.Gateway, error) {
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapName(gw)}, cm); err != nil {
		return nil, err
	}
	m := &model.Gateway{}
	return m, json.Unmarshal([]byte(cm.Data[children.ModelKey]), m)
}

// expectGrants checks every listed peer's rendered exposure grants (forward and reverse).
func expectGrants(m *model.Gateway, want map[string][]string) error {
	got := map[string][]string{}
	for _, p := range m.Peers {
		got[p.Name] = append(append([]string(nil), p.Exposures...), p.ReverseExposures...)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			return fmt.Errorf("peer %s missing from the rendered model", name)
		}
		if strings.Join(g, ",") != strings.Join(w, ",") {
			return fmt.Errorf("peer %s rendered grants %v, want %v", name, g, w)
		}
	}
	return nil
}
