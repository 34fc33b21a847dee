package deviceconfig

import (
	"bufio"
	"encoding/xml"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

// Every IPsec format for every case, and wg-quick for the WireGuard peer: the output or the
// refusal is golden; every output passes its format's check.
func TestGolden(t *testing.T) {
	for _, tc := range cases() {
		for _, f := range Formats() {
			if !f.IPsec {
				continue
			}
			t.Run(tc.name+"/"+f.Name, func(t *testing.T) {
				out, err := RenderInput(tc.in, f.Name)
				if err != nil {
					golden.Assert(t, tc.name+"."+f.Name, []byte("ERROR: "+err.Error()+"\n"))
					return
				}
				golden.Assert(t, tc.name+"."+f.Name, []byte(out))
				checkFormat(t, f.Name, out)
				checkNoSecretUnlessAsked(t, tc.in, out)
			})
		}
	}
	for _, f := range []string{"wg-quick", "sheet"} {
		for _, psk := range []string{"", "wg-preshared-key-value-0000000000000000000="} {
			name := "wireguard." + f
			if psk != "" {
				name = "wireguard-with-secrets." + f
			}
			t.Run(name, func(t *testing.T) {
				in := Input{Gateway: wireguardGateway(), Peer: wireguardPeer(), PSK: psk}
				out, err := RenderInput(in, f)
				if err != nil {
					t.Fatal(err)
				}
				golden.Assert(t, name, []byte(out))
				checkFormat(t, f, out)
				checkNoSecretUnlessAsked(t, in, out)
			})
		}
	}
}

// Formats whose outputs succeed for each case: the refusals are deliberate and listed.
func TestRefusalsAreTheExpectedOnes(t *testing.T) {
	want := map[string][]string{
		"ipsec-gcm":      {"mikrotik"},
		"ipsec-cbc":      nil,
		"ipsec-ikev1":    {"cisco-ios", "cisco-asa", "junos", "paloalto"},
		"ipsec-defaults": {"cisco-asa"}, // an email identity cannot be an ASA's
	}
	for _, tc := range cases() {
		var refused []string
		for _, f := range Formats() {
			if !f.IPsec {
				continue
			}
			if _, err := RenderInput(tc.in, f.Name); err != nil {
				refused = append(refused, f.Name)
			}
		}
		if !slices.Equal(refused, want[tc.name]) {
			t.Errorf("%s: refused by %v, want %v", tc.name, refused, want[tc.name])
		}
	}
}

// Refusals outside the golden matrix, each with the reason in its message.
func TestRefusals(t *testing.T) {
	x25519 := ipsecGateway(&vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Proposals: []string{"aes256-sha256-curve25519"}}})
	ikev1 := ipsecGateway(&vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Version: 1, Proposals: []string{"aes256-sha256-modp2048"}}})
	peer := ipsecPeer("hq", "203.0.113.10", "", vpnv1.ESPSettings{}, "192.168.10.0/24")
	dnPeer := ipsecPeer("hq", "203.0.113.10", "C=DE, O=Acme, CN=hq", vpnv1.ESPSettings{}, "192.168.10.0/24")
	noAddress := ipsecGateway(nil)
	noAddress.Status.PublicAddress = ""
	noCIDR := ipsecGateway(nil)
	noCIDR.Status.ServiceCIDR = ""
	overlap := ipsecPeer("hq", "203.0.113.10", "", vpnv1.ESPSettings{}, "100.64.12.0/25")
	prfMismatch := ipsecGateway(&vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Proposals: []string{"aes256-sha256-prfsha384-modp2048"}}})
	esn := ipsecPeer("hq", "203.0.113.10", "", vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-esn"}}, "192.168.10.0/24")
	wg := Input{Gateway: wireguardGateway(), Peer: wireguardPeer()}
	wgNoKey := wireguardGateway()
	wgNoKey.Status.WireGuardPublicKey = ""

	for _, tc := range []struct {
		name, format string
		in           Input
		want         string
	}{
		{"x25519-junos", "junos", Input{Gateway: x25519, Peer: peer}, "Junos has no curve25519 for IKE"},
		{"x25519-paloalto", "paloalto", Input{Gateway: x25519, Peer: peer}, "PAN-OS has no curve25519 for IKE"},
		{"x25519-cisco-ios", "cisco-ios", Input{Gateway: x25519, Peer: peer}, "Cisco IOS-XE has no curve25519 for IKE"},
		{"x25519-cisco-asa", "cisco-asa", Input{Gateway: x25519, Peer: peer}, "Cisco ASA has no curve25519 for IKE"},
		{"ikev1-cisco-ios", "cisco-ios", Input{Gateway: ikev1, Peer: peer}, "generated for IKEv2 only"},
		{"ikev1-junos", "junos", Input{Gateway: ikev1, Peer: peer}, "generated for IKEv2 only"},
		{"dn-mikrotik", "mikrotik", Input{Gateway: ipsecGateway(nil), Peer: dnPeer}, "cannot use a distinguished name"},
		{"dn-junos", "junos", Input{Gateway: ipsecGateway(nil), Peer: dnPeer}, "cannot use a distinguished name"},
		{"no-public-address", "strongswan", Input{Gateway: noAddress, Peer: peer}, "no public address yet"},
		{"no-service-cidr", "strongswan", Input{Gateway: noCIDR, Peer: peer}, "no service CIDR yet"},
		{"no-tunnel", "strongswan", Input{Gateway: ipsecGateway(nil), Peer: overlap}, "gets no tunnel"},
		{"prf-fortigate", "fortigate", Input{Gateway: prfMismatch, Peer: peer}, "FortiOS takes the PRF from the integrity algorithm"},
		{"esn", "strongswan", Input{Gateway: ipsecGateway(nil), Peer: esn}, "extended sequence numbers"},
		{"wg-quick-for-ipsec", "wg-quick", Input{Gateway: ipsecGateway(nil), Peer: peer}, "format wg-quick is for WireGuard peers"},
		{"fortigate-for-wireguard", "fortigate", wg, "format fortigate is for IPsec peers"},
		{"unknown-format", "vyos", wg, `unknown format "vyos"`},
		{"psk-space-cisco", "cisco-ios", Input{Gateway: ipsecGateway(nil), Peer: peer, PSK: "has a space"}, "Cisco IOS-XE's syntax cannot carry"},
		{"psk-quote-libreswan", "libreswan", Input{Gateway: ipsecGateway(nil), Peer: peer, PSK: `has"quote`}, "libreswan's syntax cannot carry"},
		{"psk-newline", "opnsense", Input{Gateway: ipsecGateway(nil), Peer: peer, PSK: "line\nbreak"}, "control character"},
		{"wireguard-no-key", "wg-quick", Input{Gateway: wgNoKey, Peer: wireguardPeer()}, "no WireGuard public key yet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := RenderInput(tc.in, tc.format)
			if err == nil {
				t.Fatalf("rendered, want a refusal containing %q:\n%s", tc.want, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if tc.in.PSK != "" && strings.Contains(err.Error(), tc.in.PSK) {
				t.Fatalf("the error echoes the key: %v", err)
			}
		})
	}
}

func checkNoSecretUnlessAsked(t *testing.T, in Input, out string) {
	t.Helper()
	if in.PSK != "" {
		if !strings.Contains(out, in.PSK) {
			t.Errorf("the key passed is not in the output")
		}
		if strings.Contains(out, phPSK) {
			t.Errorf("the output has the key and its placeholder")
		}
	}
}

// checkFormat runs the check that exists for the format.
func checkFormat(t *testing.T, format, out string) {
	t.Helper()
	switch format {
	case "strongswan":
		if _, err := swanconf.Parse(out); err != nil {
			t.Errorf("swanctl.conf does not parse: %v", err)
		}
	case "pfsense", "opnsense":
		checkXML(t, out)
	case "junos", "paloalto":
		checkLines(t, out, "#", func(l string) bool { return strings.HasPrefix(l, "set ") }, "set ")
	case "mikrotik":
		checkLines(t, out, "#", func(l string) bool { return strings.HasPrefix(l, "/") }, "/")
	case "fortigate":
		checkFortigate(t, out)
	case "wg-quick":
		checkINI(t, out)
	case "libreswan":
		checkLibreswan(t, out)
	case "cisco-ios", "cisco-asa":
		checkLines(t, out, "!", func(l string) bool { return l != "" && !strings.HasPrefix(l, "\t") }, "a command")
	case "sheet":
		s, err := ParseSheet([]byte(out))
		if err != nil {
			t.Errorf("the sheet does not parse: %v", err)
		} else if _, err := Import(s, ImportOptions{Rand: zeroReader{}}); err != nil {
			t.Errorf("the sheet does not import: %v", err)
		}
	}
}

func checkXML(t *testing.T, out string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(out))
	d.Strict = true
	roots := 0
	depth := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("XML not well-formed: %v", err)
		}
		switch tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
			}
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if roots != 1 || depth != 0 {
		t.Errorf("XML fragment has %d root elements (depth %d at the end), want one", roots, depth)
	}
}

