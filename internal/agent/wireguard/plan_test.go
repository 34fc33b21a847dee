package wireguard

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// TestPlanDevice: desired configuration and the device as wgctrl reads it -> what Apply changes.
func TestPlanDevice(t *testing.T) {
	priv := mustKey(t)
	other := mustKey(t)
	keyA, keyB, keyC := mustKey(t).PublicKey(), mustKey(t).PublicKey(), mustKey(t).PublicKey()
	psk := mustKey(t)
	nets := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	ipNets := func(ps []netip.Prefix) []net.IPNet {
		var out []net.IPNet
		for _, p := range ps {
			out = append(out, *ipNet(p))
		}
		return out
	}
	endpoint := func(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	hash := func(b byte) [32]byte { return [32]byte{b} }
	// peer A: 10.1.0.0/16, no endpoint, no keepalive, no pre-shared key.
	wantA := func() *wantedPeer {
		n := nets("10.1.0.0/16")
		return &wantedPeer{hash: hash(1), nets: n, allowed: ipNets(n)}
	}
	// peer B: 10.2.0.0/16 with an endpoint, a keepalive and a pre-shared key.
	wantB := func() *wantedPeer {
		n := nets("10.2.0.0/16")
		k := psk
		return &wantedPeer{hash: hash(2), nets: n, allowed: ipNets(n), ep: endpoint("198.51.100.7:51820"), alive: 25 * time.Second, psk: &k}
	}
	desired := func(peers map[wgtypes.Key]*wantedPeer, missing ...wgtypes.Key) *desiredDevice {
		d := &desiredDevice{priv: &priv, listenPort: 51820, firewallMark: 0, wanted: peers}
		for _, k := range []wgtypes.Key{keyA, keyB, keyC} {
			if _, ok := peers[k]; ok {
				d.peers = append(d.peers, desiredPeer{key: k})
			} else if slices.Contains(missing, k) {
				d.peers = append(d.peers, desiredPeer{key: k, missing: "pre-shared key: not found"})
			}
		}
		return d
	}
	// configured is a device that has the private key, port and peers as desired.
	configured := func(peers ...wgtypes.Peer) *wgtypes.Device {
		return &wgtypes.Device{PublicKey: priv.PublicKey(), ListenPort: 51820, Peers: peers}
	}
	onDeviceA := func() wgtypes.Peer {
		return wgtypes.Peer{PublicKey: keyA, AllowedIPs: ipNets(nets("10.1.0.0/16"))}
	}
	onDeviceB := func() wgtypes.Peer {
		return wgtypes.Peer{PublicKey: keyB, AllowedIPs: ipNets(nets("10.2.0.0/16")), Endpoint: endpoint("198.51.100.7:51820"),
			PersistentKeepaliveInterval: 25 * time.Second, PresharedKey: psk}
	}
	noMemory := func(wgtypes.Key) (*net.UDPAddr, bool) { return nil, false }
	remembered := map[wgtypes.Key]struct {
		ep   *net.UDPAddr
		live bool
	}{
		keyA: {endpoint("203.0.113.5:40000"), true},
		keyB: {endpoint("203.0.113.6:40000"), true},
	}
	memory := func(k wgtypes.Key) (*net.UDPAddr, bool) { r := remembered[k]; return r.ep, r.live }

	zero := wgtypes.Key{}
	keepalive := func(d time.Duration) *time.Duration { return &d }
	type peerWant struct {
		key       wgtypes.Key
		remove    bool
		psk       *wgtypes.Key // nil: left as it is
		keepalive *time.Duration
		endpoint  *net.UDPAddr
	}
	tests := []struct {
		name       string
		want       *desiredDevice
		dev        *wgtypes.Device
		applied    map[wgtypes.Key][32]byte
		restore    func(wgtypes.Key) (*net.UDPAddr, bool)
		privateKey bool
		listenPort bool
		peers      []peerWant
		changed    []wgtypes.Key
		removed    []wgtypes.Key
		adopted    []wgtypes.Key
		forget     []wgtypes.Key
		initiate   []wgtypes.Key
		restored   int
	}{
		{
			name:       "a new device: key, port and every peer, nothing to clear on a new peer",
			want:       desired(map[wgtypes.Key]*wantedPeer{keyA: wantA(), keyB: wantB()}),
			dev:        &wgtypes.Device{},
			restore:    noMemory,
			privateKey: true, listenPort: true,
			peers: []peerWant{
				{key: keyA},
				{key: keyB, psk: &psk, keepalive: keepalive(25 * time.Second), endpoint: endpoint("198.51.100.7:51820")},
			},
			changed: []wgtypes.Key{keyA, keyB},
		},
		{
			name:    "the device as applied: nothing to do",
			want:    desired(map[wgtypes.Key]*wantedPeer{keyA: wantA(), keyB: wantB()}),
			dev:     configured(onDeviceA(), onDeviceB()),
			applied: map[wgtypes.Key][32]byte{keyA: hash(1), keyB: hash(2)},
			restore: noMemory,
		},
		{
			name:       "another private key and port on the device",
			want:       desired(map[wgtypes.Key]*wantedPeer{keyA: wantA()}),
			dev:        &wgtypes.Device{PublicKey: other.PublicKey(), ListenPort: 4000, Peers: []wgtypes.Peer{onDeviceA()}},
			applied:    map[wgtypes.Key][32]byte{keyA: hash(1)},
			restore:    noMemory,
			privateKey: true, listenPort: true,
		},
		{
			name:    "a changed peer gets its whole configuration, clearing the pre-shared key and keepalive",
			want:    desired(map[wgtypes.Key]*wantedPeer{keyA: wantA()}),
			dev:     configured(onDeviceA()),
			applied: map[wgtypes.Key][32]byte{keyA: hash(9)},
			restore: memory, // a present peer is not restored
			peers:   []peerWant{{key: keyA, psk: &zero, keepalive: keepalive(0)}},
			changed: []wgtypes.Key{keyA},
		},
		{
			name:    "a peer without a hash that matches the device is adopted",
			want:    desired(map[wgtypes.Key]*wantedPeer{keyA: wantA(), keyB: wantB()}),
			dev:     configured(onDeviceA(), onDeviceB()),
			restore: noMemory,
			adopted: []wgtypes.Key{keyA, keyB},
		},
		{
			name: "a peer without a hash that differs from the device is configured",
			want: desired(map[wgtypes.Key]*wantedPeer{keyB: wantB()}),
			dev: configured(func() wgtypes.Peer {
				p := onDeviceB()
				p.PresharedKey = wgtypes.Key{}
				return p
			}()),
			restore: noMemory,
			peers:   []peerWant{{key: keyB, psk: &psk, keepalive: keepalive(25 * time.Second), endpoint: endpoint("198.51.100.7:51820")}},
			changed: []wgtypes.Key{keyB},
		},
		{
			name:    "a device peer not wanted is removed, its hash forgotten; a missing peer's too",
			want:    desired(map[wgtypes.Key]*wantedPeer{keyA: wantA()}, keyB),
			dev:     configured(onDeviceB(), onDeviceA(), wgtypes.Peer{PublicKey: keyC}),
			applied: map[wgtypes.Key][32]byte{keyA: hash(1), keyB: hash(2)},
			restore: noMemory,
			peers:   []peerWant{{key: keyB, remove: true}, {key: keyC, remove: true}},
			removed: []wgtypes.Key{keyB, keyC},
			forget:  []wgtypes.Key{keyB},
		},
		{
			name:    "a new peer gets the remembered endpoint unless one is configured, and a handshake when live",
			want:    desired(map[wgtypes.Key]*wantedPeer{keyA: wantA(), keyB: wantB()}),
			dev:     configured(),
			restore: memory,
			peers: []peerWant{
				{key: keyA, endpoint: endpoint("203.0.113.5:40000")},
				{key: keyB, psk: &psk, keepalive: keepalive(25 * time.Second), endpoint: endpoint("198.51.100.7:51820")},
			},
			changed:  []wgtypes.Key{keyA, keyB},
			initiate: []wgtypes.Key{keyA, keyB},
			restored: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			applied := map[wgtypes.Key][32]byte{}
			for k, v := range tt.applied {
				applied[k] = v
			}
			plan := planDevice(tt.want, tt.dev, applied, tt.restore)
			if !maps32Equal(applied, tt.applied) {
				t.Errorf("planDevice changed the hashes it was given: %v", applied)
			}
			c := plan.config
			if (c.PrivateKey != nil) != tt.privateKey || (c.PrivateKey != nil && *c.PrivateKey != priv) {
				t.Errorf("private key %v, want set %v", c.PrivateKey, tt.privateKey)
			}
			if (c.ListenPort != nil) != tt.listenPort || (c.ListenPort != nil && *c.ListenPort != 51820) {
				t.Errorf("listen port %v, want set %v", c.ListenPort, tt.listenPort)
			}
			if c.FirewallMark != nil || c.ReplacePeers {
				t.Errorf("firewall mark %v, replace peers %v", c.FirewallMark, c.ReplacePeers)
			}
			if len(c.Peers) != len(tt.peers) {
				t.Fatalf("%d peer configurations, want %d: %+v", len(c.Peers), len(tt.peers), c.Peers)
			}
			for i, w := range tt.peers {
				got := c.Peers[i]
				if got.PublicKey != w.key || got.Remove != w.remove {
					t.Errorf("peer %d: key %s remove %v, want %s %v", i, got.PublicKey, got.Remove, w.key, w.remove)
					continue
				}
				if w.remove {
					continue
				}
				if (got.PresharedKey == nil) != (w.psk == nil) || (got.PresharedKey != nil && *got.PresharedKey != *w.psk) {
					t.Errorf("peer %d: pre-shared key %v, want %v", i, got.PresharedKey != nil, w.psk != nil)
				}
				if (got.PersistentKeepaliveInterval == nil) != (w.keepalive == nil) ||
					(got.PersistentKeepaliveInterval != nil && *got.PersistentKeepaliveInterval != *w.keepalive) {
					t.Errorf("peer %d: keepalive %v, want %v", i, got.PersistentKeepaliveInterval, w.keepalive)
				}
				if got.Endpoint.String() != w.endpoint.String() {
					t.Errorf("peer %d: endpoint %v, want %v", i, got.Endpoint, w.endpoint)
				}
				if !got.ReplaceAllowedIPs || len(got.AllowedIPs) != 1 {
					t.Errorf("peer %d: allowed IPs %v (replace %v)", i, got.AllowedIPs, got.ReplaceAllowedIPs)
				}
			}
			if plan.configures() != (tt.privateKey || tt.listenPort || len(tt.peers) > 0) {
				t.Errorf("configures %v", plan.configures())
			}
			keysEqual(t, "changed", plan.changed, tt.changed)
			keysEqual(t, "removed", plan.removed, tt.removed)
			keysEqual(t, "initiate", plan.initiate, tt.initiate)
			forget := slices.Clone(plan.forget)
			slices.SortFunc(forget, compareKeys)
			want := slices.Clone(tt.forget)
			slices.SortFunc(want, compareKeys)
			keysEqual(t, "forget", forget, want)
			var adopted []wgtypes.Key
			for _, k := range []wgtypes.Key{keyA, keyB, keyC} {
				if h, ok := plan.adopted[k]; ok {
					adopted = append(adopted, k)
					if h != tt.want.wanted[k].hash {
						t.Errorf("adopted %s with hash %x", k, h)
					}
				}
			}
			keysEqual(t, "adopted", adopted, tt.adopted)
			if plan.restored != tt.restored {
				t.Errorf("restored %d, want %d", plan.restored, tt.restored)
			}
		})
	}
}

