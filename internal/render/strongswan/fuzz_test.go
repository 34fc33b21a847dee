package strongswan

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

// FuzzSwanctlConf injects hostile peer names, identities, proposals and addresses into a
// gateway. Render must either refuse, or produce a swanctl.conf that parses back into exactly
// the expected tree — the same connections, keys and sections, values equal to the inputs — and
// a load-conn message that round-trips through govici.
func FuzzSwanctlConf(f *testing.F) {
	type seed struct{ name, localID, remoteID, address, ikeProp, espProp string }
	for _, s := range []seed{
		{"branch", "", "198.51.100.20", "198.51.100.20", "aes256-sha256-modp2048", "aes256gcm16"},
		{"eu.paris", "vpn.example", "C=DE, O=Example Org, CN=fw 01", "%any", "aes128-sha1-modp1024", "aes128-sha1"},
		{"a\nb", "x", "y", "1.2.3.4", "aes", "aes"},
		{"include", "x", "y", "1.2.3.4", "aes", "aes"},
		{"p", `x" } evil { a = "b`, `\"`, "fw.example.org", "aes", "aes"},
		{"p", "x\n}\nconnections {\nevil {", "y", "1.2.3.4", "aes", "aes"},
		{"p", "x", "y\r", "1.2.3.4", "aes", "aes"},
		{"p", "x", "y", "1.2.3.4,0.0.0.0/0", "aes", "aes"},
		{"p", "x", "y", `1.2.3.4" }`, "aes", "aes"},
		{"p", "x", "y", "1.2.3.4", "aes,3des", "aes"},
		{"p", "x", "y", "1.2.3.4", "aes", `aes"}`},
		{"p", "x", "y", "1.2.3.4", "aes # c", "aes"},
		{"p", "# c", "{}=,:.", "::1", "a-b-c", "x_y.z"},
		{"p.q.r", "x\\", "\\", "example.org.", "aes", "aes"},
		{"p", "x", "y", "1.2.3.4", "aes\x00", "aes"},
		{"p", "\u2028", "\u0085", "1.2.3.4", "aes", "aes"},
	} {
		f.Add(s.name, s.localID, s.remoteID, s.address, s.ikeProp, s.espProp)
	}
	f.Fuzz(func(t *testing.T, name, localID, remoteID, address, ikeProp, espProp string) {
		gw := baseGateway()
		gw.IPsec.LocalID = localID
		gw.IPsec.IKEProposals = []string{ikeProp, "aes256-sha256-modp2048"}
		hostile := ipsecPeer(name, address, remoteID, modelgen.NoGrants(), "10.20.0.0/16")
		hostile.IPsec.ESPProposals = []string{espProp}
		benign := ipsecPeer("zz-benign", "198.51.100.99", "198.51.100.99", modelgen.NoGrants(), "10.99.0.0/16")
		gw.Peers = []model.Peer{hostile, benign}

		cfg, err := Render(gw, Options{})
		if err != nil {
			return
		}
		conf, err := cfg.SwanctlConf()
		if err != nil {
			t.Fatalf("Render accepted what SwanctlConf refuses: %v", err)
		}
		root, err := swanconf.Parse(conf)
		if err != nil {
			t.Fatalf("rendered text does not parse: %v\n%s", err, conf)
		}

		wantLocalID := localID
		if wantLocalID == "" {
			wantLocalID = gw.PublicAddress
		}
		hostileName := strings.ReplaceAll(name, ".", "_")
		want := vici.NewMessage()
		set(t, want, hostileName, expectedConn(t, hostileName, address, wantLocalID, remoteID, ikeProp, espProp, "10.20.0.0/16"))
		set(t, want, "zz-benign", expectedConn(t, "zz-benign", "198.51.100.99", wantLocalID, "198.51.100.99", ikeProp, "aes256gcm16-ecp256,aes256-sha256-modp2048", "10.99.0.0/16"))

		if len(root.Entries) != 1 || root.Entries[0].Section == nil || root.Entries[0].Section.Name != "connections" {
			t.Fatalf("top level is not exactly one connections section:\n%s\n%s", root, conf)
		}
		if err := sameTree(root.Entries[0].Section, want, "connections"); err != nil {
			t.Fatalf("%v\n%s", err, conf)
		}

		for _, c := range cfg.Connections {
			m, err := c.LoadConnMessage()
			if err != nil {
				t.Fatalf("load-conn: %v", err)
			}
			back := map[string]IKE{}
			if err := vici.UnmarshalMessage(m, back); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if !reflect.DeepEqual(back[c.Name], c.IKE) || len(back) != 1 {
				t.Fatalf("load-conn %s does not round-trip", c.Name)
			}
		}
	})
}

func set(t *testing.T, m *vici.Message, k string, v any) {
	t.Helper()
	if err := m.Set(k, v); err != nil {
		t.Fatal(err)
	}
}

// expectedConn writes down, independently of the renderer, the tree one connection must have.
func expectedConn(t *testing.T, name, address, localID, remoteID, ikeProp, espProps, subnet string) *vici.Message {
	start, dpd, closeAction := "trap|start", "restart", "start"
	if address == "%any" {
		start, dpd, closeAction = "none", "clear", "none"
	}
	local := vici.NewMessage()
	set(t, local, "auth", "psk")
	set(t, local, "id", localID)
	remote := vici.NewMessage()
	set(t, remote, "auth", "psk")
	set(t, remote, "id", remoteID)
	child := vici.NewMessage()
	set(t, child, "mode", "tunnel")
	set(t, child, "local_ts", []string{"100.64.7.0/24"})
	set(t, child, "remote_ts", []string{subnet})
	set(t, child, "esp_proposals", strings.Split(espProps, ","))
	set(t, child, "rekey_time", "1h")
	set(t, child, "start_action", start)
	set(t, child, "dpd_action", dpd)
	set(t, child, "close_action", closeAction)
	children := vici.NewMessage()
	set(t, children, name, child)

	c := vici.NewMessage()
	set(t, c, "version", "2")
	set(t, c, "local_addrs", []string{"%any"})
	set(t, c, "remote_addrs", []string{address})
	set(t, c, "proposals", []string{ikeProp, "aes256-sha256-modp2048"})
	set(t, c, "mobike", "no")
	set(t, c, "send_certreq", "no")
	set(t, c, "dpd_delay", (30 * time.Second).String())
	set(t, c, "rekey_time", "4h")
	set(t, c, "reauth_time", "0s")
	set(t, c, "unique", "replace")
	set(t, c, "keyingtries", "0")
	set(t, c, "local", local)
	set(t, c, "remote", remote)
	set(t, c, "children", children)
	return c
}