// checkLines: every line is blank, a comment, or passes ok.
func checkLines(t *testing.T, out, comment string, ok func(string) bool, what string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, comment) {
			continue
		}
		if strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "  ") && what == "a command" {
			continue // an indented sub-command under a Cisco mode command
		}
		if !ok(l) {
			t.Errorf("line %d does not start with %s: %q", n, what, l)
		}
	}
}

// checkFortigate: config/end and edit/next are balanced and nested, every other line is a
// set command inside an edit.
func checkFortigate(t *testing.T, out string) {
	t.Helper()
	var stack []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		word := strings.Fields(l)[0]
		switch word {
		case "config":
			stack = append(stack, "config")
		case "edit":
			if len(stack) == 0 || stack[len(stack)-1] != "config" {
				t.Fatalf("line %d: edit outside a config block", n)
			}
			stack = append(stack, "edit")
		case "next":
			if len(stack) == 0 || stack[len(stack)-1] != "edit" {
				t.Fatalf("line %d: next without edit", n)
			}
			stack = stack[:len(stack)-1]
		case "end":
			if len(stack) == 0 || stack[len(stack)-1] != "config" {
				t.Fatalf("line %d: end without config", n)
			}
			stack = stack[:len(stack)-1]
		case "set":
			if len(stack) == 0 || stack[len(stack)-1] != "edit" {
				t.Fatalf("line %d: set outside an edit", n)
			}
			if strings.Count(l, `"`)%2 != 0 {
				t.Fatalf("line %d: unbalanced quotes", n)
			}
		default:
			t.Fatalf("line %d: unexpected %q", n, l)
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed blocks: %v", stack)
	}
}

