package strongswan

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
)

func render(t testing.TB, gw *model.Gateway, opts Options) (*Config, string) {
	t.Helper()
	cfg, err := Render(gw, opts)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	conf, err := cfg.SwanctlConf()
	if err != nil {
		t.Fatalf("SwanctlConf: %v", err)
	}
	return cfg, conf
}

func TestGolden(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			cfg, conf := render(t, tc.gw, tc.opts)
			golden.Assert(t, tc.name+".swanctl.conf", []byte(conf))
			js, err := json.MarshalIndent(cfg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden.Assert(t, tc.name+".json", append(js, '\n'))
		})
	}
}

// Every IPsec peer gets a connection, dark ones included; peers of the other protocol none.
func TestPeersRendered(t *testing.T) {
	for _, tc := range cases() {
		cfg, _ := render(t, tc.gw, tc.opts)
		var want []string
		for _, p := range tc.gw.Peers {
			if p.IPsec != nil {
				want = append(want, p.Name)
			}
		}
		var got []string
		for _, c := range cfg.Connections {
			got = append(got, c.Peer)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: connections for %v, want %v", tc.name, got, want)
		}
		if len(cfg.SharedKeys) != len(cfg.Connections) {
			t.Errorf("%s: %d shared keys for %d connections", tc.name, len(cfg.SharedKeys), len(cfg.Connections))
		}
	}
}

func TestConnectionDetails(t *testing.T) {
	tcs := cases()
	multi, _ := render(t, tcs[1].gw, tcs[1].opts)
	byPeer := map[string]Connection{}
	for _, c := range multi.Connections {
		byPeer[c.Peer] = c
	}
	paris := byPeer["eu.paris"]
	if paris.Name != "eu_paris" || paris.ChildNames()[0] != "eu_paris" {
		t.Errorf("dotted peer: connection %q children %v", paris.Name, paris.ChildNames())
	}
	charlie := byPeer["charlie"].IKE
	if charlie.Local.ID != "vpn.acme.example" || charlie.Remote.ID != "198.51.100.40" || charlie.Local.Auth != "psk" {
		t.Errorf("charlie auth: %+v %+v", charlie.Local, charlie.Remote)
	}
	ch := charlie.Children["charlie"]
	if !slices.Equal(ch.LocalTS, []string{"100.64.7.0/24"}) || !slices.Equal(ch.RemoteTS, []string{"10.40.0.0/16"}) {
		t.Errorf("charlie selectors: %v -> %v", ch.LocalTS, ch.RemoteTS)
	}
	if ch.StartAction != "trap|start" || ch.DPDAction != "restart" || ch.CloseAction != "start" {
		t.Errorf("charlie actions: %+v", ch)
	}
	// A PSK proves one identity: owned by the remote ID alone, never also by ours.
	if got := multi.SharedKeys[0]; got.ID != "ike-alpha" || !slices.Equal(got.Owners, []string{"alpha.example.net"}) ||
		got.Secret != (model.SecretKeyRef{Name: "alpha-psk", Key: "psk"}) {
		t.Errorf("alpha shared key: %+v", got)
	}

	anyCfg, _ := render(t, tcs[2].gw, tcs[2].opts)
	a := anyCfg.Connections[0]
	if !slices.Equal(a.IKE.RemoteAddrs, []string{"%any"}) || a.IKE.Local.ID != "203.0.113.10" {
		t.Errorf("%%any peer: %+v", a.IKE)
	}
	if c := a.IKE.Children["field-office"]; c.StartAction != "none" || c.DPDAction != "clear" || c.CloseAction != "none" {
		t.Errorf("%%any peer actions: %+v", c)
	}

	v1, _ := render(t, tcs[3].gw, tcs[3].opts)
	l := v1.Connections[0]
	if got := l.ChildNames(); !slices.Equal(got, []string{"legacy~1", "legacy~2"}) {
		t.Errorf("IKEv1 children %v", got)
	}
	if l.IKE.Encap == nil || !*l.IKE.Encap || l.IKE.Version != 1 || l.IKE.ReauthTime != "1d" {
		t.Errorf("IKEv1 connection: %+v", l.IKE)
	}

	// Every connection is bound to the uplink's address when there is one, to any otherwise.
	if !slices.Equal(charlie.LocalAddrs, []string{"%any"}) {
		t.Errorf("no uplink: local_addrs %v", charlie.LocalAddrs)
	}
	up := tcs[1].gw
	up.Uplink = &model.Uplink{Interface: "net1", Address: netip.MustParsePrefix("198.51.100.2/24"), Gateway: netip.MustParseAddr("198.51.100.1")}
	bound, _ := render(t, up, tcs[1].opts)
	for _, c := range bound.Connections {
		if !slices.Equal(c.IKE.LocalAddrs, []string{"198.51.100.2"}) {
			t.Errorf("uplink: %s local_addrs %v", c.Name, c.IKE.LocalAddrs)
		}
	}
}

