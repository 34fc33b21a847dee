// Package wireguard is the gateway agent's WireGuard driver (agent.Driver). It converges one
// WireGuard device in the gateway pod's network namespace to the rendered configuration
// (render/wireguard.Config) and reports each peer's tunnel state.
//
// The device is the kernel's (a netlink link of type "wireguard") where the module exists,
// otherwise an embedded userspace device (golang.zx2c4.com/wireguard) on a TUN, with a UAPI
// socket in /var/run/wireguard so that wgctrl — and `wg show` — talk to it exactly as they
// would to the kernel. Everything above the device (keys, peers, addresses, routes, status) is
// one code path: wgctrl for the WireGuard configuration, netlink for the link.
//
// The driver runs in the process and network namespace that owns the device (the agent inside
// the pod); it never switches namespaces itself.
//
// Secrets: the private key and pre-shared keys are read from agent.Secrets on every Apply,
// handed to the device and dropped. The driver remembers only a salted hash of each peer's
// desired configuration (pre-shared key included) to decide what changed, and never logs, returns
// or stores a key in clear. The userspace device's log passes through a filter that redacts
// anything shaped like a key.
//
// Status: WireGuard has no sessions to list and no events. A peer is Established while its last
// handshake is within REJECT_AFTER_TIME (180 s), Connecting when it is not but the gateway would
// initiate (an endpoint or a persistent keepalive is configured), Down otherwise. WireGuard
// counts bytes, not packets: PacketsIn/PacketsOut stay 0. Changes is a poll (Options.PollInterval)
// that signals only when a peer's state, message or last handshake changed, or after an Apply;
// byte counters are read on demand by Peers.
package wireguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

// Mode selects the WireGuard implementation.
type Mode string

const (
	// ModeAuto uses the kernel device when the module is available, else the embedded
	// userspace device.
	ModeAuto Mode = "auto"
	// ModeKernel requires the kernel module.
	ModeKernel Mode = "kernel"
	// ModeUserspace always uses the embedded userspace device (needs /dev/net/tun).
	ModeUserspace Mode = "userspace"
	// ModeExternal uses a userspace device another process of the pod runs (the gateway pod's
	// wireguard container, RunDevice), configured over its UAPI socket: the driver waits for
	// it, adopts it as it is and never creates or deletes it, so the tunnels outlive the agent.
	ModeExternal Mode = "external"
)

// Defaults.
const (
	DefaultInterfaceName = "wg0"
	DefaultPollInterval  = time.Second
	// DefaultExternalWait is how long New waits for an external device to appear.
	DefaultExternalWait = 60 * time.Second
	// DefaultMTU is the TUN's MTU until the first Apply sets the rendered one.
	DefaultMTU = 1420
	// RejectAfterTime is WireGuard's REJECT_AFTER_TIME: a session older than this carries no
	// traffic, so a peer whose last handshake is older is not Established.
	RejectAfterTime = 180 * time.Second
	// RouteProtocol marks the routes the driver installs (ip route shows "proto 98"), so it
	// removes only its own routes from the device.
	RouteProtocol = 98
)

// Options configure New.
type Options struct {
	// InterfaceName of the device; DefaultInterfaceName when empty. With userspace devices the
	// UAPI socket /var/run/wireguard/<name>.sock is machine-wide unless the process has its
	// own mount namespace (as a pod has), so names must then be unique per machine.
	InterfaceName string
	// Mode; ModeAuto when empty.
	Mode Mode
	// Owner names who the device is for (the gateway's namespace/name). A kernel device the
	// driver creates carries it in its alias (AliasPrefix+Owner); an existing device of the
	// name is adopted only when its alias is exactly that — never someone else's device.
	Owner string
	// Logger receives the driver's messages and, at V(1), the userspace device's log (keys
	// redacted). The zero value discards.
	Logger logr.Logger
	// PollInterval of Changes; DefaultPollInterval when zero.
	PollInterval time.Duration
	// DeleteOnClose makes Close remove the device (kernel: delete the link; userspace: close the
	// device, which removes the TUN, and its UAPI socket). By default Close leaves the dataplane
	// running: a kernel device outlives the agent; an embedded userspace device keeps running
	// until the process exits (which ends it anyway).
	DeleteOnClose bool
	// StateFile, when set, is where the driver remembers each peer's last known endpoint and
	// handshake (public data only), so that a device it re-creates after a restart reaches
	// roaming peers at once (see endpoints.go). Its directory must exist and outlive the
	// process (the gateway pod's emptyDir).
	StateFile string
	// LastSeen, when set with StateFile, tells a device the driver creates (or finds fresh)
	// where the peers the state file does not know were last seen (see endpoints.go).
	LastSeen LastSeen
	// ExternalWait (ModeExternal) is how long New waits for the device; DefaultExternalWait
	// when zero.
	ExternalWait time.Duration
}