var iniKey = regexp.MustCompile(`^[A-Za-z]+ = \S.*$`)

// checkINI: wg-quick's INI: sections, "Key = value" lines, comments.
func checkINI(t *testing.T, out string) {
	t.Helper()
	section := ""
	seen := map[string]map[string]bool{}
	allowed := map[string][]string{
		"Interface": {"PrivateKey", "Address", "ListenPort", "MTU", "DNS"},
		"Peer":      {"PublicKey", "PresharedKey", "Endpoint", "AllowedIPs", "PersistentKeepalive"},
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = strings.Trim(l, "[]")
			if _, ok := allowed[section]; !ok {
				t.Fatalf("line %d: unknown section %q", n, l)
			}
			if seen[section] == nil {
				seen[section] = map[string]bool{}
			}
		case iniKey.MatchString(l):
			k := strings.Fields(l)[0]
			if section == "" || !slices.Contains(allowed[section], k) {
				t.Fatalf("line %d: %q not allowed in [%s]", n, k, section)
			}
			if seen[section][k] {
				t.Fatalf("line %d: %s twice", n, k)
			}
			seen[section][k] = true
		default:
			t.Fatalf("line %d: not INI: %q", n, l)
		}
	}
	for _, k := range []string{"PublicKey", "Endpoint", "AllowedIPs"} {
		if !seen["Peer"][k] {
			t.Errorf("[Peer] has no %s", k)
		}
	}
}

