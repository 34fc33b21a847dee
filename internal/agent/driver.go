// Package agent is the gateway agent's engine: it converges the gateway pod's dataplane to
// the rendered bundle (the nftables ruleset and one protocol driver: strongSwan over VICI, or
// a WireGuard device), and reports each peer's tunnel state. Policy lives in the operator;
// the agent only applies what was rendered.
package agent

import (
	"context"
	"net/netip"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
)

// Secrets gives the data of the Secret keys the bundle references. Values are held in memory
// only: never written to disk, a log line, an event, a status field or a metric.
type Secrets interface {
	Get(ref model.SecretKeyRef) ([]byte, error)
}

// Tunnel states (the Connected condition's reasons).
const (
	StateEstablished      = "Established"
	StateConnecting       = "Connecting"
	StateDown             = "Down"
	StateAuthFailed       = "AuthFailed"
	StateNoProposalChosen = "NoProposalChosen"
	StateMissingSecret    = "MissingSecret"
)

// PeerState is one peer's tunnel as its driver sees it.
type PeerState struct {
	// State is one of the State* constants; Connected is true only for StateEstablished.
	State   string
	Message string
	// EstablishedAt is when the current SA / session came up (zero when down).
	EstablishedAt time.Time
	// LastHandshake (WireGuard).
	LastHandshake time.Time
	// Endpoint is where the peer's tunnel last came from (WireGuard: the device's endpoint of
	// the peer; zero when unknown).
	Endpoint   netip.AddrPort
	BytesIn    uint64
	BytesOut   uint64
	PacketsIn  uint64
	PacketsOut uint64
	// Rekeys counted since the agent started (IPsec).
	Rekeys uint64
	// ChildSAsRefused: CHILD_SAs the peer negotiated beyond its limit, terminated, since the
	// agent started (IPsec).
	ChildSAsRefused uint64
}

// Connected reports whether the tunnel is up.
func (s PeerState) Connected() bool { return s.State == StateEstablished }

// Driver converges one protocol's daemon or device to a bundle.
type Driver interface {
	// Apply converges to the bundle: adds, changes and removes only the peers that differ, so
	// other peers' tunnels are untouched. Idempotent. A peer whose secret is missing is left
	// out and reported as StateMissingSecret by Peers.
	Apply(ctx context.Context, b *render.Bundle, secrets Secrets) error
	// Peers returns the state of every peer of the last applied bundle, by peer name.
	Peers(ctx context.Context) (map[string]PeerState, error)
	// Changes signals (without blocking the driver) when a tunnel's state may have changed.
	Changes() <-chan struct{}
	// Close releases the driver's connections; the dataplane keeps running.
	Close() error
}
