package wireguard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

func render(t testing.TB, gw *model.Gateway) (*Config, string) {
	t.Helper()
	cfg, err := Render(gw)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	text, err := cfg.Text()
	if err != nil {
		t.Fatalf("Text: %v", err)
	}
	return cfg, text
}

func TestGolden(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			cfg, text := render(t, tc.gw)
			golden.Assert(t, tc.name+".conf", []byte(text))
			js, err := json.MarshalIndent(cfg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, tc.name+".json", append(js, '\n'))
		})
	}
}

func TestDevice(t *testing.T) {
	cfg, _ := render(t, cases()[1].gw)
	i := cfg.Interface
	if i.Address != netip.MustParsePrefix("100.64.9.1/24") || i.ListenPort != 443 || i.MTU != 1380 ||
		i.PrivateKey != (model.SecretKeyRef{Name: "globex-wireguard-key", Key: "privateKey"}) {
		t.Errorf("interface %+v", i)
	}
	var names []string
	for _, p := range cfg.Peers {
		names = append(names, p.Name)
	}
	// Dark peers keep their tunnel; the ipsec peer has no WireGuard section.
	if !slices.Equal(names, []string{"alpha", "bravo", "charlie", "echo"}) {
		t.Errorf("peers %v", names)
	}
	alpha, charlie := cfg.Peers[0], cfg.Peers[2]
	if alpha.PersistentKeepalive != 25 || alpha.KeepaliveInterval() != 25*time.Second ||
		alpha.PresharedKey == nil || *alpha.PresharedKey != (model.SecretKeyRef{Name: "alpha-wg", Key: "presharedKey"}) {
		t.Errorf("alpha %+v", alpha)
	}
	if h, p, ok := alpha.EndpointHostPort(); !ok || h != "wg.alpha.example.net" || p != 51820 {
		t.Errorf("alpha endpoint %q %d %v", h, p, ok)
	}
	if h, p, ok := charlie.EndpointHostPort(); !ok || h != "2001:db8::40" || p != 51820 {
		t.Errorf("charlie endpoint %q %d %v", h, p, ok)
	}
	if _, _, ok := cfg.Peers[1].EndpointHostPort(); ok {
		t.Error("bravo has no endpoint")
	}
	k, err := alpha.PublicKeyBytes()
	if err != nil || k != [32]byte(bytes.Repeat([]byte{2}, 32)) {
		t.Errorf("alpha key %x %v", k, err)
	}
	nets := cfg.Peers[1].AllowedIPNets()
	if len(nets) != 2 || nets[0].String() != "10.30.0.0/24" || nets[1].String() != "10.30.8.0/24" {
		t.Errorf("bravo allowed %v", nets)
	}
	_, n, _ := net.ParseCIDR("10.30.0.0/24")
	if !slices.Equal(nets[0].Mask, n.Mask) || len(nets[0].IP) != 4 {
		t.Errorf("bravo allowed %#v", nets[0])
	}
	// A dark peer never takes an authorized peer's subnets: charlie's 10.20.5.0/24 lies in alpha's /16.
	if !slices.Equal(charlie.AllowedIPs, modelgen.Prefixes("10.40.0.0/16")) || !slices.Equal(charlie.WithheldIPs, modelgen.Prefixes("10.20.5.0/24")) {
		t.Errorf("charlie allowed %v withheld %v", charlie.AllowedIPs, charlie.WithheldIPs)
	}

	// Without an uplink the device's packets are unmarked; with one they carry the uplink's
	// mark, so that they are routed out of it (the agent's rule).
	if i.FirewallMark != 0 {
		t.Errorf("no uplink: firewall mark %#x", i.FirewallMark)
	}
	up := cases()[1].gw
	up.Uplink = &model.Uplink{Interface: "net1", Address: netip.MustParsePrefix("198.51.100.2/24"), Gateway: netip.MustParseAddr("198.51.100.1")}
	marked, _ := render(t, up)
	if marked.Interface.FirewallMark != model.UplinkMark {
		t.Errorf("uplink: firewall mark %#x, want %#x", marked.Interface.FirewallMark, model.UplinkMark)
	}
	if text, err := marked.Text(); err != nil || !strings.Contains(text, "FwMark = 0x62760003") {
		t.Errorf("uplink: text lacks the mark (%v):\n%s", err, text)
	}
}

func TestRefusesOtherGateways(t *testing.T) {
	gw := baseGateway()
	gw.Protocol = model.ProtocolIPsec
	if _, err := Render(gw); !errors.Is(err, ErrNotWireGuard) {
		t.Errorf("ipsec gateway: %v", err)
	}
	if _, err := Render(nil); err == nil {
		t.Error("nil gateway accepted")
	}
}