// Driver is the WireGuard agent.Driver.
type Driver struct {
	name   string
	mode   Mode // ModeKernel or ModeUserspace: what is actually running
	log    logr.Logger
	opts   Options
	client *wgctrl.Client
	uspace *userspaceDevice // nil in kernel mode
	// created: New created the device (rather than adopting an existing kernel link).
	created bool
	salt    [32]byte

	mu sync.Mutex
	// desired is the last applied bundle's peers, in the bundle's order.
	desired []desiredPeer
	// applied is the salted hash of each configured peer's desired configuration, by key.
	applied map[wgtypes.Key][32]byte
	// establishedAt tracks when the driver saw each peer become Established.
	establishedAt map[wgtypes.Key]time.Time
	// last is the state the latest Apply or poll saw, which the poll compares with.
	last snapshot
	// conflicts are the wanted prefixes another route held at the last Apply (logged when
	// they change).
	conflicts map[netip.Prefix]string
	// mem is the endpoint memory (nil without Options.StateFile); configured is set once an
	// Apply configured the device, from when on the device's peers are recorded in it.
	mem        *endpointMemory
	configured bool
	// fresh (ModeExternal): the device has no key although it should — the wireguard container
	// started it anew (at first, or after it restarted): it needs the whole configuration again,
	// and the peers' remembered endpoints, like a device the driver created.
	fresh bool

	changes   chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ agent.Driver = (*Driver)(nil)

// desiredPeer is what the driver keeps of a bundle peer between calls: no key material
// besides the public key.
type desiredPeer struct {
	name      string
	key       wgtypes.Key
	initiates bool   // endpoint or keepalive configured: the gateway sends handshakes itself
	missing   string // why the peer is left out (missing or invalid Secret); "" when configured
	note      string // a non-fatal remark (e.g. endpoint not resolved)
	routes    string // its subnets the driver does not route: another route holds them
}

// New opens (or creates) the device and starts the status poll. An existing kernel WireGuard
// link of that name is adopted only when a driver created it for the same Options.Owner (a
// previous agent of the same gateway), anything else of that name is refused; otherwise the
// driver tries to create one and falls back to the userspace device when the kernel cannot.
func New(ctx context.Context, opts Options) (*Driver, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.InterfaceName == "" {
		opts.InterfaceName = DefaultInterfaceName
	}
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if err := validInterfaceName(opts.InterfaceName); err != nil {
		return nil, err
	}
	d := &Driver{
		name:          opts.InterfaceName,
		log:           opts.Logger.WithValues("interface", opts.InterfaceName),
		opts:          opts,
		applied:       map[wgtypes.Key][32]byte{},
		establishedAt: map[wgtypes.Key]time.Time{},
		changes:       make(chan struct{}, 1),
		stop:          make(chan struct{}),
		done:          make(chan struct{}),
	}
	if _, err := rand.Read(d.salt[:]); err != nil {
		return nil, fmt.Errorf("random salt: %w", err)
	}
	if opts.StateFile != "" {
		var why string
		d.mem, why = loadEndpointMemory(opts.StateFile)
		if why != "" {
			d.log.Info(why)
		}
	}
	open := d.openDevice
	if opts.Mode == ModeExternal {
		open = func() error { return d.openExternal(ctx) }
	}
	if err := open(); err != nil {
		return nil, err
	}
	client, err := wgctrl.New()
	if err != nil {
		if d.created {
			_ = d.teardown()
		}
		return nil, fmt.Errorf("opening wgctrl: %w", err)
	}
	d.client = client
	dev, err := d.client.Device(d.name)
	if err != nil {
		_ = d.client.Close()
		if d.created {
			_ = d.teardown()
		}
		return nil, fmt.Errorf("device %s is not reachable through wgctrl: %s", d.name, redact(err.Error()))
	}
	d.fresh = d.mode == ModeExternal && dev.PrivateKey == wgtypes.Key{}
	wipeDevice(dev)
	d.log.Info("WireGuard device ready", "mode", string(d.mode))
	go d.poll()
	return d, nil
}

// validInterfaceName refuses names Linux would not take for an interface.
func validInterfaceName(name string) error {
	if name == "" || len(name) > 15 || strings.ContainsAny(name, "/ \t\n:") {
		return fmt.Errorf("interface name %q is not a valid Linux interface name", name)
	}
	return nil
}

// NeedsApply reports that the device lost its configuration behind the driver's back (an
// external device whose wireguard container restarted): the agent applies the last
// configuration again (agent.Engine, on Changes).
func (d *Driver) NeedsApply() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fresh && d.configured
}