func compareKeys(a, b wgtypes.Key) int { return slices.Compare(a[:], b[:]) }

func keysEqual(t *testing.T, what string, got, want []wgtypes.Key) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s %v, want %v", what, got, want)
	}
}

func maps32Equal(a, b map[wgtypes.Key][32]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestPlanLink: the interface's settings and the link as netlink reads it -> what convergeLink
// changes before the routes, and which allowed IPs need a route.
func TestPlanLink(t *testing.T) {
	addr := func(s string) netlink.Addr { return netlink.Addr{IPNet: ipNet(netip.MustParsePrefix(s))} }
	iface := rwg.Interface{Address: netip.MustParsePrefix("100.64.9.1/24"), MTU: 1420}
	ps := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	tests := []struct {
		name    string
		iface   rwg.Interface
		mtu     int
		up      bool
		addrs   []netlink.Addr
		routes  []netip.Prefix
		want    linkPlan
		removed []string
	}{
		{
			name:  "as desired: nothing to change",
			iface: iface, mtu: 1420, up: true,
			addrs: []netlink.Addr{addr("100.64.9.1/24"), addr("fe80::1/64")},
		},
		{
			name:  "a new link: MTU, address, up",
			iface: iface, mtu: 1500,
			want: linkPlan{mtu: 1420, addAddress: true, up: true},
		},
		{
			name:  "no MTU configured: left as it is",
			iface: rwg.Interface{Address: iface.Address}, mtu: 1500, up: true,
			addrs: []netlink.Addr{addr("100.64.9.1/24")},
		},
		{
			name:  "stale addresses go, link-local ones stay; the same address with another length is stale",
			iface: iface, mtu: 1420, up: true,
			addrs:   []netlink.Addr{addr("100.64.8.1/24"), addr("fe80::1/64"), addr("100.64.9.1/25")},
			want:    linkPlan{addAddress: true},
			removed: []string{"100.64.8.1/24", "100.64.9.1/25"},
		},
		{
			name:  "routes: masked, without the device's own network",
			iface: iface, mtu: 1420, up: true,
			addrs:  []netlink.Addr{addr("100.64.9.1/24")},
			routes: ps("10.1.2.3/16", "100.64.9.0/24", "100.64.9.7/24", "192.0.2.0/24"),
			want:   linkPlan{routes: ps("10.1.0.0/16", "192.0.2.0/24")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planLink(tt.iface, tt.mtu, tt.up, tt.addrs, tt.routes)
			if got.mtu != tt.want.mtu || got.addAddress != tt.want.addAddress || got.up != tt.want.up {
				t.Errorf("mtu %d, add address %v, up %v; want %d %v %v", got.mtu, got.addAddress, got.up, tt.want.mtu, tt.want.addAddress, tt.want.up)
			}
			if !slices.Equal(got.routes, tt.want.routes) {
				t.Errorf("routes %v, want %v", got.routes, tt.want.routes)
			}
			var removed []string
			for _, a := range got.removeAddrs {
				removed = append(removed, a.IPNet.String())
			}
			if !slices.Equal(removed, tt.removed) {
				t.Errorf("removes %v, want %v", removed, tt.removed)
			}
		})
	}
}
