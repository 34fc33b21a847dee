package wireguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Endpoint memory: why and how.
//
// A roaming site (a VPNPeer without an endpoint) is reached at whatever address its last
// authenticated packet came from; only the device knows it. The embedded userspace device ends
// with the agent's process, and its successor knows no endpoint: it cannot send a handshake,
// and the site keeps sending on its old session, which the new device cannot decrypt, until
// WireGuard on the site gives up on it and handshakes anew — 15 s later (KEEPALIVE_TIMEOUT +
// REKEY_TIMEOUT). So the driver writes each peer's endpoint and last handshake to a small
// state file (Options.StateFile: the pod's emptyDir, which outlives the agent's container), and
// a driver that creates the device puts the remembered endpoints back and sends each peer whose
// session may still be alive a handshake initiation at once: the site answers, both sides have
// a fresh session within a round trip, and the site's traffic flows again.
//
// The file holds public information only: the device's public key (a file of another device
// is ignored), the peers' public keys, endpoints and handshake times. Never a private or
// pre-shared key. A kernel device lives in the pod's network namespace and outlives the agent
// with its sessions and endpoints: the driver adopts it and has nothing to restore.

// stateVersion is the state file's format.
const stateVersion = 1

// stateHandshakeRefresh: a peer's recorded handshake is rewritten once the device's is this
// much newer, so the record is never older than this (plus the poll interval) and the file is
// written about once per rekey (2 min) per peer rather than on every handshake.
const stateHandshakeRefresh = 60 * time.Second

// stateMinInterval spaces writes that only refresh handshake times; endpoint changes are
// written at the next poll.
const stateMinInterval = 30 * time.Second

// initiateWithin: a remembered peer whose recorded handshake is younger than this may still
// hold a live session (REJECT_AFTER_TIME after its real last handshake, which is at most
// stateHandshakeRefresh + stateMinInterval newer than the record), so the new device initiates.
const initiateWithin = RejectAfterTime + stateHandshakeRefresh + stateMinInterval

type stateFile struct {
	Version int `json:"version"`
	// Device is the device's public key.
	Device string `json:"device"`
	// Peers by public key.
	Peers map[string]peerRecord `json:"peers"`
}

type peerRecord struct {
	Endpoint      string    `json:"endpoint"`
	LastHandshake time.Time `json:"lastHandshake,omitzero"`
}

// endpointMemory is the driver's view of the state file.
type endpointMemory struct {
	path string
	// device is the public key the file was written for (zero until known).
	device wgtypes.Key
	// saved is what the file holds.
	saved map[wgtypes.Key]peerRecord
	// restore is what a device this driver created may be re-seeded with (loaded at New, used
	// by the Apply that adds each peer, then dropped).
	restore map[wgtypes.Key]peerRecord
	// lastWrite is when the file was last written.
	lastWrite time.Time
	// failing remembers that writing failed (logged once until it works again).
	failing bool
}

// loadEndpointMemory reads path; a missing, unreadable or foreign file gives an empty memory
// (the reason, if any, is returned for the log).
func loadEndpointMemory(path string) (*endpointMemory, string) {
	m := &endpointMemory{path: path, saved: map[wgtypes.Key]peerRecord{}, restore: map[wgtypes.Key]peerRecord{}}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return m, ""
	}
	if err != nil {
		return m, fmt.Sprintf("reading the endpoint state: %v", err)
	}
	var f stateFile
	if err := json.Unmarshal(raw, &f); err != nil || f.Version != stateVersion {
		return m, fmt.Sprintf("ignoring the endpoint state %s: not version %d", path, stateVersion)
	}
	dev, err := wgtypes.ParseKey(f.Device)
	if err != nil {
		return m, fmt.Sprintf("ignoring the endpoint state %s: no device key", path)
	}
	m.device = dev
	for k, r := range f.Peers {
		key, err := wgtypes.ParseKey(k)
		if err != nil {
			continue
		}
		if _, err := netip.ParseAddrPort(r.Endpoint); err != nil {
			continue
		}
		m.saved[key] = r
		m.restore[key] = r
	}
	return m, ""
}

// restoreFor returns the remembered endpoint of a peer the device does not have yet, and
// whether its session may still be alive; nil when there is nothing to restore (a foreign
// file, a peer never seen).
func (m *endpointMemory) restoreFor(dev, peer wgtypes.Key, now time.Time) (*net.UDPAddr, bool) {
	if m == nil || m.device != dev {
		return nil, false
	}
	r, ok := m.restore[peer]
	if !ok {
		return nil, false
	}
	ap, err := netip.ParseAddrPort(r.Endpoint)
	if err != nil {
		return nil, false
	}
	live := r.LastHandshake.IsZero() || now.Sub(r.LastHandshake) < initiateWithin
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())), live
}

// rearm makes everything remembered restorable again: the device lost its peers (an external
// device whose container restarted) and is to be re-seeded like one the driver created.
func (m *endpointMemory) rearm() {
	if m != nil {
		m.restore = maps.Clone(m.saved)
	}
}