// InterfaceName is the device's name.
func (d *Driver) InterfaceName() string { return d.name }

// Mode is the implementation in use: ModeKernel or ModeUserspace.
func (d *Driver) Mode() Mode { return d.mode }

// Changes signals when a peer's state may have changed (see the package documentation).
func (d *Driver) Changes() <-chan struct{} { return d.changes }

func (d *Driver) signal() {
	select {
	case d.changes <- struct{}{}:
	default:
	}
}

// Close stops the poll and closes wgctrl; the device keeps running unless
// Options.DeleteOnClose.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.stop)
		<-d.done
		d.closeErr = d.client.Close()
		if d.opts.DeleteOnClose {
			d.closeErr = errors.Join(d.closeErr, d.teardown())
		}
	})
	return d.closeErr
}

// Apply converges the device to b.WireGuard: private key, listen port, address, MTU, link up,
// then the peers that differ (added, changed or removed — others are not touched) and the
// routes of the configured peers' allowed IPs through the device. A missing or invalid
// private key is an error naming its Secret, and nothing is changed. A peer whose pre-shared
// key Secret is missing or invalid is left out (removed if it was configured) and reported as
// StateMissingSecret. WireGuard cannot unset a peer's endpoint: a peer whose endpoint is
// removed from the bundle keeps the last one until it roams.
//
// The desired configuration (desiredPeers) and the device as wgctrl reads it make a plan
// (planDevice, pure), which configureDevice carries out; convergeLink then plans and changes
// the link and its routes (planLink, planRoutes).
func (d *Driver) Apply(ctx context.Context, b *render.Bundle, secrets agent.Secrets) error {
	if b == nil || b.WireGuard == nil {
		return errors.New("the bundle has no WireGuard configuration")
	}
	cfg := b.WireGuard
	if secrets == nil {
		return errors.New("no secrets source")
	}
	priv, err := readKey(secrets, cfg.Interface.PrivateKey)
	if err != nil {
		return fmt.Errorf("device private key: %w", err)
	}
	defer clear(priv[:])
	if cfg.Interface.ListenPort == 0 {
		return errors.New("interface listen port is 0")
	}
	if !cfg.Interface.Address.IsValid() {
		return errors.New("interface has no valid address")
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() {
		// The peers' state as of this Apply, so the poll signals only later changes.
		if peers, err := d.peersLocked(time.Now()); err == nil {
			d.last = snapshotOf(peers)
		}
		d.signal()
	}()

	want := &desiredDevice{priv: &priv, listenPort: int(cfg.Interface.ListenPort), firewallMark: int(cfg.Interface.FirewallMark)}
	defer want.wipe()
	if err := d.desiredPeers(ctx, cfg.Peers, secrets, want); err != nil {
		return err
	}
	dev, err := d.client.Device(d.name)
	if err != nil {
		return fmt.Errorf("reading device %s: %s", d.name, redact(err.Error()))
	}
	defer wipeDevice(dev)
	pub, now := priv.PublicKey(), time.Now()
	if (d.created || d.fresh) && !d.configured {
		// bounded as a whole: an API server that does not answer delays the first
		// configuration by this much at most, whatever the number of peers
		sctx, cancel := context.WithTimeout(ctx, lastSeenBudget)
		n := d.mem.seed(sctx, pub, peerNames(cfg.Peers), d.opts.LastSeen)
		cancel()
		if n > 0 {
			d.log.Info("peers' last endpoints taken from their status (no state file of this device)", "peers", n)
		}
	}
	plan := planDevice(want, dev, d.applied, func(peer wgtypes.Key) (*net.UDPAddr, bool) {
		return d.restoreFor(pub, peer, now)
	})
	d.desired = want.peers
	if err := d.configureDevice(want, &plan); err != nil {
		return err
	}

	// The link: MTU, address, up; then the routes of the configured peers.
	conflicts, err := d.convergeLink(cfg.Interface, want.routes())
	for i := range d.desired {
		if w, ok := want.wanted[d.desired[i].key]; ok && d.desired[i].missing == "" {
			d.desired[i].routes = conflictNote(conflicts, w.nets)
		}
	}
	if err != nil {
		return err
	}
	d.finishApply(ctx, want, &plan)
	return nil
}

// finishApply completes an Apply that configured the device and its link: the device is
// configured, the endpoint memory has served it, and the new peers that may still hold a
// session with the previous device are sent a handshake.
func (d *Driver) finishApply(ctx context.Context, want *desiredDevice, plan *devicePlan) {
	d.configured = true
	d.fresh = false
	if plan.restored > 0 {
		d.log.Info("peers' last endpoints restored from the previous device", "peers", plan.restored)
	}
	if d.mem != nil {
		clear(d.mem.restore) // they served the device's first configuration
	}
	if d.mode == ModeExternal {
		alive := map[wgtypes.Key]time.Duration{}
		for _, k := range plan.initiate {
			alive[k] = want.wanted[k].alive
		}
		d.initiateExternal(ctx, alive)
	} else {
		d.initiate(plan.initiate)
	}
}

// desiredPeers fills want with the bundle's peers: their public keys and pre-shared keys read,
// their endpoints resolved and their configurations hashed. A peer whose pre-shared key cannot
// be read is left out (missing). A peer's invalid or repeated public key is an error.
func (d *Driver) desiredPeers(ctx context.Context, peers []rwg.Peer, secrets agent.Secrets, want *desiredDevice) error {
	want.wanted = map[wgtypes.Key]*wantedPeer{}
	for _, p := range peers {
		pub, err := p.PublicKeyBytes()
		if err != nil {
			return fmt.Errorf("peer %q: %w", p.Name, err)
		}
		key := wgtypes.Key(pub)
		if _, dup := want.wanted[key]; dup {
			return fmt.Errorf("peer %q: public key configured twice", p.Name)
		}
		dp := desiredPeer{name: p.Name, key: key, initiates: p.Endpoint != "" || p.PersistentKeepalive > 0}
		var psk *wgtypes.Key
		if p.PresharedKey != nil {
			k, err := readKey(secrets, *p.PresharedKey)
			if err != nil {
				dp.missing = "pre-shared key: " + err.Error()
				want.peers = append(want.peers, dp)
				continue
			}
			psk = &k
		}
		ep, note := resolveEndpoint(ctx, p)
		dp.note = note
		w := &wantedPeer{psk: psk, ep: ep, alive: p.KeepaliveInterval(), nets: slices.Clone(p.AllowedIPs), allowed: p.AllowedIPNets()}
		w.hash = d.peerHash(key, w.nets, ep, w.alive, psk)
		want.wanted[key] = w
		want.peers = append(want.peers, dp)
	}
	return nil
}

// configureDevice carries out the plan's device changes and keeps the peers' hashes: the
// adopted ones, none of the peers no longer wanted, and those of the changed peers once the
// device took them.
func (d *Driver) configureDevice(want *desiredDevice, plan *devicePlan) error {
	for k, h := range plan.adopted {
		d.applied[k] = h
	}
	for _, k := range plan.forget {
		delete(d.applied, k)
	}
	if !plan.configures() {
		return nil
	}
	if err := d.client.ConfigureDevice(d.name, plan.config); err != nil {
		// Partly applied at worst: forget the hashes so that the next Apply compares with the
		// device.
		for _, k := range plan.changed {
			delete(d.applied, k)
		}
		return fmt.Errorf("configuring device %s: %s", d.name, redact(err.Error()))
	}
	for _, k := range plan.changed {
		d.applied[k] = want.wanted[k].hash
	}
	names := map[wgtypes.Key]string{}
	for _, p := range want.peers {
		names[p.key] = p.name
	}
	for _, k := range plan.changed {
		d.log.Info("peer configured", "peer", names[k])
	}
	if len(plan.removed) > 0 {
		d.log.Info("peers removed", "count", len(plan.removed))
	}
	return nil
}

// restoreFor is the endpoint memory's entry for a peer on a device this driver created.
func (d *Driver) restoreFor(dev, peer wgtypes.Key, now time.Time) (*net.UDPAddr, bool) {
	if !d.created && !d.fresh {
		return nil, false
	}
	return d.mem.restoreFor(dev, peer, now)
}

// wipeDevice clears the keys wgctrl read back from the device (it returns the private key
// and the pre-shared keys with everything else), so they do not linger in the driver's memory.
func wipeDevice(dev *wgtypes.Device) {
	clear(dev.PrivateKey[:])
	for i := range dev.Peers {
		clear(dev.Peers[i].PresharedKey[:])
	}
}

// readKey reads and decodes a base64 WireGuard key from a Secret; errors name the Secret and
// never contain its data.
func readKey(secrets agent.Secrets, ref model.SecretKeyRef) (wgtypes.Key, error) {
	raw, err := secrets.Get(ref)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("Secret %q key %q: %s", ref.Name, ref.Key, redact(err.Error()))
	}
	if len(raw) == 0 {
		return wgtypes.Key{}, fmt.Errorf("Secret %q key %q is empty", ref.Name, ref.Key)
	}
	// Decoded without converting to a string, so no copy of the key outlives this call
	// (the caller's slice is not modified).
	src := bytes.TrimSpace(raw)
	var buf [33]byte // base64.StdEncoding.DecodedLen(44)
	defer clear(buf[:])
	var k wgtypes.Key
	if len(src) != 44 {
		return k, fmt.Errorf("Secret %q key %q does not hold a base64-encoded 32-byte WireGuard key", ref.Name, ref.Key)
	}
	if n, err := base64.StdEncoding.Strict().Decode(buf[:], src); err != nil || n != len(k) {
		return k, fmt.Errorf("Secret %q key %q does not hold a base64-encoded 32-byte WireGuard key", ref.Name, ref.Key)
	}
	copy(k[:], buf[:])
	return k, nil
}