func TestRefusesOtherGateways(t *testing.T) {
	wg := baseGateway()
	wg.Protocol = model.ProtocolWireGuard
	if _, err := Render(wg, Options{}); !errors.Is(err, ErrNotIPsec) {
		t.Errorf("wireguard gateway: %v", err)
	}
	routed := baseGateway()
	routed.Mode = model.ModeRouted
	if _, err := Render(routed, Options{}); err == nil {
		t.Error("routed mode accepted")
	}
	if _, err := Render(nil, Options{}); err == nil {
		t.Error("nil gateway accepted")
	}
}

// No public address and no local ID: the local identity is left to charon (its IP address)
// and the key is owned by the remote identity alone.
func TestNoLocalIdentityYet(t *testing.T) {
	gw := cases()[0].gw
	gw.PublicAddress = ""
	cfg, conf := render(t, gw, Options{})
	if id := cfg.Connections[0].IKE.Local.ID; id != "" {
		t.Errorf("local id %q", id)
	}
	if o := cfg.SharedKeys[0].Owners; !slices.Equal(o, []string{"198.51.100.20"}) {
		t.Errorf("owners %v", o)
	}
	root, err := swanconf.Parse(conf)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := root.Sub("connections").Sub("branch").Sub("local").Get("id"); ok {
		t.Error("empty local id written")
	}
}

func TestDeterministic(t *testing.T) {
	for _, tc := range cases() {
		_, first := render(t, tc.gw, tc.opts)
		cfg, _ := render(t, tc.gw, tc.opts)
		var firstMsgs []string
		for _, c := range cfg.Connections {
			m, err := c.LoadConnMessage()
			if err != nil {
				t.Fatal(err)
			}
			firstMsgs = append(firstMsgs, m.String())
		}
		for range 20 {
			cfg, conf := render(t, tc.gw, tc.opts)
			if conf != first {
				t.Fatalf("%s: swanctl.conf differs between runs", tc.name)
			}
			for i, c := range cfg.Connections {
				m, err := c.LoadConnMessage()
				if err != nil {
					t.Fatal(err)
				}
				if m.String() != firstMsgs[i] {
					t.Fatalf("%s: load-conn %s differs between runs:\n%s\n%s", tc.name, c.Name, m, firstMsgs[i])
				}
			}
		}
	}
}