// checkLibreswan: one conn, tab-indented key=value lines, the keys libreswan 4 knows, and
// libreswan's own parser accepts it (`ipsec addconn --checkconfig`, its binary taken out of
// Debian's package by hack/libreswan.sh: the package itself conflicts with charon).
func checkLibreswan(t *testing.T, out string) {
	t.Helper()
	checkWithAddconn(t, out)
	known := []string{"ikev2", "authby", "left", "leftid", "leftsubnet", "leftsubnets", "right", "rightid",
		"rightsubnet", "ike", "esp", "pfs", "ikelifetime", "salifetime", "dpddelay", "dpdtimeout", "dpdaction",
		"mobike", "encapsulation", "auto"}
	conns := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "conn "):
			conns++
		case strings.HasPrefix(l, "\t"):
			k, v, ok := strings.Cut(strings.TrimPrefix(l, "\t"), "=")
			if !ok || v == "" || !slices.Contains(known, k) {
				t.Fatalf("line %d: %q", n, l)
			}
		default:
			t.Fatalf("line %d: %q", n, l)
		}
	}
	if conns != 1 {
		t.Fatalf("%d conns", conns)
	}
}

// The client's swanctl.conf is the gateway's connection seen from the other end: same
// proposals, DPD delay and rekey times, IDs swapped, selectors swapped.
func TestStrongSwanMirrorsTheGateway(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			peer := *tc.in.Peer
			g := tc.in.Gateway.DeepCopy()
			m, errs := model.Build(model.Input{Gateway: g, Peers: []vpnv1.VPNPeer{peer},
				Config: model.Config{PoolCIDR: model.DefaultPoolCIDR}, ServiceCIDR: netip.MustParsePrefix(g.Status.ServiceCIDR),
				PublicAddress: g.Status.PublicAddress})
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			gwCfg, err := strongswan.Render(m, strongswan.Options{})
			if err != nil {
				t.Fatal(err)
			}
			gc := gwCfg.Connections[0].IKE
			out, err := RenderInput(tc.in, "strongswan")
			if err != nil {
				t.Fatal(err)
			}
			tree, err := swanconf.Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			conns := tree.Sub("connections").Sections()
			if len(conns) != 1 {
				t.Fatalf("%d connections", len(conns))
			}
			c := conns[0]
			get := func(s *swanconf.Section, k string) string {
				v, _ := s.Get(k)
				return v
			}
			eq := func(what, got, want string) {
				if got != want {
					t.Errorf("%s: client %q, gateway %q", what, got, want)
				}
			}
			eq("proposals", get(c, "proposals"), strings.Join(gc.Proposals, ", "))
			eq("remote_addrs", get(c, "remote_addrs"), g.Status.PublicAddress)
			eq("dpd_delay", get(c, "dpd_delay"), gc.DPDDelay)
			eq("rekey_time", get(c, "rekey_time"), gc.RekeyTime)
			eq("local id", get(c.Sub("local"), "id"), gc.Remote.ID)
			eq("remote id", get(c.Sub("remote"), "id"), gc.Local.ID)
			// the site's children are the gateway's, less the gateway's per-subnet ones beside
			// its child for all subnets (those answer a site that negotiates one per subnet)
			var names []string
			for n := range gc.Children {
				if base, _, perSubnet := strings.Cut(n, "~"); perSubnet {
					if _, all := gc.Children[base]; all {
						continue
					}
				}
				names = append(names, n)
			}
			slices.Sort(names)
			chs := c.Sub("children").Sections()
			if len(chs) != len(names) {
				t.Fatalf("%d children, the gateway has %d", len(chs), len(names))
			}
			for i, ch := range chs {
				gch := gc.Children[names[i]]
				eq("esp_proposals", get(ch, "esp_proposals"), strings.Join(gch.ESPProposals, ", "))
				eq("local_ts", get(ch, "local_ts"), strings.Join(gch.RemoteTS, ", "))
				eq("remote_ts", get(ch, "remote_ts"), strings.Join(gch.LocalTS, ", "))
				eq("child rekey_time", get(ch, "rekey_time"), gch.RekeyTime)
			}
		})
	}
}

