package wireguard

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
)

// Peers reports every peer of the last applied bundle by name (empty before the first Apply).
// BytesIn/BytesOut are the device's receive/transmit counters; WireGuard counts no packets,
// so PacketsIn/PacketsOut are 0. EstablishedAt is when the driver first saw the peer
// Established (its last handshake at that moment); it is reset when the peer leaves
// Established.
func (d *Driver) Peers(ctx context.Context) (map[string]agent.PeerState, error) {
	_ = ctx
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peersLocked(time.Now())
}

func (d *Driver) peersLocked(now time.Time) (map[string]agent.PeerState, error) {
	out := make(map[string]agent.PeerState, len(d.desired))
	if len(d.desired) == 0 {
		return out, nil
	}
	dev, err := d.client.Device(d.name)
	if err != nil {
		return nil, fmt.Errorf("reading device %s: %s", d.name, redact(err.Error()))
	}
	keyless := dev.PrivateKey == (wgtypes.Key{}) // (wgctrl derives a public key even from none)
	wipeDevice(dev)
	if d.mode == ModeExternal && d.configured && keyless {
		if !d.fresh {
			d.log.Info("the WireGuard device lost its configuration (its container restarted): applying it again")
			d.fresh = true
			clear(d.applied)
			d.mem.rearm()
			d.signal()
		}
	} else if d.configured {
		if err := d.mem.note(dev.PublicKey, dev.Peers, now); err != nil {
			d.log.Info("the peers' endpoints are not remembered across a restart", "error", err.Error())
		}
	}
	onDevice := make(map[wgtypes.Key]*wgtypes.Peer, len(dev.Peers))
	for i := range dev.Peers {
		onDevice[dev.Peers[i].PublicKey] = &dev.Peers[i]
	}
	seen := map[wgtypes.Key]bool{}
	for _, p := range d.desired {
		if p.missing != "" {
			out[p.name] = agent.PeerState{State: agent.StateMissingSecret, Message: p.missing}
			continue
		}
		dp := onDevice[p.key]
		if dp == nil {
			out[p.name] = agent.PeerState{State: agent.StateDown, Message: "not configured on the device"}
			continue
		}
		s := peerState(*dp, p.initiates, now)
		if p.note != "" {
			s.Message = joinMessage(s.Message, p.note)
		}
		if p.routes != "" {
			s.Message = joinMessage(s.Message, p.routes)
		}
		if s.State == agent.StateEstablished {
			seen[p.key] = true
			at, ok := d.establishedAt[p.key]
			if !ok {
				at = dp.LastHandshakeTime
				d.establishedAt[p.key] = at
			}
			s.EstablishedAt = at
		}
		out[p.name] = s
	}
	maps.DeleteFunc(d.establishedAt, func(k wgtypes.Key, _ time.Time) bool { return !seen[k] })
	return out, nil
}

// peerState classifies one device peer.
func peerState(p wgtypes.Peer, initiates bool, now time.Time) agent.PeerState {
	s := agent.PeerState{
		LastHandshake: p.LastHandshakeTime,
		BytesIn:       counter(p.ReceiveBytes),
		BytesOut:      counter(p.TransmitBytes),
	}
	if p.Endpoint != nil {
		if ap, ok := netip.AddrFromSlice(p.Endpoint.IP); ok && p.Endpoint.Port > 0 {
			s.Endpoint = netip.AddrPortFrom(ap.Unmap(), uint16(p.Endpoint.Port))
		}
	}
	hs := p.LastHandshakeTime
	switch {
	case !hs.IsZero() && now.Sub(hs) < RejectAfterTime:
		s.State = agent.StateEstablished
	case initiates:
		s.State = agent.StateConnecting
		if hs.IsZero() {
			s.Message = "no handshake yet"
		} else {
			s.Message = fmt.Sprintf("last handshake %s ago", now.Sub(hs).Truncate(time.Second))
		}
	default:
		s.State = agent.StateDown
		if hs.IsZero() {
			s.Message = "no handshake yet; waiting for the peer to connect"
		} else {
			s.Message = fmt.Sprintf("last handshake %s ago; waiting for the peer to connect", now.Sub(hs).Truncate(time.Second))
		}
	}
	return s
}

func counter(n int64) uint64 {
	if n < 0 {
		return 0
	}
	return uint64(n)
}

func joinMessage(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// snapshot is what Changes compares: per peer the state, the message when it is not a
// ticking "ago", and the last handshake. Byte counters alone do not signal.
type snapshot map[string]snapKey

type snapKey struct {
	state, msg string
	hs         time.Time
}

func snapshotOf(peers map[string]agent.PeerState) snapshot {
	s := make(snapshot, len(peers))
	for name, p := range peers {
		k := snapKey{state: p.State, hs: p.LastHandshake}
		if p.State == agent.StateMissingSecret {
			k.msg = p.Message
		}
		s[name] = k
	}
	return s
}

// poll signals Changes when a peer's state, message or last handshake changed since the
// previous poll or Apply, or when reading the device starts or stops failing.
func (d *Driver) poll() {
	defer close(d.done)
	t := time.NewTicker(d.opts.PollInterval)
	defer t.Stop()
	prevErr := false
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		}
		d.mu.Lock()
		peers, err := d.peersLocked(time.Now())
		changed := false
		if err == nil {
			cur := snapshotOf(peers)
			changed = d.last != nil && !maps.Equal(d.last, cur)
			d.last = cur
		}
		d.mu.Unlock()
		switch {
		case err != nil && !prevErr:
			d.log.Info("reading the device failed", "error", err.Error())
			d.signal()
		case err == nil && (prevErr || changed):
			d.signal()
		}
		prevErr = err != nil
	}
}
