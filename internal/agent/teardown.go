package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
)

// TearDown removes what a host-network gateway put into the node's network namespace — its
// ruleset, the startup gate, its address on lo and what OnTearDown removes (the VIP of a
// gateway with a standby) — when the agent stops with the pod. A
// gateway in a pod network namespace has nothing to remove: the namespace ends with the pod.
//
// The tunnels must be gone first, or removing the ruleset would let their traffic through:
// the caller has closed the driver (a host-network WireGuard device is deleted then) and charon,
// in its own container, stops with the pod (its ipsec0 and kernel SAs go). TearDown waits up to
// wait for that; when the tunnels are still there — the agent alone restarting while charon
// runs — everything stays and the ruleset keeps guarding them.
func (e *Engine) TearDown(ctx context.Context, wait time.Duration) error {
	// The model of the ruleset in force: set once the firewall applied it, even when the
	// dataplane then failed (a device that is not the gateway's refused), so a gateway that
	// never came up still takes its ruleset off the node.
	e.mu.Lock()
	m := e.ruled
	e.mu.Unlock()
	if m == nil || m.Endpoint.Kind != model.EndpointHostNetwork {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		gone, err := tunnelsGone(m)
		if err != nil {
			return err
		}
		if gone {
			break
		}
		if time.Now().After(deadline) {
			e.Log.Info("tunnels still up: leaving the ruleset and addresses in place", "waited", wait)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	err := errors.Join(e.Firewall.Remove(ctx), ensureLocalAddress(nil, &model.Gateway{}))
	if e.OnTearDown != nil {
		err = errors.Join(err, e.OnTearDown(ctx))
	}
	if err == nil {
		e.Log.Info("removed the gateway's ruleset and addresses from the node")
	}
	return err
}

// tunnelsGone reports whether no tunnel of the gateway is left in this network namespace: no
// tunnel interface (its WireGuard device; ipsec0 of kernel-libipsec) and, for IPsec, no kernel
// SA of the gateway's (its peers' reqids; another IPsec user's SAs are not its tunnels).
func tunnelsGone(g *model.Gateway) (bool, error) {
	p := g.Protocol
	iface := nft.WireGuardDevice(g)
	if p == model.ProtocolIPsec {
		iface = nft.LibipsecInterface
	}
	link, err := netlink.LinkByName(iface)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil && (link.Type() == "wireguard" || link.Type() == "tuntap" || link.Type() == "tun"):
		return false, nil
	case err == nil:
		// A device of that name that is no tunnel is not the gateway's (the driver refused
		// it): nothing of the gateway's is carrying traffic through it.
	case !errors.As(err, &notFound):
		return false, fmt.Errorf("looking up %s: %w", iface, err)
	}
	if p == model.ProtocolIPsec {
		states, err := netlink.XfrmStateList(netlink.FAMILY_ALL)
		if err != nil {
			return false, fmt.Errorf("listing IPsec SAs: %w", err)
		}
		return !slices.ContainsFunc(states, ownSA(g)), nil
	}
	return true, nil
}

// ownSA tells the gateway's kernel SAs from another IPsec user's (a CNI's encryption) by their
// reqid: every peer of the gateway has its own (model.FirstReqid), and the ruleset matches
// those only, so another user's SAs neither need it nor hold the teardown back. A model without
// reqids (from an operator before them) counts every SA as the gateway's (fail closed).
func ownSA(g *model.Gateway) func(netlink.XfrmState) bool {
	reqids := map[int]bool{}
	for _, p := range g.Peers {
		for _, r := range p.IPsec.Reqids() {
			reqids[int(r)] = true
		}
	}
	return func(s netlink.XfrmState) bool { return len(reqids) == 0 || reqids[s.Reqid] }
}
