package wireguard

import (
	"context"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
)

type secretMap map[model.SecretKeyRef][]byte

func (s secretMap) Get(ref model.SecretKeyRef) ([]byte, error) {
	v, ok := s[ref]
	if !ok {
		return nil, errors.New("not found")
	}
	return v, nil
}

func mustKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRedact(t *testing.T) {
	k := mustKey(t)
	for _, form := range []string{k.String(), hex.EncodeToString(k[:]), strings.ToUpper(hex.EncodeToString(k[:]))} {
		got := redact("failed to parse line \"private_key=" + form + "\"")
		if strings.Contains(got, form) || !strings.Contains(got, Redacted) {
			t.Errorf("redact kept a key: %s", got)
		}
	}
	// Abbreviated peer names and ordinary text stay.
	for _, s := range []string{"peer(AbCd…WxYz) - Sending handshake initiation", "UAPI: Updating private key", "10.0.0.0/8"} {
		if redact(s) != s {
			t.Errorf("redact changed %q to %q", s, redact(s))
		}
	}
}

func TestReadKey(t *testing.T) {
	k := mustKey(t)
	ref := model.SecretKeyRef{Name: "gw-key", Key: "privateKey"}
	data := []byte(k.String() + "\n")
	got, err := readKey(secretMap{ref: data}, ref)
	if err != nil || got != k {
		t.Fatalf("readKey: %v", err)
	}
	if string(data) != k.String()+"\n" {
		t.Error("readKey modified the caller's data")
	}
	for name, val := range map[string][]byte{
		"missing":   nil,
		"empty":     {},
		"short":     []byte("c2hvcnQ="),
		"hex":       []byte(hex.EncodeToString(k[:])),
		"not-bas64": []byte(strings.Repeat("!", 44)),
	} {
		s := secretMap{}
		if val != nil {
			s[ref] = val
		}
		_, err := readKey(s, ref)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !strings.Contains(err.Error(), `"gw-key"`) || (len(val) > 0 && strings.Contains(err.Error(), string(val))) {
			t.Errorf("%s: error %q does not name the Secret or shows the value", name, err)
		}
	}
}

func TestPeerHash(t *testing.T) {
	d := &Driver{}
	key := mustKey(t).PublicKey()
	psk1, psk2 := mustKey(t), mustKey(t)
	nets := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28"), netip.MustParsePrefix("198.51.100.0/24")}
	ep := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:51820"))
	base := d.peerHash(key, nets, ep, 0, &psk1)
	if base != d.peerHash(key, []netip.Prefix{nets[1], nets[0]}, ep, 0, &psk1) {
		t.Error("hash depends on the order of allowed IPs")
	}
	for name, h := range map[string][32]byte{
		"psk":       d.peerHash(key, nets, ep, 0, &psk2),
		"no psk":    d.peerHash(key, nets, ep, 0, nil),
		"nets":      d.peerHash(key, nets[:1], ep, 0, &psk1),
		"endpoint":  d.peerHash(key, nets, nil, 0, &psk1),
		"keepalive": d.peerHash(key, nets, ep, time.Second, &psk1),
	} {
		if h == base {
			t.Errorf("hash ignores a change of %s", name)
		}
	}
	other := &Driver{salt: [32]byte{1}}
	if other.peerHash(key, nets, ep, 0, &psk1) == base {
		t.Error("hash is not salted")
	}
}

func TestMatches(t *testing.T) {
	psk := mustKey(t)
	_, n, _ := net.ParseCIDR("203.0.113.0/28")
	ep := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.1:51820"))
	cur := wgtypes.Peer{PresharedKey: psk, AllowedIPs: []net.IPNet{*n}, Endpoint: ep, PersistentKeepaliveInterval: 25 * time.Second}
	nets := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/28")}
	if !matches(cur, nets, ep, 25*time.Second, &psk) {
		t.Error("identical peer does not match")
	}
	if !matches(cur, nets, nil, 25*time.Second, &psk) {
		t.Error("a roamed endpoint must not matter when none is desired")
	}
	other := mustKey(t)
	for name, ok := range map[string]bool{
		"psk":       matches(cur, nets, ep, 25*time.Second, &other),
		"no psk":    matches(cur, nets, ep, 25*time.Second, nil),
		"keepalive": matches(cur, nets, ep, 0, &psk),
		"nets":      matches(cur, []netip.Prefix{netip.MustParsePrefix("203.0.113.16/28")}, ep, 25*time.Second, &psk),
		"endpoint":  matches(cur, nets, net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.9:51820")), 25*time.Second, &psk),
	} {
		if ok {
			t.Errorf("a peer differing in %s matches", name)
		}
	}
}

func TestPeerState(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name      string
		hs        time.Time
		initiates bool
		want      string
	}{
		{"fresh handshake", now.Add(-5 * time.Second), false, agent.StateEstablished},
		{"just under reject-after", now.Add(-179 * time.Second), false, agent.StateEstablished},
		{"stale, gateway initiates", now.Add(-181 * time.Second), true, agent.StateConnecting},
		{"never, gateway initiates", time.Time{}, true, agent.StateConnecting},
		{"stale, peer initiates", now.Add(-10 * time.Minute), false, agent.StateDown},
		{"never, peer initiates", time.Time{}, false, agent.StateDown},
	} {
		s := peerState(wgtypes.Peer{LastHandshakeTime: c.hs, ReceiveBytes: 10, TransmitBytes: 20}, c.initiates, now)
		if s.State != c.want {
			t.Errorf("%s: %s, want %s", c.name, s.State, c.want)
		}
		if s.BytesIn != 10 || s.BytesOut != 20 || s.PacketsIn != 0 || s.PacketsOut != 0 {
			t.Errorf("%s: counters %+v", c.name, s)
		}
	}
}

func TestResolveEndpoint(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct{ endpoint, want, note string }{
		{"", "", ""},
		{"198.51.100.20:51820", "198.51.100.20:51820", ""},
		{"[2001:db8::40]:51820", "[2001:db8::40]:51820", ""},
		{"no-port", "", "not host:port"},
	} {
		ep, note := resolveEndpoint(ctx, rwg.Peer{Endpoint: c.endpoint})
		got := ""
		if ep != nil {
			got = ep.String()
		}
		if got != c.want || !strings.Contains(note, c.note) || (c.note == "" && note != "") {
			t.Errorf("%q: %q, %q", c.endpoint, got, note)
		}
	}
	// A DNS name is resolved (localhost, from /etc/hosts: no traffic leaves the machine).
	if ep, note := resolveEndpoint(ctx, rwg.Peer{Endpoint: "localhost:51820"}); ep == nil {
		t.Skipf("localhost does not resolve here: %s", note)
	} else if !ep.IP.IsLoopback() || ep.Port != 51820 {
		t.Errorf("localhost:51820 resolved to %s", ep)
	}
}
