package deviceconfig

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

// goodSheet is a FortiGate-style sheet in vendor words.
const goodSheet = `
gateway:
  name: acme
  namespace: acme
  endpoint: loadBalancer
  serviceCIDR: 100.64.12.0/24
peer:
  name: hq
  address: 203.0.113.10
  id: hq.acme.example
  networks: [192.168.10.0/24, "192.168.20.0 255.255.255.0"]
  remoteNetworks: 100.64.12.0/24
ike:
  version: 2
  authentication: Pre-shared key
  encryption: [AES256-GCM-16, AES-256-CBC]
  integrity: SHA2-256
  prf: PRF-HMAC-SHA256
  dhGroups: [group 19, 14]
  lifetime: 28800
  dpd: {delay: 10s, action: restart}
esp:
  encryption: GCMAES256, aes256
  integrity: HMAC-SHA-256-128
  pfsGroups: ecp256
  lifetime: 1 hour
psk: an-example-pre-shared-key
`

func mustImport(t *testing.T, sheet string) *Imported {
	t.Helper()
	s, err := ParseSheet([]byte(sheet))
	if err != nil {
		t.Fatal(err)
	}
	im, err := Import(s, ImportOptions{Namespace: "acme", Rand: zeroReader{}})
	if err != nil {
		t.Fatal(err)
	}
	return im
}

