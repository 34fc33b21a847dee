package wireguard

import (
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// desiredDevice is the configuration Apply converges the device to: the interface's settings
// and the bundle's peers, their keys read and their endpoints resolved.
type desiredDevice struct {
	// priv is the device's private key (Apply clears it when it returns).
	priv         *wgtypes.Key
	listenPort   int
	firewallMark int
	// peers are the bundle's peers in its order, those left out (missing) included.
	peers []desiredPeer
	// wanted are the peers to configure, by public key.
	wanted map[wgtypes.Key]*wantedPeer
}

// wantedPeer is a peer to configure on the device.
type wantedPeer struct {
	// hash is the salted hash of the configuration (Driver.peerHash).
	hash    [32]byte
	nets    []netip.Prefix // allowed IPs
	allowed []net.IPNet    // the same, for wgtypes
	ep      *net.UDPAddr   // nil: none configured (or it did not resolve)
	alive   time.Duration  // persistent keepalive; 0: off
	psk     *wgtypes.Key   // nil: none
}

// routes are the allowed IPs of the peers to configure, in the bundle's order.
func (want *desiredDevice) routes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range want.peers {
		if w, ok := want.wanted[p.key]; ok {
			out = append(out, w.nets...)
		}
	}
	return out
}

// wipe clears the pre-shared keys.
func (want *desiredDevice) wipe() {
	for _, w := range want.wanted {
		if w.psk != nil {
			clear(w.psk[:])
		}
	}
}

// devicePlan is what Apply changes on the device (planDevice).
type devicePlan struct {
	// config holds the device settings that differ and the peers to add, change (their whole
	// configuration) or remove.
	config wgtypes.Config
	// changed are the peers config adds or changes, in the bundle's order; removed the peers
	// it removes, in the device's order.
	changed, removed []wgtypes.Key
	// adopted are configured peers the driver has no hash for that the device already has as
	// desired (the agent restarted next to a kernel device, or an earlier configuration
	// failed): their hashes, nothing to change.
	adopted map[wgtypes.Key][32]byte
	// forget are the hashes of peers no longer wanted.
	forget []wgtypes.Key
	// initiate are new peers that may still hold a session with a previous device: the
	// gateway sends them a handshake at once.
	initiate []wgtypes.Key
	// restored counts the new peers given the endpoint the previous device last saw.
	restored int
}

// configures reports whether the plan changes the device's configuration at all.
func (p *devicePlan) configures() bool {
	c := p.config
	return c.PrivateKey != nil || c.ListenPort != nil || c.FirewallMark != nil || len(c.Peers) > 0
}