// resolveEndpoint turns the peer's endpoint into a UDP address; a DNS name is resolved now
// (and again on every Apply). A name that does not resolve leaves the endpoint unset: the peer
// can still connect to us, and the note says why the gateway does not initiate.
func resolveEndpoint(ctx context.Context, p rwg.Peer) (*net.UDPAddr, string) {
	host, port, ok := p.EndpointHostPort()
	if !ok {
		if p.Endpoint != "" {
			return nil, fmt.Sprintf("endpoint %q is not host:port", p.Endpoint)
		}
		return nil, ""
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.Unmap(), port)), ""
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		if err == nil {
			err = errors.New("no addresses")
		}
		return nil, fmt.Sprintf("endpoint %s does not resolve: %v", p.Endpoint, err)
	}
	// Prefer IPv4, deterministically.
	slices.SortFunc(addrs, func(a, b netip.Addr) int {
		if a.Unmap().Is4() != b.Unmap().Is4() {
			if a.Unmap().Is4() {
				return -1
			}
			return 1
		}
		return a.Compare(b)
	})
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0].Unmap(), port)), ""
}

// peerHash is a salted hash of a peer's desired configuration; the pre-shared key enters it
// only through the salted hash, so the driver keeps nothing from which a key can be recovered.
func (d *Driver) peerHash(key wgtypes.Key, nets []netip.Prefix, ep *net.UDPAddr, keepalive time.Duration, psk *wgtypes.Key) [32]byte {
	h := sha256.New()
	h.Write(d.salt[:])
	h.Write(key[:])
	sorted := slices.Clone(nets)
	slices.SortFunc(sorted, func(a, b netip.Prefix) int { return strings.Compare(a.String(), b.String()) })
	for _, n := range sorted {
		fmt.Fprintf(h, "net %s\n", n)
	}
	if ep != nil {
		fmt.Fprintf(h, "endpoint %s\n", ep.AddrPort())
	}
	_ = binary.Write(h, binary.BigEndian, int64(keepalive))
	if psk != nil {
		h.Write([]byte("psk"))
		h.Write(psk[:])
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// matches reports whether a device peer already has the desired configuration (used to adopt
// peers the driver has no hash for). The endpoint is compared only when one is desired: a
// peer that roams changes it.
func matches(cur wgtypes.Peer, nets []netip.Prefix, ep *net.UDPAddr, keepalive time.Duration, psk *wgtypes.Key) bool {
	if cur.PersistentKeepaliveInterval != keepalive {
		return false
	}
	var want wgtypes.Key
	if psk != nil {
		want = *psk
	}
	if subtle.ConstantTimeCompare(cur.PresharedKey[:], want[:]) != 1 {
		return false
	}
	if ep != nil && (cur.Endpoint == nil || cur.Endpoint.AddrPort() != ep.AddrPort()) {
		return false
	}
	have := make([]string, 0, len(cur.AllowedIPs))
	for _, n := range cur.AllowedIPs {
		if p, ok := prefixOf(n); ok {
			have = append(have, p.String())
		}
	}
	wantNets := make([]string, 0, len(nets))
	for _, n := range nets {
		wantNets = append(wantNets, n.Masked().String())
	}
	slices.Sort(have)
	slices.Sort(wantNets)
	return slices.Equal(have, wantNets)
}

func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// peerNames maps the bundle's peers' public keys to their names (a key that does not parse is
// left out: desiredPeers reports it).
func peerNames(peers []rwg.Peer) map[wgtypes.Key]string {
	out := map[wgtypes.Key]string{}
	for _, p := range peers {
		if pub, err := p.PublicKeyBytes(); err == nil {
			out[wgtypes.Key(pub)] = p.Name
		}
	}
	return out
}