// The structured form marshals with govici, unmarshals back to the same value, and holds the
// keys charon expects; the swanctl.conf text holds exactly the same tree.
func TestVICIMessages(t *testing.T) {
	for _, tc := range cases() {
		cfg, conf := render(t, tc.gw, tc.opts)
		root, err := swanconf.Parse(conf)
		if err != nil {
			t.Fatalf("%s: parse: %v\n%s", tc.name, err, conf)
		}
		conns := root.Sub("connections")
		if conns == nil || len(root.Entries) != 1 {
			t.Fatalf("%s: top level %s", tc.name, root)
		}
		if len(conns.Entries) != len(cfg.Connections) {
			t.Fatalf("%s: %d connections in the text, %d rendered", tc.name, len(conns.Entries), len(cfg.Connections))
		}
		for i, c := range cfg.Connections {
			m, err := c.LoadConnMessage()
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if !slices.Equal(m.Keys(), []string{c.Name}) {
				t.Fatalf("%s: load-conn keys %v", tc.name, m.Keys())
			}
			body, ok := m.Get(c.Name).(*vici.Message)
			if !ok {
				t.Fatalf("%s: %s is not a section", tc.name, c.Name)
			}
			for _, k := range []string{"version", "local_addrs", "remote_addrs", "proposals", "mobike", "dpd_delay",
				"rekey_time", "reauth_time", "unique", "keyingtries", "local", "remote", "children"} {
				if body.Get(k) == nil {
					t.Errorf("%s/%s: key %s missing", tc.name, c.Name, k)
				}
			}
			if v := body.Get("mobike"); v != "no" {
				t.Errorf("%s/%s: mobike = %v", tc.name, c.Name, v)
			}
			if enc := body.Get("encap"); (enc != nil) != tc.opts.ForceEncap {
				t.Errorf("%s/%s: encap = %v with ForceEncap %v", tc.name, c.Name, enc, tc.opts.ForceEncap)
			}
			local := body.Get("local").(*vici.Message)
			if local.Get("auth") != "psk" {
				t.Errorf("%s/%s: local auth %v", tc.name, c.Name, local.Get("auth"))
			}
			children := body.Get("children").(*vici.Message)
			if !slices.Equal(children.Keys(), c.ChildNames()) {
				t.Errorf("%s/%s: children %v, want %v", tc.name, c.Name, children.Keys(), c.ChildNames())
			}
			for _, n := range children.Keys() {
				ch := children.Get(n).(*vici.Message)
				for _, k := range []string{"local_ts", "remote_ts", "esp_proposals", "rekey_time", "start_action", "dpd_action", "close_action"} {
					if ch.Get(k) == nil {
						t.Errorf("%s/%s/%s: key %s missing", tc.name, c.Name, n, k)
					}
				}
			}

			var back map[string]IKE
			back = map[string]IKE{}
			if err := vici.UnmarshalMessage(m, back); err != nil {
				t.Fatalf("%s: unmarshal: %v", tc.name, err)
			}
			if !reflect.DeepEqual(back[c.Name], c.IKE) {
				t.Errorf("%s/%s: round trip\n got %+v\nwant %+v", tc.name, c.Name, back[c.Name], c.IKE)
			}

			// One source: the text's section is the message, key for key, in the same order.
			sec := conns.Entries[i].Section
			if sec == nil || sec.Name != c.Name {
				t.Fatalf("%s: text entry %d is not connection %s", tc.name, i, c.Name)
			}
			if err := sameTree(sec, body, "connections."+c.Name); err != nil {
				t.Errorf("%s: text and VICI message differ: %v", tc.name, err)
			}
		}
	}
}

// sameTree reports whether a parsed swanctl.conf section holds exactly the message's keys, in
// the same order: strings equal, lists equal after swanctl's list splitting, sections alike.
func sameTree(sec *swanconf.Section, m *vici.Message, path string) error {
	keys := m.Keys()
	if len(sec.Entries) != len(keys) {
		return errorf("%s: %d entries in the text (%v), %d in the message (%v)", path, len(sec.Entries), entryNames(sec), len(keys), keys)
	}
	for i, k := range keys {
		e := sec.Entries[i]
		switch v := m.Get(k).(type) {
		case string:
			if e.Section != nil || e.Key != k || e.Value != v {
				return errorf("%s: entry %d is %s, want %s = %q", path, i, describe(e), k, v)
			}
		case []string:
			if e.Section != nil || e.Key != k || !slices.Equal(swanconf.SplitList(e.Value), v) {
				return errorf("%s: entry %d is %s, want list %s = %q", path, i, describe(e), k, v)
			}
		case *vici.Message:
			if e.Section == nil || e.Section.Name != k {
				return errorf("%s: entry %d is %s, want section %s", path, i, describe(e), k)
			}
			if err := sameTree(e.Section, v, path+"."+k); err != nil {
				return err
			}
		default:
			return errorf("%s.%s: unexpected message element %T", path, k, v)
		}
	}
	return nil
}

func entryNames(s *swanconf.Section) []string {
	var out []string
	for _, e := range s.Entries {
		if e.Section != nil {
			out = append(out, e.Section.Name+"{}")
		} else {
			out = append(out, e.Key)
		}
	}
	return out
}