func TestDeterministic(t *testing.T) {
	for _, tc := range cases() {
		_, first := render(t, tc.gw)
		for range 10 {
			if _, again := render(t, tc.gw); again != first {
				t.Fatalf("%s: text differs between runs", tc.name)
			}
		}
	}
}

func TestNoSecretValues(t *testing.T) {
	for _, tc := range cases() {
		cfg, text := render(t, tc.gw)
		secrets := map[model.SecretKeyRef]string{cfg.Interface.PrivateKey: key(0xAA)}
		for _, p := range cfg.Peers {
			if p.PresharedKey != nil {
				secrets[*p.PresharedKey] = key(0xBB)
			}
		}
		js, _ := json.Marshal(cfg)
		for _, out := range []string{text, string(js), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg)} {
			for _, v := range secrets {
				if strings.Contains(out, v) {
					t.Fatalf("%s: secret value in output:\n%s", tc.name, out)
				}
			}
		}
		for _, l := range strings.Split(text, "\n") {
			if k, _, _ := strings.Cut(strings.TrimSpace(l), "="); strings.EqualFold(strings.TrimSpace(k), "PrivateKey") || strings.EqualFold(strings.TrimSpace(k), "PresharedKey") {
				t.Errorf("%s: key line %q", tc.name, l)
			}
		}
		if want := fmt.Sprintf("# PrivateKey from Secret %q key %q", cfg.Interface.PrivateKey.Name, cfg.Interface.PrivateKey.Key); !strings.Contains(text, want) {
			t.Errorf("%s: missing %q", tc.name, want)
		}
		for _, p := range cfg.Peers {
			if p.PresharedKey == nil {
				continue
			}
			if want := fmt.Sprintf("# PresharedKey from Secret %q key %q", p.PresharedKey.Name, p.PresharedKey.Key); !strings.Contains(text, want) {
				t.Errorf("%s: missing %q", tc.name, want)
			}
		}
	}
}

func TestHostileValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		mutate      func(*model.Gateway)
	}{
		{"peer name newline", ".name", func(g *model.Gateway) { g.Peers[0].Name = "a\n[Peer]" }},
		{"public key not base64", "publicKey", func(g *model.Gateway) { g.Peers[0].WireGuard.PublicKey = "x\nEndpoint = 1.2.3.4:1" }},
		{"public key short", "publicKey", func(g *model.Gateway) { g.Peers[0].WireGuard.PublicKey = "AAAA" }},
		{"duplicate public key", "publicKey", func(g *model.Gateway) {
			p := wgPeer("other", 1, modelgen.NoGrants(), "10.99.0.0/16")
			g.Peers = append(g.Peers, p)
		}},
		{"endpoint comment", "endpoint", func(g *model.Gateway) { g.Peers[0].WireGuard.Endpoint = "1.2.3.4:51820#x" }},
		{"endpoint newline", "endpoint", func(g *model.Gateway) { g.Peers[0].WireGuard.Endpoint = "1.2.3.4:51820\nAllowedIPs = 0.0.0.0/0" }},
		{"endpoint no port", "endpoint", func(g *model.Gateway) { g.Peers[0].WireGuard.Endpoint = "1.2.3.4" }},
		{"endpoint port 0", "endpoint", func(g *model.Gateway) { g.Peers[0].WireGuard.Endpoint = "1.2.3.4:0" }},
		{"endpoint space", "endpoint", func(g *model.Gateway) { g.Peers[0].WireGuard.Endpoint = "a b:1" }},
		{"psk ref", "presharedKey", func(g *model.Gateway) {
			g.Peers[0].WireGuard.PresharedKey = &model.SecretKeyRef{Name: "x\ny", Key: "k"}
		}},
		{"private key ref", "privateKey", func(g *model.Gateway) { g.WireGuard.PrivateKey.Key = "a#b" }},
		{"overlapping peers", "sourceCIDRs", func(g *model.Gateway) {
			p := g.Peers[0]
			p.Name, p.WireGuard = "intruder", &model.WireGuardPeer{PublicKey: key(9)}
			p.SourceCIDRs = modelgen.Prefixes("10.20.7.0/29")
			g.Peers = append(g.Peers, p)
		}},
		{"local address outside", "localAddress", func(g *model.Gateway) { g.LocalAddress = netip.MustParseAddr("10.0.0.1") }},
		{"port 0", "listenPort", func(g *model.Gateway) { g.WireGuard.ListenPort = 0 }},
		{"gateway name", "name", func(g *model.Gateway) { g.Name = "x\n[Peer]" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := cases()[0].gw
			tc.mutate(gw)
			cfg, err := Render(gw)
			if err == nil {
				text, _ := cfg.Text()
				t.Fatalf("accepted:\n%s", text)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(fe.Field, tc.field) {
				t.Fatalf("error %q does not name field %q", err, tc.field)
			}
		})
	}
}

// wgSection is one [Interface] or [Peer] section as wg(8) reads it.
type wgSection struct {
	name string
	kvs  [][2]string
}