// planDevice decides what to change on the device (dev, as wgctrl reads it) for it to have the
// desired configuration, given the hashes of the peers the driver configured (applied) and the
// endpoint memory (restore: a new peer's endpoint the previous device last saw, and whether
// its session may still be alive). Only what differs is changed: a peer whose hash is
// unchanged is not touched, one the driver has no hash for is compared with the device and
// adopted when it matches (matches), and a device peer not wanted is removed.
func planDevice(want *desiredDevice, dev *wgtypes.Device, applied map[wgtypes.Key][32]byte,
	restore func(peer wgtypes.Key) (*net.UDPAddr, bool)) devicePlan {
	var plan devicePlan
	if dev.PublicKey != want.priv.PublicKey() {
		plan.config.PrivateKey = want.priv
	}
	if dev.ListenPort != want.listenPort {
		port := want.listenPort
		plan.config.ListenPort = &port
	}
	if dev.FirewallMark != want.firewallMark {
		mark := want.firewallMark
		plan.config.FirewallMark = &mark
	}

	onDevice := make(map[wgtypes.Key]wgtypes.Peer, len(dev.Peers))
	for _, p := range dev.Peers {
		onDevice[p.PublicKey] = p
	}
	for _, p := range want.peers {
		w, ok := want.wanted[p.key]
		if !ok {
			continue
		}
		key := p.key
		cur, present := onDevice[key]
		h, known := applied[key]
		if present && known && h == w.hash {
			continue
		}
		if present && !known && matches(cur, w.nets, w.ep, w.alive, w.psk) {
			if plan.adopted == nil {
				plan.adopted = map[wgtypes.Key][32]byte{}
			}
			plan.adopted[key] = w.hash
			continue
		}
		pc := w.config(key)
		if !present { // nothing to clear on a new peer
			if w.psk == nil {
				pc.PresharedKey = nil
			}
			if w.alive == 0 {
				pc.PersistentKeepaliveInterval = nil
			}
			// On a device this driver created, a peer the previous device knew gets the
			// endpoint that device last saw (unless one is configured), and when it may still
			// hold a session with the previous device, a handshake at once: it would keep
			// sending on that session, which nobody can decrypt any more, for 15 s.
			ep, live := restore(key)
			if ep != nil && w.ep == nil {
				pc.Endpoint = ep
				plan.restored++
			}
			if live {
				plan.initiate = append(plan.initiate, key)
			}
		}
		plan.config.Peers = append(plan.config.Peers, pc)
		plan.changed = append(plan.changed, key)
	}
	for _, p := range dev.Peers {
		if _, keep := want.wanted[p.PublicKey]; !keep {
			plan.config.Peers = append(plan.config.Peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
			plan.removed = append(plan.removed, p.PublicKey)
		}
	}
	for key := range applied {
		if _, keep := want.wanted[key]; !keep {
			plan.forget = append(plan.forget, key)
		}
	}
	return plan
}

// config is the peer's whole configuration, as for a peer the device has: it clears a
// pre-shared key when none is wanted and replaces the allowed IPs.
func (w *wantedPeer) config(key wgtypes.Key) wgtypes.PeerConfig {
	keepalive := w.alive
	zero := wgtypes.Key{}
	pc := wgtypes.PeerConfig{
		PublicKey:                   key,
		PresharedKey:                &zero, // clears a previous one
		Endpoint:                    w.ep,
		PersistentKeepaliveInterval: &keepalive,
		ReplaceAllowedIPs:           true,
		AllowedIPs:                  w.allowed,
	}
	if w.psk != nil {
		pc.PresharedKey = w.psk
	}
	return pc
}

// linkPlan is what convergeLink changes on the device's link before its routes.
type linkPlan struct {
	// mtu to set; 0 leaves it.
	mtu int
	// removeAddrs are addresses other than the device's own and link-local ones.
	removeAddrs []netlink.Addr
	// addAddress: the device's own address is missing.
	addAddress bool
	// up: the link is down.
	up bool
	// routes are the prefixes to route through the device (planRoutes): the peers' allowed
	// IPs, masked, but the device's own network, whose connected route is the kernel's.
	routes []netip.Prefix
}

// planLink decides what to change on the link (its MTU, whether it is up, and its addresses as
// netlink lists them) for the interface's settings, and which of the peers' allowed IPs
// (routes) need a route of the driver.
func planLink(iface rwg.Interface, mtu int, up bool, addrs []netlink.Addr, routes []netip.Prefix) linkPlan {
	var plan linkPlan
	if iface.MTU > 0 && mtu != int(iface.MTU) {
		plan.mtu = int(iface.MTU)
	}
	want := iface.Address
	have := false
	for _, a := range addrs {
		p, ok := prefixOf(*a.IPNet)
		if !ok {
			continue
		}
		addr, _ := netip.AddrFromSlice(a.IP)
		addr = addr.Unmap()
		if addr == want.Addr() && p.Bits() == want.Bits() {
			have = true
			continue
		}
		if addr.IsLinkLocalUnicast() {
			continue
		}
		plan.removeAddrs = append(plan.removeAddrs, a)
	}
	plan.addAddress = !have
	plan.up = !up
	for _, r := range routes {
		if r = r.Masked(); r != want.Masked() {
			plan.routes = append(plan.routes, r)
		}
	}
	return plan
}
