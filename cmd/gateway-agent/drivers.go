package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

type driverOptions struct {
	viciSocket     string
	wireguardMode  string
	wireguardState string
}

func (o *driverOptions) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&o.viciSocket, "vici-socket", "unix:///run/strongswan/charon.vici", "charon's VICI socket (IPsec gateways)")
	f.StringVar(&o.wireguardMode, "wireguard-mode", "auto", "WireGuard device: auto (kernel when available), kernel, userspace (embedded) or external (the pod's wireguard container runs it: see wireguard-device)")
	// The UAPI socket's directory is the pod's emptyDir: it outlives the agent's container.
	f.StringVar(&o.wireguardState, "wireguard-state-file", filepath.Join(wireguard.UAPIDir, nft.WireGuardInterface+".endpoints.json"),
		"where the peers' last endpoints are kept (public data only) so a re-created device reaches roaming sites at once after an agent restart (empty disables)")
}

// lazyDriver creates the protocol's driver when the first configuration says which protocol
// the gateway speaks.
type lazyDriver struct {
	opts driverOptions
	log  logr.Logger
	// lastSeen reads the peers' last endpoints from their status (nil without a cluster)
	lastSeen wireguard.LastSeen

	mu       sync.Mutex
	protocol model.Protocol
	d        agent.Driver
}

func (l *lazyDriver) get(ctx context.Context, m *model.Gateway) (agent.Driver, error) {
	p := m.Protocol
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.d != nil {
		if p != l.protocol {
			return nil, fmt.Errorf("gateway protocol changed from %s to %s; the gateway pod must be recreated", l.protocol, p)
		}
		return l.d, nil
	}
	var err error
	switch p {
	case model.ProtocolIPsec:
		l.d, err = newIPsecDriver(ctx, l.opts, l.log.WithName("strongswan"))
	case model.ProtocolWireGuard:
		// The device carries the name the rendered ruleset matches (nft.WireGuardDevice: wg0
		// in the pod's own namespace, a per-gateway name on the host network), and is adopted
		// only when this gateway's agent created it.
		// In the node's network namespace (host network) nothing ends the device with the pod:
		// the agent removes it when it stops (see agent.Engine.TearDown).
		l.d, err = wireguard.New(ctx, wireguard.Options{InterfaceName: nft.WireGuardDevice(m), Owner: m.Namespace + "/" + m.Name,
			Mode:   wireguard.Mode(l.opts.wireguardMode),
			Logger: l.log.WithName("wireguard"), DeleteOnClose: m.Endpoint.Kind == model.EndpointHostNetwork,
			StateFile: l.opts.wireguardState, LastSeen: l.lastSeen})
	default:
		err = fmt.Errorf("unknown protocol %q", p)
	}
	if err != nil {
		l.d = nil
		return nil, err
	}
	l.protocol = p
	return l.d, nil
}

func (l *lazyDriver) current() agent.Driver {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d
}

func (l *lazyDriver) Apply(ctx context.Context, b *render.Bundle, s agent.Secrets) error {
	d, err := l.get(ctx, b.Model)
	if err != nil {
		return err
	}
	return d.Apply(ctx, b, s)
}

func (l *lazyDriver) Peers(ctx context.Context) (map[string]agent.PeerState, error) {
	if d := l.current(); d != nil {
		return d.Peers(ctx)
	}
	return nil, errors.New("no dataplane yet")
}

func (l *lazyDriver) Changes() <-chan struct{} {
	if d := l.current(); d != nil {
		return d.Changes()
	}
	return nil
}

// NeedsApply: the dataplane lost its configuration (see wireguard.Driver.NeedsApply).
func (l *lazyDriver) NeedsApply() bool {
	r, ok := l.current().(interface{ NeedsApply() bool })
	return ok && r.NeedsApply()
}

func (l *lazyDriver) Close() error {
	if d := l.current(); d != nil {
		return d.Close()
	}
	return nil
}
