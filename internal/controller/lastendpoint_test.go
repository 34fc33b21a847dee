package controller_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/status"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// The agent records where a peer's tunnel last came from in the VPNPeer's status, and a new
// gateway pod reads it back (status.Writer.LastSeen) with the rendered Role's permissions, as
// the gateway's ServiceAccount; a peer of another gateway stays unreadable to it.
func TestAgentRecordsPeersLastEndpoint(t *testing.T) {
	startOperator(t, operatorConfig(), nil)
	ctx := context.Background()
	ns := namespace(t)
	create(t, wireguardGateway(ns, "wg"), wireguardGateway(ns, "other-wg"),
		gen.VPNPeer(ns, "roam", gen.OnGateway("wg"), gen.WireGuardPeer(gen.WireGuardKey("roam"))),
		gen.VPNPeer(ns, "elsewhere", gen.OnGateway("other-wg"), gen.WireGuardPeer(gen.WireGuardKey("elsewhere"))))

	var b *render.Bundle
	eventually(t, 30*time.Second, func() error {
		cm := &corev1.ConfigMap{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: children.ConfigMapName("wg")}, cm); err != nil {
			return err
		}
		var err error
		if b, err = render.FromConfigMapData(cm.Data, render.Options{}); err != nil {
			return err
		}
		if !slices.ContainsFunc(b.Model.Peers, func(p model.Peer) bool { return p.Name == "roam" }) {
			return fmt.Errorf("the gateway's configuration has no peer roam yet")
		}
		return nil
	})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + children.Name("wg")}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w := &status.Writer{Client: c, Namespace: ns}
	ep := netip.MustParseAddrPort("198.51.100.7:41641")
	handshake := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	snap := agent.Snapshot{Taken: time.Now(), Peers: map[string]agent.PeerSnapshot{
		"roam": {PeerState: agent.PeerState{State: agent.StateEstablished, LastHandshake: handshake, Endpoint: ep, BytesIn: 10}},
	}}
	// the Role follows the peers; retried until the operator has granted it
	eventually(t, 30*time.Second, func() error { return w.Report(ctx, b, snap) })

	p := &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "roam"}, p); err != nil {
		t.Fatal(err)
	}
	if p.Status.Tunnel == nil || p.Status.Tunnel.Endpoint != ep.String() {
		t.Fatalf("status.tunnel %+v, want endpoint %s", p.Status.Tunnel, ep)
	}
	got, hs, ok := w.LastSeen(ctx, "roam")
	if !ok || got != ep || !hs.Equal(handshake) {
		t.Errorf("LastSeen(roam) = %v, %v, %v; want %v, %v", got, hs, ok, ep, handshake)
	}
	// another gateway's peer, its endpoint recorded (by that gateway's agent): not for this one
	other := &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "elsewhere"}, other); err != nil {
		t.Fatal(err)
	}
	other.Status.Tunnel = &vpnv1.TunnelStatus{Endpoint: "198.51.100.9:51820"}
	if err := env.Client.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	if got, _, ok := (&status.Writer{Client: env.Client, Namespace: ns}).LastSeen(ctx, "elsewhere"); !ok {
		t.Fatalf("control: the operator's client does not read elsewhere's endpoint (%v)", got)
	}
	if got, _, ok := w.LastSeen(ctx, "elsewhere"); ok {
		t.Errorf("the gateway's agent read another gateway's peer's endpoint: %v", got)
	}
	if got, _, ok := w.LastSeen(ctx, "nobody"); ok {
		t.Errorf("LastSeen of a peer that does not exist: %v", got)
	}
}
