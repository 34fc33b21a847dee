// Package status writes each VPNPeer's tunnel state (the Connected condition and the tunnel
// counters) — or, for a legacy IPsecGateway, its status.tunnels[] and tunnelsUp — with the
// agent's own server-side-apply field manager, so the operator's Authorized
// condition is never touched. Writes happen when a state changes, and otherwise at most once
// per MinInterval per peer, so counters do not turn into a stream of API writes.
package status

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
)

// FieldOwner is the agent's field manager.
const FieldOwner = "bnerd-vpn-gateway-agent"

// Writer reports snapshots to the VPNPeers' status.
type Writer struct {
	Client    client.Client
	Namespace string
	// MinInterval between two writes of a peer whose state did not change (default 15 s).
	MinInterval time.Duration

	mu      sync.Mutex
	written map[string]written
	// legacy: what was last written to a legacy IPsecGateway's status.
	legacy *legacyWritten
}

type written struct {
	state, message string
	gen            int64
	counters       [5]uint64
	endpoint       netip.AddrPort
	at             time.Time
	since          metav1.Time
}

// Report writes what changed.
func (w *Writer) Report(ctx context.Context, b *render.Bundle, snap agent.Snapshot) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written = map[string]written{}
	}
	minInterval := w.MinInterval
	if minInterval == 0 {
		minInterval = 15 * time.Second
	}
	if b.Model.Kind == model.KindIPsecGateway {
		// A legacy gateway's peers are its tunnels: no VPNPeer objects to write.
		return w.reportLegacy(ctx, b, snap, minInterval)
	}
	var errs []error
	for _, p := range b.Model.Peers {
		s, ok := snap.Peers[p.Name]
		if !ok {
			continue
		}
		last, seen := w.written[p.Name]
		counters := [5]uint64{s.BytesIn, s.BytesOut, s.PacketsIn, s.PacketsOut, s.Rekeys}
		changed := !seen || last.state != s.State || last.message != s.Message || last.gen != p.Generation || last.endpoint != s.Endpoint
		if !changed && (counters == last.counters || snap.Taken.Sub(last.at) < minInterval) {
			continue
		}
		since := last.since
		if !seen || last.state != s.State {
			since = metav1.NewTime(snap.Taken.Truncate(time.Second))
		}
		if err := w.write(ctx, p.Name, p.Generation, s, since); err != nil {
			errs = append(errs, err)
			continue
		}
		w.written[p.Name] = written{state: s.State, message: s.Message, gen: p.Generation, counters: counters, endpoint: s.Endpoint, at: snap.Taken, since: since}
	}
	return errors.Join(errs...)
}

func (w *Writer) write(ctx context.Context, peer string, gen int64, s agent.PeerSnapshot, since metav1.Time) error {
	cond := metav1.Condition{
		Type: vpnv1.ConditionConnected, Status: metav1.ConditionFalse, Reason: s.State,
		Message: s.Message, ObservedGeneration: gen, LastTransitionTime: since,
	}
	if s.Connected() {
		cond.Status = metav1.ConditionTrue
	}
	if cond.Message == "" {
		cond.Message = "tunnel " + s.State
	}
	tunnel := &vpnv1.TunnelStatus{
		BytesIn: int64(s.BytesIn), BytesOut: int64(s.BytesOut),
		PacketsIn: int64(s.PacketsIn), PacketsOut: int64(s.PacketsOut), Rekeys: int64(s.Rekeys),
	}
	if !s.EstablishedAt.IsZero() {
		t := metav1.NewTime(s.EstablishedAt.Truncate(time.Second))
		tunnel.EstablishedAt = &t
	}
	if !s.LastHandshake.IsZero() {
		t := metav1.NewTime(s.LastHandshake.Truncate(time.Second))
		tunnel.LastHandshake = &t
	}
	if s.Endpoint.IsValid() {
		tunnel.Endpoint = s.Endpoint.String()
	}
	st := &vpnv1.VPNPeerStatus{Conditions: []metav1.Condition{cond}}
	if *tunnel != (vpnv1.TunnelStatus{}) {
		st.Tunnel = tunnel // no tunnel, no tunnel status (an empty object would be sent as null)
	}
	return kube.ApplyStatus(ctx, w.Client, vpnv1.GroupVersion.WithKind("VPNPeer"), w.Namespace, peer, FieldOwner, st)
}

// LastSeen reads where a peer's tunnel last came from, and its last handshake, from the
// VPNPeer's status (what this agent or its predecessor wrote there): how a gateway pod that
// starts afresh reaches its roaming peers at once. Unknown (ok false) when the API server does
// not answer before ctx ends or the status holds no valid endpoint.
func (w *Writer) LastSeen(ctx context.Context, peer string) (netip.AddrPort, time.Time, bool) {
	var p vpnv1.VPNPeer
	if err := w.Client.Get(ctx, client.ObjectKey{Namespace: w.Namespace, Name: peer}, &p); err != nil || p.Status.Tunnel == nil {
		return netip.AddrPort{}, time.Time{}, false
	}
	ep, err := netip.ParseAddrPort(p.Status.Tunnel.Endpoint)
	if err != nil {
		return netip.AddrPort{}, time.Time{}, false
	}
	var hs time.Time
	if p.Status.Tunnel.LastHandshake != nil {
		hs = p.Status.Tunnel.LastHandshake.Time
	}
	return ep, hs, true
}