func manifests(t *testing.T, im *Imported) string {
	t.Helper()
	var b strings.Builder
	for _, o := range []interface{}{im.Gateway, im.Peer, im.Secret} {
		if reflect.ValueOf(o).IsNil() {
			continue
		}
		y, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	for _, w := range im.Warnings {
		b.WriteString("# warning: " + w + "\n")
	}
	return b.String()
}

func TestImportGood(t *testing.T) {
	for _, tc := range []struct{ name, sheet string }{
		{"fortigate-words", goodSheet},
		{"explicit-proposals", `
gateway: {name: acme, namespace: acme, endpoint: "floatingIP:198.51.100.10", localID: vpn.acme.example}
peer: {name: branch, address: "%any", id: branch@acme.example, networks: 10.20.0.0/16, exposures: [web, db], pskSecret: branch-keys/ike}
ike:
  proposals:
  - {encryption: aes-gcm-256, prf: sha384, dhGroups: 20}
  - {encryption: aes-cbc-256, integrity: sha-256, dhGroups: modp2048}
  reauthTime: 0
esp:
  proposals:
  - {encryption: aes-256-gcm, dhGroups: ecp384}
  - {encryption: aes256, integrity: sha256}
  lifetime: 45m
psk: branch-secret-1234
`},
		{"no-psk-generated", `
gateway: {name: acme, endpoint: "hostNetwork:node-1@198.51.100.5"}
peer: {name: shop, address: shop.example.net, networks: [172.16.0.0/12]}
`},
		{"peer-only", `
gateway: {name: acme, namespace: acme}
peer: {name: lab, address: 192.0.2.44, networks: 10.99.0.0/24}
ike: {encryption: AES128, integrity: SHA1, dhGroups: "group 14"}
esp: {encryption: AES128, integrity: SHA1, pfsGroups: none}
psk: "lab-psk-abcdefgh"
`},
		{"csv", `field,value,notes
gateway.name,acme,
gateway.namespace,acme,
gateway.endpoint,loadBalancer,
peer.name,hq,
peer.address,203.0.113.10,Fortigate WAN
peer.networks,"192.168.10.0/24; 192.168.20.0/24",
ike.version,2,
ike.encryption,AES256-GCM-16,
ike.prf,SHA2-256,
ike.dhGroups,"19, 14",
ike.lifetime,8 hours,
esp.encryption,AES256-GCM-16,
esp.pfsGroups,19,
esp.lifetime,3600,
psk,csv-pre-shared-key,
`},
		{"wireguard", `
gateway: {name: wg, namespace: acme, protocol: wireguard, endpoint: loadBalancer, listenPort: 51821}
peer: {name: shop, networks: 192.168.50.0/24}
wireguard: {publicKey: PEERbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbE=, endpoint: "shop.example.net:51820", persistentKeepalive: 25, presharedKey: true}
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden.Assert(t, "import-"+tc.name, []byte(manifests(t, mustImport(t, tc.sheet))))
		})
	}
}

// Each bad field is refused with its name.
func TestImportRefusals(t *testing.T) {
	base := func(edit string) string { return edit }
	for _, tc := range []struct {
		name, sheet, field, msg string
	}{
		{"unknown-field", goodSheet + "foo: bar\n", "", `unknown field "foo"`},
		{"3des", strings.Replace(goodSheet, "[AES256-GCM-16, AES-256-CBC]", "[3DES]", 1), "ike.encryption[0]", "deprecated"},
		{"md5", strings.Replace(goodSheet, "integrity: SHA2-256", "integrity: MD5", 1), "ike.integrity[0]", "MD5 is broken"},
		{"group1", strings.Replace(goodSheet, "[group 19, 14]", "[group 1]", 1), "ike.dhGroups[0]", "broken"},
		{"unknown-dh", strings.Replace(goodSheet, "[group 19, 14]", "[group 77]", 1), "ike.dhGroups[0]", "not a known DH group"},
		{"no-dh", strings.Replace(goodSheet, "dhGroups: [group 19, 14]", "", 1), "ike.dhGroups", "required"},
		{"integrity-as-encryption", strings.Replace(goodSheet, "encryption: GCMAES256, aes256", "encryption: SHA256", 1), "esp.encryption[0]", "is an integrity, not encryption"},
		{"cbc-without-integrity", strings.Replace(goodSheet, "integrity: HMAC-SHA-256-128", "", 1), "esp.integrity", "required with aes256"},
		{"gcm-without-prf", strings.Replace(strings.Replace(goodSheet, "  prf: PRF-HMAC-SHA256\n", "", 1), "  integrity: SHA2-256\n", "", 1), "ike.prf", "required with AEAD"},
		{"ikev1-gcm", strings.Replace(goodSheet, "version: 2", "version: 1", 1), "ike.encryption", "not available for an IKEv1 SA"},
		{"ike-version", strings.Replace(goodSheet, "version: 2", "version: 3", 1), "ike.version", "not 1 or 2"},
		{"certificates", strings.Replace(goodSheet, "Pre-shared key", "RSA signatures", 1), "ike.authentication", "pre-shared keys only"},
		{"aggressive", strings.Replace(goodSheet, "version: 2", "version: 1\n  mode: aggressive", 1), "ike.mode", "aggressive mode"},
		{"dpd-timeout", strings.Replace(goodSheet, "action: restart}", "action: restart, timeout: 120s}", 1), "ike.dpd.timeout", "applies to IKEv1 only"},
		{"dpd-action", strings.Replace(goodSheet, "action: restart}", "action: explode}", 1), "ike.dpd.action", "not restart"},
		{"lifetime", strings.Replace(goodSheet, "lifetime: 28800", "lifetime: forever", 1), "ike.lifetime", "not a duration"},
		{"lifetime-too-long", strings.Replace(goodSheet, "lifetime: 28800", "lifetime: 9000h", 1), "ike.lifetime", "not between"},
		{"kilobytes", strings.Replace(goodSheet, "lifetime: 1 hour", "lifetime: 1 hour\n  lifetimeKilobytes: 4608000", 1), "esp.lifetimeKilobytes", "rekeys by time only"},
		{"transport", strings.Replace(goodSheet, "lifetime: 1 hour", "lifetime: 1 hour\n  mode: transport", 1), "esp.mode", "tunnel mode only"},
		{"ah", strings.Replace(goodSheet, "lifetime: 1 hour", "lifetime: 1 hour\n  protocol: AH", 1), "esp.protocol", "ESP only"},
		{"esp-prf", strings.Replace(goodSheet, "encryption: GCMAES256, aes256", "encryption: aes256\n  proposals: [{encryption: aes256, prf: sha256}]", 1), "esp.proposals", "either proposals or"},
		{"host-bits", strings.Replace(goodSheet, "192.168.10.0/24", "192.168.10.1/24", 1), "peer.networks[0]", "host bits set"},
		{"default-route", strings.Replace(goodSheet, "192.168.10.0/24", "0.0.0.0/0", 1), "peer.networks[0]", "never the whole Internet"},
		{"loopback", strings.Replace(goodSheet, "192.168.10.0/24", "127.0.0.0/8", 1), "peer.networks[0]", "loopback"},
		{"overlap", strings.Replace(goodSheet, `"192.168.20.0 255.255.255.0"`, "192.168.0.0/16", 1), "peer.networks[1]", "overlaps 192.168.10.0/24"},
		{"over-service-cidr", strings.Replace(goodSheet, "192.168.10.0/24", "100.64.12.128/25", 1), "peer.networks[0]", "overlaps the gateway's service CIDR"},
		{"no-networks", strings.Replace(goodSheet, `networks: [192.168.10.0/24, "192.168.20.0 255.255.255.0"]`, "", 1), "peer.networks", "required"},
		{"bad-netmask", strings.Replace(goodSheet, "255.255.255.0", "255.0.255.0", 1), "peer.networks[1]", "not a contiguous netmask"},
		{"remote-network", strings.Replace(goodSheet, "remoteNetworks: 100.64.12.0/24", "remoteNetworks: 10.0.0.0/8", 1), "peer.remoteNetworks[0]", "in 100.64.0.0/10"},
		{"remote-network-mismatch", strings.Replace(goodSheet, "remoteNetworks: 100.64.12.0/24", "remoteNetworks: 100.64.13.0/24", 1), "peer.remoteNetworks[0]", "not the gateway's service CIDR"},
		{"two-remote-networks", strings.Replace(goodSheet, "remoteNetworks: 100.64.12.0/24", "remoteNetworks: [100.64.12.0/24, 10.1.0.0/16]", 1), "peer.remoteNetworks", "one service CIDR"},
		{"service-cidr", strings.Replace(goodSheet, "serviceCIDR: 100.64.12.0/24", "serviceCIDR: 10.1.0.0/24", 1), "gateway.serviceCIDR", "100.64.0.0/10"},
		{"wildcard-id", strings.Replace(goodSheet, "id: hq.acme.example", "id: '*.acme.example'", 1), "peer.id", "wildcard"},
		{"any-without-id", strings.Replace(strings.Replace(goodSheet, "  id: hq.acme.example\n", "", 1), "address: 203.0.113.10", "address: dynamic", 1), "peer.id", "required when peer.address is %any"},
		{"bad-address", strings.Replace(goodSheet, "address: 203.0.113.10", "address: 'not an address'", 1), "peer.address", "not an IP address"},
		{"short-psk", strings.Replace(goodSheet, "psk: an-example-pre-shared-key", "psk: short", 1), "psk", "at least 8"},
		{"gateway-name", strings.Replace(goodSheet, "name: acme\n", "name: Acme_GW\n", 1), "gateway.name", "DNS label"},
		{"endpoint", strings.Replace(goodSheet, "endpoint: loadBalancer", "endpoint: magic", 1), "gateway.endpoint", "not loadBalancer"},
		{"wireguard-on-ipsec", goodSheet + "wireguard: {publicKey: x}\n", "wireguard", "on an IPsec sheet"},
		{"wireguard-key", base(`
gateway: {name: wg, namespace: acme, protocol: wireguard, endpoint: loadBalancer}
peer: {name: shop, networks: 192.168.50.0/24}
wireguard: {publicKey: not-a-key}
`), "wireguard.publicKey", "not a WireGuard public key"},
		{"csv-unknown", "field,value\ngateway.name,acme\nike.colour,blue\n", "", `unknown field "colour"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSheet([]byte(tc.sheet))
			if err == nil {
				_, err = Import(s, ImportOptions{Rand: zeroReader{}})
			}
			if err == nil {
				t.Fatalf("imported, want %s refused", tc.field)
			}
			if tc.field != "" {
				fes, ok := err.(FieldErrors)
				if !ok {
					t.Fatalf("error %T %v, want FieldErrors", err, err)
				}
				found := false
				for _, fe := range fes {
					if fe.Field == tc.field && strings.Contains(fe.Msg, tc.msg) {
						found = true
					}
				}
				if !found {
					t.Fatalf("no refusal of %s containing %q in:\n%v", tc.field, tc.msg, err)
				}
				return
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

// A PSK never reaches a warning or an error message.
func TestImportNeverEchoesThePSK(t *testing.T) {
	bad := strings.Replace(goodSheet, "version: 2", "version: 3", 1)
	s, _ := ParseSheet([]byte(bad))
	_, err := Import(s, ImportOptions{})
	if err == nil || strings.Contains(err.Error(), "an-example-pre-shared-key") {
		t.Fatalf("error %v", err)
	}
	im := mustImport(t, goodSheet)
	for _, w := range im.Warnings {
		if strings.Contains(w, "an-example-pre-shared-key") {
			t.Fatalf("warning %q", w)
		}
	}
}

// Round trip: the sheet peer-config exports for a peer imports into the same tunnel — the
// same resolved settings on both ends and the same peer spec, with the operator's defaults
// written out.
func TestRoundTripSheet(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.PSK = "round-trip-pre-shared-key"
			p1, err := Resolve(in)
			if err != nil {
				t.Fatal(err)
			}
			text, err := Render(p1, "sheet")
			if err != nil {
				t.Fatal(err)
			}
			im := mustImport(t, text)
			checkSameTunnel(t, in, im)
			if string(im.Secret.Data[tc.in.Peer.Spec.IPsec.PSKSecretRef.Key]) != in.PSK {
				t.Errorf("PSK not carried")
			}
		})
	}
	t.Run("wireguard", func(t *testing.T) {
		in := Input{Gateway: wireguardGateway(), Peer: wireguardPeer(), PSK: "wg-preshared-key-value-0000000000000000000="}
		p1, err := Resolve(in)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := Render(p1, "sheet")
		checkSameTunnel(t, in, mustImport(t, text))
	})
}

// checkSameTunnel resolves the imported gateway (with the original's status) and peer and
// compares them with the original's, and the peer specs with defaults applied.
func checkSameTunnel(t *testing.T, orig Input, im *Imported) {
	t.Helper()
	gw := im.Described.DeepCopy()
	gw.Status = orig.Gateway.Status
	got, err := Resolve(Input{Gateway: gw, Peer: im.Peer, PSK: orig.PSK})
	if err != nil {
		t.Fatalf("resolving the import: %v", err)
	}
	want, _ := Resolve(orig)
	a, _ := json.MarshalIndent(got, "", " ")
	b, _ := json.MarshalIndent(want, "", " ")
	if string(a) != string(b) {
		t.Errorf("imported tunnel differs:\n%s", golden.Diff(string(b), string(a)))
	}
	op, ip := orig.Peer.Spec, im.Peer.Spec
	if op.GatewayRef != ip.GatewayRef || !reflect.DeepEqual(op.Authorization, ip.Authorization) {
		t.Errorf("gatewayRef/authorization: %v %v, want %v %v", ip.GatewayRef, ip.Authorization, op.GatewayRef, op.Authorization)
	}
	if o := op.IPsec; o != nil {
		i := ip.IPsec
		wantID := o.Peer.ID
		if wantID == "" {
			wantID = o.Peer.Address
		}
		if i.Peer.Address != o.Peer.Address || i.Peer.ID != wantID || !reflect.DeepEqual(i.RemoteSubnets, o.RemoteSubnets) || i.PSKSecretRef != o.PSKSecretRef {
			t.Errorf("peer ipsec %+v, want %+v", i, o)
		}
	}
	if o := op.WireGuard; o != nil {
		i := ip.WireGuard
		if i.PublicKey != o.PublicKey || !reflect.DeepEqual(i.Subnets, o.Subnets) || !reflect.DeepEqual(i.PresharedKeySecretRef, o.PresharedKeySecretRef) || *i.PersistentKeepalive != *o.PersistentKeepalive {
			t.Errorf("peer wireguard %+v, want %+v", i, o)
		}
	}
}

// Round trip through the device configuration itself: the strongSwan client config read back
// as a sheet (its IDs, selectors, proposals, DPD, lifetimes and forced encapsulation) imports
// into the same tunnel. The client's own address is not in a client config (it may sit behind
// NAT), nor the tunnel MTU (a comment there), so they come from the original.
func TestRoundTripStrongSwan(t *testing.T) {
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			out, err := RenderInput(tc.in, "strongswan")
			if err != nil {
				t.Fatal(err)
			}
			tree, err := swanconf.Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			c := tree.Sub("connections").Sections()[0]
			get := func(s *swanconf.Section, k string) string { v, _ := s.Get(k); return v }
			children := c.Sub("children").Sections()
			ch := children[0]
			var nets StringList
			for _, x := range children {
				nets = append(nets, swanconf.SplitList(get(x, "local_ts"))...)
			}
			var mtu int32
			if gs := tc.in.Gateway.Spec.IPsec; gs != nil {
				mtu = gs.MTU
			}
			s := &Sheet{
				Gateway: SheetGateway{Name: tc.in.Gateway.Name, Namespace: tc.in.Gateway.Namespace, Endpoint: "loadBalancer",
					MTU: mtu, ForceEncapsulation: get(c, "encap") == "yes"},
				Peer: SheetPeer{
					Name:           tc.in.Peer.Name,
					Address:        tc.in.Peer.Spec.IPsec.Peer.Address,
					ID:             get(c.Sub("local"), "id"),
					Networks:       nets,
					RemoteNetworks: swanconf.SplitList(get(ch, "remote_ts")),
				},
				IKE: &SheetIKE{Lifetime: get(c, "rekey_time"), DPD: &SheetDPD{Delay: get(c, "dpd_delay"), Timeout: get(c, "dpd_timeout")}},
				ESP: &SheetESP{Lifetime: get(ch, "rekey_time")},
				PSK: "round-trip-pre-shared-key",
			}
			v, _ := c.Get("version")
			s.IKE.Version = int(v[0] - '0')
			if rid := get(c.Sub("remote"), "id"); rid != tc.in.Gateway.Status.PublicAddress {
				s.Gateway.LocalID = rid
			}
			for _, pr := range swanconf.SplitList(get(c, "proposals")) {
				p, err := ParseProposal(IKE, pr)
				if err != nil {
					t.Fatal(err)
				}
				s.IKE.Proposals = append(s.IKE.Proposals, sheetProposal(IKE, p))
			}
			for _, pr := range swanconf.SplitList(get(ch, "esp_proposals")) {
				p, err := ParseProposal(ESP, pr)
				if err != nil {
					t.Fatal(err)
				}
				s.ESP.Proposals = append(s.ESP.Proposals, sheetProposal(ESP, p))
			}
			im, err := Import(s, ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			orig := tc.in
			orig.PSK = ""
			im.Peer.Spec.IPsec.PSKSecretRef = orig.Peer.Spec.IPsec.PSKSecretRef
			// the client's DPD action is its own (restart); the gateway's is what it had
			im.Described.Spec.IPsec.IKE.DPD.Action = gatewayDPDAction(orig.Gateway)
			checkSameTunnel(t, orig, im)
		})
	}
}

func gatewayDPDAction(gw *vpnv1.VPNGateway) string {
	if s := gw.Spec.IPsec; s != nil && s.IKE.DPD != nil && s.IKE.DPD.Action != "" {
		return s.IKE.DPD.Action
	}
	return "restart"
}