// parseWG reads the text like wg(8)'s config parser: '#' starts a comment, all whitespace is
// dropped, a line is a [Section] header or key=value split at the first '='.
func parseWG(text string) ([]wgSection, error) {
	var out []wgSection
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = strings.Map(func(r rune) rune {
			if unicode.IsSpace(r) {
				return -1
			}
			return r
		}, line)
		if line == "" {
			continue
		}
		if strings.EqualFold(line, "[Interface]") || strings.EqualFold(line, "[Peer]") {
			out = append(out, wgSection{name: line})
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || len(out) == 0 {
			return nil, fmt.Errorf("line %d: %q", n, line)
		}
		out[len(out)-1].kvs = append(out[len(out)-1].kvs, [2]string{k, v})
	}
	return out, sc.Err()
}

func TestTextParses(t *testing.T) {
	cfg, text := render(t, cases()[1].gw)
	secs, err := parseWG(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 1+len(cfg.Peers) || secs[0].name != "[Interface]" {
		t.Fatalf("sections %+v", secs)
	}
	want := fmt.Sprint([][2]string{{"Address", "100.64.9.1/24"}, {"ListenPort", "443"}, {"MTU", "1380"}})
	if got := fmt.Sprint(secs[0].kvs); got != want {
		t.Errorf("interface %s, want %s", got, want)
	}
	want = fmt.Sprint([][2]string{{"PublicKey", key(2)}, {"AllowedIPs", "10.20.0.0/16"}, {"Endpoint", "wg.alpha.example.net:51820"}, {"PersistentKeepalive", "25"}})
	if got := fmt.Sprint(secs[1].kvs); got != want {
		t.Errorf("alpha %s, want %s", got, want)
	}
}

// FuzzWireGuardText injects hostile peer names, keys, endpoints and Secret references. Render
// must refuse, or the text must read back (as wg(8) reads it) into exactly the expected
// sections and keys, values equal to the inputs.
func FuzzWireGuardText(f *testing.F) {
	f.Add("branch", key(1), "198.51.100.20:51820", "branch-psk", "psk", uint16(25))
	f.Add("eu.paris", key(7), "[2001:db8::1]:51820", "x", "k", uint16(0))
	f.Add("a\n[Peer]", key(1), "", "x", "k", uint16(0))
	f.Add("p", "x\nEndpoint=1.2.3.4:1", "", "x", "k", uint16(0))
	f.Add("p", key(1), "1.2.3.4:1#c", "x", "k", uint16(0))
	f.Add("p", key(1), "h:1\n[Interface]", "x", "k", uint16(0))
	f.Add("p # c", key(1), "wg.example.org:443", "x\nPrivateKey=abc", "k", uint16(1))
	f.Add("p", key(1), "[::1]:1", "x", "k\rPresharedKey = x", uint16(65535))
	f.Fuzz(func(t *testing.T, name, pub, endpoint, pskName, pskKey string, keepalive uint16) {
		gw := baseGateway()
		p := wgPeer(name, 0, modelgen.NoGrants(), "10.20.0.0/16")
		p.WireGuard.PublicKey = pub
		p.WireGuard.Endpoint = endpoint
		p.WireGuard.PersistentKeepalive = keepalive
		p.WireGuard.PresharedKey = &model.SecretKeyRef{Name: pskName, Key: pskKey}
		benign := wgPeer("zz-benign", 9, modelgen.NoGrants(), "10.99.0.0/16")
		gw.Peers = []model.Peer{p, benign}
		cfg, err := Render(gw)
		if err != nil {
			return
		}
		text, err := cfg.Text()
		if err != nil {
			t.Fatalf("Render accepted what Text refuses: %v", err)
		}
		secs, err := parseWG(text)
		if err != nil {
			t.Fatalf("text does not parse: %v\n%s", err, text)
		}
		peer := [][2]string{{"PublicKey", pub}, {"AllowedIPs", "10.20.0.0/16"}}
		if endpoint != "" {
			peer = append(peer, [2]string{"Endpoint", endpoint})
		}
		if keepalive > 0 {
			peer = append(peer, [2]string{"PersistentKeepalive", fmt.Sprint(keepalive)})
		}
		want := []wgSection{
			{name: "[Interface]", kvs: [][2]string{{"Address", "100.64.9.1/24"}, {"ListenPort", "51820"}, {"MTU", "1420"}}},
			{name: "[Peer]", kvs: peer},
			{name: "[Peer]", kvs: [][2]string{{"PublicKey", key(9)}, {"AllowedIPs", "10.99.0.0/16"}}},
		}
		if fmt.Sprintf("%q", secs) != fmt.Sprintf("%q", want) {
			t.Fatalf("text reads back as\n%q\nwant\n%q\n%s", secs, want, text)
		}
	})
}
