package status

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
)

// Legacy tunnel states (IPsecGateway status.tunnels[].state).
const (
	TunnelEstablished = "Established"
	TunnelConnecting  = "Connecting"
	TunnelDown        = "Down"
)

// legacyWritten is what was last written to a legacy gateway's status.
type legacyWritten struct {
	tunnels []ipsecv1.TunnelStatus
	at      time.Time
}

// reportLegacy writes a legacy gateway's tunnels (its translated peers: there are no VPNPeer
// objects) into the IPsecGateway's status.tunnels[] and tunnelsUp, in one write of every
// tunnel (the list is the agent's own under server-side apply): at once when a tunnel's
// state or error changes, otherwise at most once per MinInterval for the counters.
func (w *Writer) reportLegacy(ctx context.Context, b *render.Bundle, snap agent.Snapshot, minInterval time.Duration) error {
	tunnels := LegacyTunnels(b.Model, snap)
	up := 0
	for _, t := range tunnels {
		if t.State == TunnelEstablished {
			up++
		}
	}
	last := w.legacy
	if last != nil && sameStates(last.tunnels, tunnels) {
		if slices.EqualFunc(last.tunnels, tunnels, func(a, b ipsecv1.TunnelStatus) bool { return a.BytesIn == b.BytesIn && a.BytesOut == b.BytesOut }) ||
			snap.Taken.Sub(last.at) < minInterval {
			return nil
		}
	}
	st := &ipsecv1.IPsecGatewayStatus{Tunnels: tunnels, TunnelsUp: fmt.Sprintf("%d/%d", up, len(tunnels))}
	if err := kube.ApplyStatus(ctx, w.Client, ipsecv1.GroupVersion.WithKind(model.KindIPsecGateway), w.Namespace, b.Model.Name, FieldOwner, st); err != nil {
		return err
	}
	w.legacy = &legacyWritten{tunnels: tunnels, at: snap.Taken}
	return nil
}

// LegacyTunnels is the status of each tunnel (peer) of a legacy gateway, by name; a tunnel the
// snapshot does not know (not loaded yet) is Connecting.
func LegacyTunnels(m *model.Gateway, snap agent.Snapshot) []ipsecv1.TunnelStatus {
	out := make([]ipsecv1.TunnelStatus, 0, len(m.Peers))
	for _, p := range m.Peers {
		t := ipsecv1.TunnelStatus{Name: p.Name, State: TunnelConnecting}
		s, ok := snap.Peers[p.Name]
		if ok {
			switch s.State {
			case agent.StateEstablished:
				t.State = TunnelEstablished
			case agent.StateConnecting:
				t.State = TunnelConnecting
			default:
				t.State = TunnelDown
				t.LastError = s.State
				if s.Message != "" {
					t.LastError += ": " + s.Message
				}
			}
			t.BytesIn, t.BytesOut = int64(s.BytesIn), int64(s.BytesOut)
			if !s.EstablishedAt.IsZero() {
				at := metav1.NewTime(s.EstablishedAt.Truncate(time.Second))
				t.EstablishedAt = &at
			}
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b ipsecv1.TunnelStatus) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

func sameStates(a, b []ipsecv1.TunnelStatus) bool {
	return slices.EqualFunc(a, b, func(x, y ipsecv1.TunnelStatus) bool {
		return x.Name == y.Name && x.State == y.State && x.LastError == y.LastError && x.EstablishedAt.Equal(y.EstablishedAt)
	})
}