func describe(e swanconf.Entry) string {
	if e.Section != nil {
		return "section " + e.Section.Name
	}
	return e.Key + " = " + strings.TrimSpace(e.Value)
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// A peer the model left without a tunnel gets no connection and no key; two peers whose
// subnets still overlap, or that share a remote ID, are refused (one source, one tunnel; a
// PSK proves one identity).
func TestOneSourceOneTunnel(t *testing.T) {
	older := ipsecPeer("older", "203.0.113.9", "older.example.com", model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow}, "203.0.113.0/28")
	dark := ipsecPeer("younger", "203.0.113.10", "younger.example.com", model.Decision{Reason: model.ReasonSubnetConflict})
	dark.WithheldCIDRs = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/29")}
	gw := baseGateway()
	gw.Peers = []model.Peer{older, dark}
	cfg, err := Render(gw, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Connections) != 1 || cfg.Connections[0].Peer != "older" || len(cfg.SharedKeys) != 1 {
		t.Fatalf("connections %+v keys %+v, want only the older peer's", cfg.Connections, cfg.SharedKeys)
	}

	overlapping := ipsecPeer("younger", "203.0.113.10", "younger.example.com", model.Decision{Reason: model.ReasonNoGrants}, "203.0.113.0/29")
	gw.Peers = []model.Peer{older, overlapping}
	if _, err := Render(gw, Options{}); err == nil || !strings.Contains(err.Error(), `peers["younger"].sourceCIDRs: 203.0.113.0/29 overlaps 203.0.113.0/28 of peer "older"`) {
		t.Errorf("overlapping selectors: %v", err)
	}

	sameID := ipsecPeer("younger", "203.0.113.10", "Older.example.com", model.Decision{Reason: model.ReasonNoGrants}, "198.51.100.0/28")
	gw.Peers = []model.Peer{older, sameID}
	if _, err := Render(gw, Options{}); err == nil || !strings.Contains(err.Error(), `remoteID: "Older.example.com" is also the remote ID of peer "older"`) {
		t.Errorf("shared remote ID: %v", err)
	}
}

// Kernel ESP (Options.Reqids): a peer's child for all its subnets carries the peer's reqid
// from the model, its child for its i-th subnet that subnet's reqid (the peer's own in a model
// without subnet reqids), no two children of a peer the same one when the model has them, the
// same on every render; kernel-libipsec (no Reqids): no child has one. A peer without a reqid
// cannot be rendered for kernel ESP.
func TestReqidsInKernelModeOnly(t *testing.T) {
	for _, tc := range cases() {
		for _, reqids := range []bool{true, false} {
			opts := tc.opts
			opts.Reqids = reqids
			cfg, conf := render(t, tc.gw, opts)
			_, again := render(t, tc.gw, opts)
			if conf != again {
				t.Errorf("%s: two renders differ", tc.name)
			}
			byPeer := map[string]model.Peer{}
			for _, p := range tc.gw.Peers {
				byPeer[p.Name] = p
			}
			for _, c := range cfg.Connections {
				ip := byPeer[c.Peer].IPsec
				seen := map[string]string{}
				for n, ch := range c.IKE.Children {
					want := ""
					if reqids {
						want = fmt.Sprint(ip.Reqid)
						if _, i, ok := strings.Cut(n, "~"); ok && len(ip.SubnetReqids) > 0 {
							k, _ := strconv.Atoi(i)
							want = fmt.Sprint(ip.SubnetReqids[k-1])
						}
					}
					if ch.Reqid != want {
						t.Errorf("%s (reqids %v): child %s has reqid %q, want %q", tc.name, reqids, n, ch.Reqid, want)
					}
					if reqids && !strings.Contains(conf, "reqid = \""+want+"\"\n") {
						t.Errorf("%s: swanctl.conf has no line reqid = %q", tc.name, want)
					}
					if other, dup := seen[ch.Reqid]; dup && reqids && len(ip.SubnetReqids) > 0 {
						t.Errorf("%s: children %s and %s of peer %s share reqid %s", tc.name, other, n, c.Peer, ch.Reqid)
					}
					seen[ch.Reqid] = n
				}
				if reqids && len(c.IKE.Children) > 0 {
					t.Logf("%s: peer %s -> reqids %v", tc.name, c.Peer, ip.Reqids())
				}
			}
			if !reqids && strings.Contains(conf, "reqid") {
				t.Errorf("%s: userspace rendering mentions a reqid:\n%s", tc.name, conf)
			}
		}
	}
	gw := cases()[0].gw
	gw.Peers[0].IPsec.Reqid = 0
	if _, err := Render(gw, Options{Reqids: true}); err == nil || !strings.Contains(err.Error(), "reqid") {
		t.Errorf("a peer without a reqid rendered for kernel ESP: %v", err)
	}
}
