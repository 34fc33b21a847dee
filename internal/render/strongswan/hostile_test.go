package strongswan

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
)

// Values that cannot be written safely are refused with the field named; the model's
// validation rejects most of them first, the renderer must not rely on it.
func TestHostileValuesRefused(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		mutate      func(*model.Gateway)
	}{
		{"peer name with newline", `peers["a\nb"].name`, func(g *model.Gateway) { g.Peers[0].Name = "a\nb" }},
		{"peer name with brace", `peers["a}b"].name`, func(g *model.Gateway) { g.Peers[0].Name = "a}b" }},
		{"peer name include", "name", func(g *model.Gateway) { g.Peers[0].Name = "include" }},
		{"peer name uppercase", "name", func(g *model.Gateway) { g.Peers[0].Name = "Branch" }},
		{"address list injection", "ipsec.remoteAddress", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteAddress = "198.51.100.20,0.0.0.0/0" }},
		{"address quote", "ipsec.remoteAddress", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteAddress = `1.2.3.4" }` }},
		{"address empty", "ipsec.remoteAddress", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteAddress = "" }},
		{"remote id newline", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = "x\n}\nevil {" }},
		{"remote id carriage return", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = "x\rfoo = bar" }},
		{"remote id NUL", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = "x\x00" }},
		{"remote id invalid UTF-8", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = "x\xff" }},
		{"remote id empty", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = "" }},
		{"remote id not ASCII", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = "ü € 漢字" }},
		{"remote id too long", "ipsec.remoteID", func(g *model.Gateway) { g.Peers[0].IPsec.RemoteID = strings.Repeat("a", 256) }},
		{"local id newline", "ipsec.localID", func(g *model.Gateway) { g.IPsec.LocalID = "a\nb" }},
		{"public address newline", "publicAddress", func(g *model.Gateway) { g.PublicAddress = "203.0.113.10\n" }},
		{"ike proposal comma", "ipsec.ikeProposals[0]", func(g *model.Gateway) { g.IPsec.IKEProposals = []string{"aes256-sha256,3des-md5-modp768"} }},
		{"ike proposal quote", "ipsec.ikeProposals[1]", func(g *model.Gateway) { g.IPsec.IKEProposals = []string{"aes256-sha256", `x"`} }},
		{"ike proposals empty", "ipsec.ikeProposals", func(g *model.Gateway) { g.IPsec.IKEProposals = nil }},
		{"esp proposal brace", "ipsec.espProposals[0]", func(g *model.Gateway) { g.Peers[0].IPsec.ESPProposals = []string{"aes}"} }},
		{"esp proposal space", "ipsec.espProposals[0]", func(g *model.Gateway) { g.Peers[0].IPsec.ESPProposals = []string{"aes256 sha256"} }},
		{"psk secret name", "ipsec.psk", func(g *model.Gateway) { g.Peers[0].IPsec.PSK.Name = "x\ny" }},
		{"psk secret key", "ipsec.psk", func(g *model.Gateway) { g.Peers[0].IPsec.PSK.Key = "a b" }},
		{"a second peer carrying the first one's source", "sourceCIDRs", func(g *model.Gateway) {
			p := g.Peers[0]
			p.Name, p.IPsec = "intruder", &model.IPsecPeer{RemoteAddress: "%any", RemoteID: "intruder.example", ESPProposals: p.IPsec.ESPProposals, PSK: p.IPsec.PSK}
			g.Peers = append(g.Peers, p)
		}},
		{"ike version", "ipsec.ikeVersion", func(g *model.Gateway) { g.IPsec.IKEVersion = 3 }},
		{"dpd action", "ipsec.dpdAction", func(g *model.Gateway) { g.IPsec.DPDAction = "restart\nx = y" }},
		{"negative rekey", "ipsec.rekeyTime", func(g *model.Gateway) { g.IPsec.RekeyTime = -time.Second }},
		{"service CIDR", "serviceCIDR", func(g *model.Gateway) { g.ServiceCIDR = netipPrefixZero() }},
		{"gateway name", "name", func(g *model.Gateway) { g.Name = "acme\n}" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := cases()[0].gw
			tc.mutate(gw)
			cfg, err := Render(gw, Options{})
			if err == nil {
				conf, _ := cfg.SwanctlConf()
				t.Fatalf("accepted:\n%s", conf)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || !strings.Contains(fe.Field, tc.field) {
				t.Fatalf("error %q does not name field %q", err, tc.field)
			}
		})
	}
}

// Identities may hold anything printable — DNs with spaces and commas, quotes, backslashes,
// braces, '#', '=' — and come back from the text unchanged, with nothing injected.
func TestHostileIdentitiesQuoted(t *testing.T) {
	for _, id := range []string{
		`C=DE, O=Example "Quoted" Org, CN=fw 01`,
		`back\slash\`,
		`x" } evil { a = "b`,
		`# not a comment`,
		`{}=,:.`,
		`\"`,
	} {
		gw := cases()[0].gw
		gw.Peers[0].IPsec.RemoteID = id
		gw.IPsec.LocalID = id + "-local"
		_, conf := render(t, gw, Options{})
		root, err := swanconf.Parse(conf)
		if err != nil {
			t.Fatalf("id %q: %v\n%s", id, err, conf)
		}
		c := root.Sub("connections").Sub("branch")
		if got, _ := c.Sub("remote").Get("id"); got != id {
			t.Errorf("remote id %q came back as %q", id, got)
		}
		if got, _ := c.Sub("local").Get("id"); got != id+"-local" {
			t.Errorf("local id %q came back as %q", id+"-local", got)
		}
		if len(root.Entries) != 1 || len(root.Sub("connections").Entries) != 1 || len(c.Entries) != 14 {
			t.Errorf("id %q changed the structure:\n%s", id, root)
		}
	}
}