// Every vendor name in the table reads back as its algorithm (import takes what export writes).
func TestAliasesCoverVendorNames(t *testing.T) {
	for _, a := range algorithms {
		for vendor, n := range a.vendor {
			for _, s := range []string{n.ike, n.esp} {
				if s == "" || strings.Contains(s, ":") {
					continue
				}
				if a.Kind == PRF && s == hashOf(&a).Name {
					continue
				}
				got, err := LookupAlias(a.Kind, s)
				if err != nil || got.Name != a.Name {
					t.Errorf("%s name %q of %s reads as %v (%v)", vendor, s, a.Name, got, err)
				}
			}
		}
	}
	for _, tc := range []struct {
		k    Kind
		word string
		want string
	}{
		{Encryption, "AES256-GCM-16", "aes256gcm16"},
		{Encryption, "GCMAES256", "aes256gcm16"},
		{Encryption, "aes-gcm-256", "aes256gcm16"},
		{Encryption, "aes256gcm", "aes256gcm16"},
		{Encryption, "AES-256-CBC", "aes256"},
		{Encryption, "AES256", "aes256"},
		{Integrity, "SHA2-256", "sha256"},
		{Integrity, "HMAC-SHA-256-128", "sha256"},
		{Integrity, "SHA1", "sha1"},
		{PRF, "SHA2-384", "prfsha384"},
		{PRF, "prf-hmac-sha256", "prfsha256"},
		{DH, "group 14", "modp2048"},
		{DH, "14", "modp2048"},
		{DH, "Group19", "ecp256"},
		{DH, "modp2048", "modp2048"},
		{DH, "ecp256", "ecp256"},
		{DH, "ECP384", "ecp384"},
		{DH, "x25519", "curve25519"},
		{DH, "DH20", "ecp384"},
	} {
		a, err := LookupAlias(tc.k, tc.word)
		if err != nil || a.Name != tc.want {
			t.Errorf("%s %q: got %v, %v; want %s", tc.k, tc.word, a, err, tc.want)
		}
	}
	for _, tc := range []struct {
		k    Kind
		word string
		want string
	}{
		{Encryption, "3DES", "deprecated"},
		{Integrity, "MD5", "broken"},
		{DH, "group 1", "broken"},
		{Encryption, "SHA256", "is an integrity, not encryption"},
		{DH, "group 99", "not a known DH group"},
	} {
		if _, err := LookupAlias(tc.k, tc.word); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: error %v, want one containing %q", tc.k, tc.word, err, tc.want)
		}
	}
}