// note records the device's peers (dev is the device's public key) and writes the file when an
// endpoint changed, a peer came or went, or a handshake is stateHandshakeRefresh newer than its
// record (at most every stateMinInterval). The error is for the log.
func (m *endpointMemory) note(dev wgtypes.Key, peers []wgtypes.Peer, now time.Time) error {
	if m == nil {
		return nil
	}
	cur := make(map[wgtypes.Key]peerRecord, len(peers))
	changed, refresh := m.device != dev, false
	for i := range peers {
		p := &peers[i]
		if p.Endpoint == nil {
			continue
		}
		ap := p.Endpoint.AddrPort()
		r := peerRecord{Endpoint: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()}
		if !p.LastHandshakeTime.IsZero() {
			r.LastHandshake = p.LastHandshakeTime.UTC().Truncate(time.Second)
		}
		old, ok := m.saved[p.PublicKey]
		switch {
		case !ok || old.Endpoint != r.Endpoint:
			changed = true
		case r.LastHandshake.Sub(old.LastHandshake) >= stateHandshakeRefresh:
			refresh = true
		default:
			r.LastHandshake = old.LastHandshake // keep the record: nothing to write
		}
		cur[p.PublicKey] = r
	}
	if len(cur) != len(m.saved) {
		changed = true
	}
	if !changed && !(refresh && now.Sub(m.lastWrite) >= stateMinInterval) {
		return nil
	}
	f := stateFile{Version: stateVersion, Device: dev.String(), Peers: make(map[string]peerRecord, len(cur))}
	for k, r := range cur {
		f.Peers[k.String()] = r
	}
	raw, err := json.Marshal(f)
	if err == nil {
		err = writeFileAtomic(m.path, raw)
	}
	if err != nil {
		if m.failing {
			return nil
		}
		m.failing = true
		return fmt.Errorf("writing the endpoint state %s: %w", m.path, err)
	}
	m.failing = false
	m.device, m.saved, m.lastWrite = dev, maps.Clone(cur), now
	return nil
}

// writeFileAtomic replaces path with data (a reader sees the old file or the new one).
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// initiateExternal makes an external device (ModeExternal) send each peer (with its desired
// persistent keepalive) a handshake initiation now. UAPI has no such request, but wireguard-go
// sends a keepalive — which, without a session, starts a handshake — when a peer's persistent
// keepalive is switched on while the device is up; the device learns that its new TUN is up a
// moment after the link is. So: switch it on, see whether the peer sent anything, else switch
// it off and on again, for up to initiateExternalWait; then set the peer's own keepalive back.
func (d *Driver) initiateExternal(ctx context.Context, peers map[wgtypes.Key]time.Duration) {
	if len(peers) == 0 {
		return
	}
	set := func(every time.Duration) error {
		cfg := wgtypes.Config{}
		for k, own := range peers {
			ka := every
			if every < 0 {
				ka = own
			}
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: k, UpdateOnly: true, PersistentKeepaliveInterval: &ka})
		}
		return d.client.ConfigureDevice(d.name, cfg)
	}
	defer func() {
		if err := set(-1); err != nil {
			d.log.Info("restoring the peers' persistent keepalive failed", "error", redact(err.Error()))
		}
	}()
	deadline := time.Now().Add(initiateExternalWait)
	for {
		if err := set(0); err != nil {
			d.log.Info("initiating handshakes failed", "error", redact(err.Error()))
			return
		}
		if err := set(initiateKeepalive); err != nil {
			d.log.Info("initiating handshakes failed", "error", redact(err.Error()))
			return
		}
		dev, err := d.client.Device(d.name)
		if err != nil {
			return
		}
		wipeDevice(dev)
		sent := 0
		for _, p := range dev.Peers {
			if _, ok := peers[p.PublicKey]; ok && p.TransmitBytes > 0 {
				sent++
			}
		}
		if sent == len(peers) || time.Now().After(deadline) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// initiateKeepalive is the persistent keepalive initiateExternal switches on for a moment;
// initiateExternalWait how long it tries.
const (
	initiateKeepalive    = 25 * time.Second
	initiateExternalWait = 2 * time.Second
)

// initiate sends each of peers a handshake initiation now (userspace device only: the kernel
// has no such request, and a kernel device outlives the agent anyway). The device is brought up
// first: its link is up, but the TUN's event may not have reached wireguard-go yet.
func (d *Driver) initiate(peers []wgtypes.Key) {
	u := d.uspace
	if u == nil || len(peers) == 0 {
		return
	}
	if err := u.dev.Up(); err != nil {
		d.log.Info("bringing the userspace device up to initiate handshakes failed", "error", err.Error())
		return
	}
	for _, k := range peers {
		if p := u.dev.LookupPeer(device.NoisePublicKey(k)); p != nil {
			_ = p.SendHandshakeInitiation(false) // failures are logged by the device; its timers retry
		}
	}
}

// LastSeen reports where a peer's tunnel last came from and its last handshake, as recorded
// outside the pod (the gateway agent writes both into the VPNPeer's status); ok is false when
// nothing is known. It lets a pod that starts afresh, whose emptyDir holds no state file,
// reach its roaming peers at once as well.
type LastSeen func(ctx context.Context, peer string) (endpoint netip.AddrPort, lastHandshake time.Time, ok bool)

// lastSeenBudget bounds the reading of every peer's last endpoint before a fresh device's first
// configuration.
const lastSeenBudget = 3 * time.Second

// seed adds what lastSeen knows of the named peers the memory holds nothing of, for the device
// dev: a memory without a file (or with this device's file) takes them; one of another device
// is left alone. It returns how many peers were seeded.
func (m *endpointMemory) seed(ctx context.Context, dev wgtypes.Key, peers map[wgtypes.Key]string, lastSeen LastSeen) int {
	if m == nil || lastSeen == nil || (m.device != (wgtypes.Key{}) && m.device != dev) {
		return 0
	}
	n := 0
	for key, name := range peers {
		if _, known := m.restore[key]; known {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		ep, hs, ok := lastSeen(ctx, name)
		if !ok || !ep.IsValid() || ep.Port() == 0 || !ep.Addr().Is4() && !ep.Addr().Is6() {
			continue
		}
		m.restore[key] = peerRecord{Endpoint: ep.String(), LastHandshake: hs}
		n++
	}
	if n > 0 {
		m.device = dev
	}
	return n
}
