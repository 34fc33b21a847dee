package strongswan

import (
	"net/netip"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

func baseGateway() *model.Gateway {
	return modelgen.Gateway("tenant-a", "acme",
		modelgen.UID("0d6c3f6e-5a1e-4c55-9d43-0c3c9e1c1a01"), modelgen.Generation(3),
		modelgen.FloatingIP("203.0.113.10"), modelgen.PublicAddress("203.0.113.10"),
		modelgen.ServiceCIDR("100.64.7.0/24"),
		modelgen.IKE(2, "aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp2048"),
		modelgen.DPD(30*time.Second, "restart"), modelgen.IKELifetime(4*time.Hour, 0))
}

// ipsecPeer is a peer of this package's fixtures: one UID for all, the same ESP settings, the
// PSK in <name>-psk and the reqid of a gateway tenant-a/fixture.
func ipsecPeer(name, address, id string, d model.Decision, subnets ...string) model.Peer {
	return modelgen.Peer(name, d,
		modelgen.UID("uid-peer-0001"), modelgen.Generation(1), modelgen.SourceCIDRs(subnets...),
		modelgen.IPsec(address, id), modelgen.ESP(time.Hour, "aes256gcm16-ecp256", "aes256-sha256-modp2048"),
		modelgen.PSK(name+"-psk", "psk"), modelgen.Reqid("tenant-a", "fixture"))
}

var unknownGrant = modelgen.Dark(model.ReasonUnknownGrant, `exposure "billing" does not exist`)

type testCase struct {
	name string
	gw   *model.Gateway
	opts Options
}

func cases() []testCase {
	single := baseGateway()
	single.Exposures = []model.Exposure{{
		Name: "crm", VirtualIP: netip.MustParseAddr("100.64.7.10"), Target: netip.MustParseAddr("10.96.0.15"),
		Ports: []model.Port{{Protocol: "tcp", Port: 443, TargetPort: 8443}}, GrantedTo: []string{"branch"},
	}}
	p := ipsecPeer("branch", "198.51.100.20", "198.51.100.20", modelgen.DefaultAllow(), "10.20.0.0/16")
	p.Exposures = []string{"crm"}
	single.Peers = []model.Peer{p}

	multi := baseGateway()
	multi.IPsec.LocalID = "vpn.acme.example"
	multi.Exposures = []model.Exposure{
		{Name: "crm", VirtualIP: netip.MustParseAddr("100.64.7.10"), Target: netip.MustParseAddr("10.96.0.15"),
			Ports: []model.Port{{Protocol: "tcp", Port: 443, TargetPort: 8443}}, GrantedTo: []string{"alpha", "bravo"}},
		{Name: "erp", VirtualIP: netip.MustParseAddr("100.64.7.11"), Target: netip.MustParseAddr("10.96.0.16"),
			Ports: []model.Port{{Protocol: "tcp", Port: 5432, TargetPort: 5432}}, GrantedTo: []string{"bravo"}},
	}
	alpha := ipsecPeer("alpha", "198.51.100.20", "alpha.example.net", modelgen.Authorized(), "10.20.0.0/16")
	alpha.Exposures = []string{"crm"}
	bravo := ipsecPeer("bravo", "fw.bravo.example.org", "fw.bravo.example.org", modelgen.Authorized(), "10.30.0.0/24", "10.30.8.0/24")
	bravo.Exposures = []string{"crm", "erp"}
	bravo.IPsec.ESPProposals = []string{"aes128gcm16-modp2048"}
	bravo.IPsec.RekeyTime = 8 * time.Hour
	charlie := ipsecPeer("charlie", "198.51.100.40", "198.51.100.40", modelgen.NoGrants(), "10.40.0.0/16")
	paris := ipsecPeer("eu.paris", "198.51.100.50", "paris@acme.example", unknownGrant, "10.50.0.0/16")
	wgPeer := modelgen.Peer("delta", modelgen.Dark(model.ReasonProtocolMismatch, "peer is wireguard, gateway is ipsec"),
		modelgen.SourceCIDRs("10.60.0.0/16"), modelgen.WireGuard("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="))
	multi.Peers = []model.Peer{alpha, bravo, charlie, wgPeer, paris}

	anyAddr := baseGateway()
	anyAddr.IPsec.DPDDelay = 10 * time.Second
	anyAddr.Peers = []model.Peer{ipsecPeer("field-office", "%any", "C=DE, O=Example Org, OU=Field Ops, CN=fw 01", modelgen.DefaultAllow(), "192.168.10.0/24")}

	v1 := baseGateway()
	v1.IPsec.IKEVersion = 1
	v1.IPsec.IKEProposals = []string{"aes256-sha256-modp2048"}
	v1.IPsec.ReauthTime = 24 * time.Hour
	v1.IPsec.RekeyTime = 8 * time.Hour
	v1.IPsec.DPDTimeout = 40 * time.Second
	v1.Peers = []model.Peer{ipsecPeer("legacy", "198.51.100.70", "198.51.100.70", modelgen.DefaultAllow(), "172.16.1.0/24", "172.16.2.0/24")}

	// a site that may negotiate one CHILD_SA per subnet, as FortiGate, PAN-OS and MikroTik do
	three := baseGateway()
	three.Peers = []model.Peer{ipsecPeer("forti", "198.51.100.80", "forti.example.net", modelgen.DefaultAllow(), "10.1.0.0/24", "10.2.0.0/24", "10.3.0.0/24")}

	// one gateway, an IKEv2 peer with the gateway's settings beside an IKEv1 peer with its own
	mixed := baseGateway()
	v1peer := ipsecPeer("legacy-fw", "198.51.100.90", "198.51.100.90", modelgen.Authorized(), "172.16.1.0/24", "172.16.2.0/24")
	v1peer.IPsec.IKE = &model.IKE{IKEVersion: 1, IKEProposals: []string{"aes256-sha256-modp2048"}, DPDDelay: 10 * time.Second,
		DPDAction: "clear", DPDTimeout: 30 * time.Second, RekeyTime: 8 * time.Hour, ReauthTime: 24 * time.Hour}
	mixed.Peers = []model.Peer{ipsecPeer("modern", "198.51.100.91", "modern.example.net", modelgen.Authorized(), "10.9.0.0/24"), v1peer}

	none := baseGateway()

	return []testCase{
		{name: "single-peer-default-allow", gw: single},
		{name: "multi-peer-mixed-grants", gw: multi, opts: Options{Reqids: true}},
		{name: "any-address-dn-id", gw: anyAddr},
		{name: "ikev1-two-subnets-encap", gw: v1, opts: Options{ForceEncap: true, Reqids: true}},
		{name: "three-subnets", gw: three},
		{name: "three-subnets-kernel", gw: three, opts: Options{Reqids: true}},
		{name: "per-peer-ike", gw: mixed, opts: Options{Reqids: true}},
		{name: "no-peers", gw: none},
	}
}

func netipPrefixZero() netip.Prefix { return netip.Prefix{} }