func TestParseProposal(t *testing.T) {
	for _, tc := range []struct {
		ctx      Context
		in, want string
		err      string
	}{
		{ctx: IKE, in: "aes256gcm16-prfsha256-ecp256", want: "aes256gcm16-prfsha256-ecp256"},
		{ctx: IKE, in: "aes256-sha256-modp2048", want: "aes256-sha256-modp2048"},
		{ctx: IKE, in: "aes256gcm16-sha256-ecp256", want: "aes256gcm16-prfsha256-ecp256"},
		{ctx: IKE, in: "aes256-sha256-prfsha384-modp2048", want: "aes256-sha256-prfsha384-modp2048"},
		{ctx: ESP, in: "aes256gcm16-sha256-ecp256", want: "aes256gcm16-ecp256"},
		{ctx: ESP, in: "aes256gcm16", want: "aes256gcm16"},
		{ctx: ESP, in: "aes256-sha2_256-noesn", want: "aes256-sha256"},
		{ctx: IKE, in: "aes256gcm16-ecp256", err: "needs a PRF"},
		{ctx: IKE, in: "aes256-sha256", err: "no DH group"},
		{ctx: IKE, in: "aes256gcm16-aes256-sha256-prfsha256-ecp256", err: "mixes AEAD"},
		{ctx: ESP, in: "aes256", err: "no integrity"},
		{ctx: ESP, in: "3des-sha1", err: "not an algorithm"},
	} {
		p, err := ParseProposal(tc.ctx, tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s %q: error %v, want %q", tc.ctx, tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || p.String(tc.ctx) != tc.want {
			t.Errorf("%s %q: %q, %v; want %q", tc.ctx, tc.in, p.String(tc.ctx), err, tc.want)
		}
	}
}

// Secrets appear only when passed: never the Secret's name in place of the key, never a key
// without --include-secrets.
func TestPSKOnlyWhenPassed(t *testing.T) {
	tc := cases()[0]
	for _, f := range Formats() {
		if !f.IPsec {
			continue
		}
		in := tc.in
		in.Gateway = ipsecGateway(&vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{Proposals: []string{"aes256-sha256-modp2048"}}})
		in.Peer = ipsecPeer("hq", "203.0.113.10", "", vpnv1.ESPSettings{Proposals: []string{"aes256-sha256-modp2048"}}, "192.168.10.0/24")
		out, err := RenderInput(in, f.Name)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if f.Name != "sheet" && !strings.Contains(out, phPSK) {
			t.Errorf("%s: no PSK placeholder", f.Name)
		}
		in.PSK = "s3cr3t-value-XYZ"
		out, err = RenderInput(in, f.Name)
		if err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
		if !strings.Contains(out, in.PSK) {
			t.Errorf("%s: the PSK passed is missing", f.Name)
		}
	}
}

func TestObjectNameLimits(t *testing.T) {
	p := &Params{Gateway: "a-very-long-gateway-name-indeed", Peer: "and-a-long-peer-name"}
	for _, max := range []int{15, 31, 40} {
		n := objectName(p, max)
		if len(n) > max {
			t.Errorf("%d: %q is %d long", max, n, len(n))
		}
	}
	if objectName(p, 15) == objectName(&Params{Gateway: "a-very-long-gateway-name-indeed", Peer: "and-a-long-peer-nam2"}, 15) {
		t.Errorf("shortened names collide")
	}
	_ = time.Second
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = 0
	}
	return len(b), nil
}

// checkWithAddconn runs libreswan's addconn --checkconfig on the conn, inside a config file
// with an empty "config setup" section, as /etc/ipsec.conf would hold it.
func checkWithAddconn(t *testing.T, conn string) {
	t.Helper()
	dir, err := exec.Command(filepath.Join("..", "..", "hack", "libreswan.sh")).Output()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("hack/libreswan.sh: %v", err)
		}
		t.Logf("libreswan's addconn is not available here (%v): only the shape is checked", err)
		return
	}
	file := filepath.Join(t.TempDir(), "ipsec.conf")
	if err := os.WriteFile(file, []byte("config setup\n\n"+conn), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg, err := exec.Command(filepath.Join(strings.TrimSpace(string(dir)), "addconn"), "--config", file, "--checkconfig").CombinedOutput(); err != nil {
		t.Errorf("libreswan's addconn refuses the configuration: %v: %s", err, msg)
	}
}
