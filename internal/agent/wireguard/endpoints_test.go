package wireguard

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func udp(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

// The endpoint memory: written when endpoints change, read back by a new driver for the same
// device only, handshake refreshes throttled, stale sessions not initiated, nothing secret.
func TestEndpointMemory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "wg0.endpoints.json")
	priv := mustKey(t)
	dev := priv.PublicKey()
	a, b := mustKey(t).PublicKey(), mustKey(t).PublicKey()
	psk := mustKey(t)
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

	m, why := loadEndpointMemory(path)
	if why != "" || len(m.restore) != 0 {
		t.Fatalf("no file: %q %v", why, m.restore)
	}
	peers := []wgtypes.Peer{
		{PublicKey: a, Endpoint: udp("198.51.100.7:51820"), LastHandshakeTime: t0, PresharedKey: psk},
		{PublicKey: b}, // never seen: no endpoint, not recorded
	}
	if err := m.note(dev, peers, t0); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []wgtypes.Key{priv, psk} {
		for _, f := range []string{k.String(), strings.ToLower(k.String())} {
			if strings.Contains(string(raw), f) {
				t.Fatalf("a key in the state file: %s", raw)
			}
		}
	}
	if st, _ := os.Stat(path); st.Mode().Perm()&0o077 != 0 {
		t.Errorf("state file mode %v", st.Mode())
	}

	// Unchanged, or a handshake only a little newer: no write.
	peers[0].LastHandshakeTime = t0.Add(30 * time.Second)
	if err := m.note(dev, peers, t0.Add(31*time.Second)); err != nil {
		t.Fatal(err)
	}
	if !m.lastWrite.Equal(t0) {
		t.Errorf("written again for a 30 s newer handshake (at %s)", m.lastWrite)
	}
	// A handshake a refresh newer, after the minimum interval: written.
	peers[0].LastHandshakeTime = t0.Add(stateHandshakeRefresh)
	if err := m.note(dev, peers, t0.Add(stateHandshakeRefresh+time.Second)); err != nil {
		t.Fatal(err)
	}
	if !m.lastWrite.Equal(t0.Add(stateHandshakeRefresh + time.Second)) {
		t.Errorf("the handshake refresh was not written (last write %s)", m.lastWrite)
	}
	// The endpoint roams: written at once.
	peers[0].Endpoint = udp("203.0.113.9:4500")
	now := t0.Add(stateHandshakeRefresh + 2*time.Second)
	if err := m.note(dev, peers, now); err != nil {
		t.Fatal(err)
	}
	if !m.lastWrite.Equal(now) {
		t.Error("the roamed endpoint was not written")
	}

	// A new driver's memory.
	m2, why := loadEndpointMemory(path)
	if why != "" {
		t.Fatal(why)
	}
	ep, live := m2.restoreFor(dev, a, now.Add(time.Second))
	if ep == nil || ep.String() != "203.0.113.9:4500" || !live {
		t.Errorf("restore a: %v %v", ep, live)
	}
	if ep, _ := m2.restoreFor(dev, b, now); ep != nil {
		t.Errorf("restore b (never seen): %v", ep)
	}
	// Another device's file is not used.
	if ep, _ := m2.restoreFor(mustKey(t).PublicKey(), a, now); ep != nil {
		t.Errorf("restored for another device: %v", ep)
	}
	// A session that cannot be alive any more: the endpoint comes back, no initiation.
	if ep, live := m2.restoreFor(dev, a, now.Add(initiateWithin)); ep == nil || live {
		t.Errorf("restore a much later: %v %v", ep, live)
	}
	// A peer gone from the device is forgotten.
	if err := m2.note(dev, peers[1:], now); err != nil {
		t.Fatal(err)
	}
	m3, _ := loadEndpointMemory(path)
	if len(m3.restore) != 0 {
		t.Errorf("after the peer left: %v", m3.restore)
	}

	// Garbage and other versions are ignored, with a reason.
	if err := os.WriteFile(path, []byte(`{"version":99}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if m, why := loadEndpointMemory(path); why == "" || len(m.restore) != 0 {
		t.Errorf("version 99: %q %v", why, m.restore)
	}
	// An unwritable place: an error once, then quiet.
	m4, _ := loadEndpointMemory(filepath.Join(dir, "missing", "x.json"))
	if err := m4.note(dev, peers, now); err == nil {
		t.Error("no error writing into a missing directory")
	}
	if err := m4.note(dev, peers, now); err != nil {
		t.Errorf("the failure was reported twice: %v", err)
	}
	// No memory at all (no state file configured): nothing happens.
	var none *endpointMemory
	if err := none.note(dev, peers, now); err != nil {
		t.Error(err)
	}
	if ep, _ := none.restoreFor(dev, a, now); ep != nil {
		t.Error(ep)
	}
}

// Seeding from the peers' status: only peers the memory does not know, only into a memory
// without a file or with this device's, nothing once the budget is spent, and a status entry
// that is no endpoint is ignored.
func TestEndpointMemorySeed(t *testing.T) {
	dev, other := mustKey(t), mustKey(t)
	known, roaming, broken := mustKey(t), mustKey(t), mustKey(t)
	now := time.Now()
	status := map[string]string{"known": "198.51.100.1:1", "roaming": "198.51.100.2:41641", "broken": "198.51.100.3:0"}
	lastSeen := func(_ context.Context, peer string) (netip.AddrPort, time.Time, bool) {
		ep, err := netip.ParseAddrPort(status[peer])
		return ep, now, err == nil
	}
	peers := map[wgtypes.Key]string{known: "known", roaming: "roaming", broken: "broken"}
	fresh := func(device wgtypes.Key) *endpointMemory {
		return &endpointMemory{device: device, saved: map[wgtypes.Key]peerRecord{},
			restore: map[wgtypes.Key]peerRecord{known: {Endpoint: "198.51.100.9:51820"}}}
	}

	m := fresh(wgtypes.Key{})
	if n := m.seed(context.Background(), dev, peers, lastSeen); n != 1 {
		t.Fatalf("seeded %d peers, want 1 (roaming)", n)
	}
	if ep, _ := m.restoreFor(dev, roaming, now); ep == nil || ep.String() != "198.51.100.2:41641" {
		t.Errorf("roaming restored at %v", ep)
	}
	if ep, _ := m.restoreFor(dev, known, now); ep == nil || ep.String() != "198.51.100.9:51820" {
		t.Errorf("the state file's endpoint of known was replaced: %v", ep)
	}
	if ep, _ := m.restoreFor(dev, broken, now); ep != nil {
		t.Errorf("a status endpoint without a port was restored: %v", ep)
	}

	if n := fresh(other).seed(context.Background(), dev, peers, lastSeen); n != 0 {
		t.Errorf("seeded %d peers into another device's memory", n)
	}
	spent, cancel := context.WithCancel(context.Background())
	cancel()
	if n := fresh(wgtypes.Key{}).seed(spent, dev, peers, lastSeen); n != 0 {
		t.Errorf("seeded %d peers with the budget spent", n)
	}
	var none *endpointMemory
	if n := none.seed(context.Background(), dev, peers, lastSeen); n != 0 {
		t.Errorf("a driver without a state file seeded %d peers", n)
	}
}
