package strongswan

import (
	"net/netip"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func baseGateway() *model.Gateway {
	return &model.Gateway{
		Namespace:     "tenant-a",
		Name:          "acme",
		UID:           "0d6c3f6e-5a1e-4c55-9d43-0c3c9e1c1a01",
		Generation:    3,
		Protocol:      model.ProtocolIPsec,
		Mode:          model.ModeSNAT,
		Endpoint:      model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: netip.MustParseAddr("203.0.113.10")},
		PublicAddress: "203.0.113.10",
		ServiceCIDR:   netip.MustParsePrefix("100.64.7.0/24"),
		LocalAddress:  netip.MustParseAddr("100.64.7.1"),
		IPsec: &model.IPsecGateway{
			IKEVersion:   2,
			IKEProposals: []string{"aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp2048"},
			DPDDelay:     30 * time.Second,
			DPDAction:    "restart",
			RekeyTime:    4 * time.Hour,
			ReauthTime:   0,
		},
	}
}

func ipsecPeer(name, address, id string, d model.Decision, subnets ...string) model.Peer {
	return model.Peer{
		Name:          name,
		UID:           "uid-" + "peer-" + "0001",
		Generation:    1,
		SourceCIDRs:   prefixes(subnets...),
		Authorization: d,
		IPsec: &model.IPsecPeer{
			RemoteAddress: address,
			RemoteID:      id,
			ESPProposals:  []string{"aes256gcm16-ecp256", "aes256-sha256-modp2048"},
			RekeyTime:     time.Hour,
			PSK:           model.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			Reqid:         model.PeerReqid("tenant-a", "fixture", name),
		},
	}
}

var (
	defaultAllow = model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow}
	authorized   = model.Decision{Authorized: true, Reason: model.ReasonAuthorized}
	noGrants     = model.Decision{Reason: model.ReasonNoGrants, Message: model.MessageNoBlockMultiPeer}
	unknownGrant = model.Decision{Reason: model.ReasonUnknownGrant, Message: `exposure "billing" does not exist`}
)

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
	p := ipsecPeer("branch", "198.51.100.20", "198.51.100.20", defaultAllow, "10.20.0.0/16")
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
	alpha := ipsecPeer("alpha", "198.51.100.20", "alpha.example.net", authorized, "10.20.0.0/16")
	alpha.Exposures = []string{"crm"}
	bravo := ipsecPeer("bravo", "fw.bravo.example.org", "fw.bravo.example.org", authorized, "10.30.0.0/24", "10.30.8.0/24")
	bravo.Exposures = []string{"crm", "erp"}
	bravo.IPsec.ESPProposals = []string{"aes128gcm16-modp2048"}
	bravo.IPsec.RekeyTime = 8 * time.Hour
	charlie := ipsecPeer("charlie", "198.51.100.40", "198.51.100.40", noGrants, "10.40.0.0/16")
	paris := ipsecPeer("eu.paris", "198.51.100.50", "paris@acme.example", unknownGrant, "10.50.0.0/16")
	wgPeer := model.Peer{
		Name: "delta", SourceCIDRs: prefixes("10.60.0.0/16"),
		Authorization: model.Decision{Reason: model.ReasonProtocolMismatch, Message: "peer is wireguard, gateway is ipsec"},
		WireGuard:     &model.WireGuardPeer{PublicKey: "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="},
	}
	multi.Peers = []model.Peer{alpha, bravo, charlie, wgPeer, paris}

	anyAddr := baseGateway()
	anyAddr.IPsec.DPDDelay = 10 * time.Second
	anyAddr.Peers = []model.Peer{ipsecPeer("field-office", "%any", "C=DE, O=Example Org, OU=Field Ops, CN=fw 01", defaultAllow, "192.168.10.0/24")}

	v1 := baseGateway()
	v1.IPsec.IKEVersion = 1
	v1.IPsec.IKEProposals = []string{"aes256-sha256-modp2048"}
	v1.IPsec.ReauthTime = 24 * time.Hour
	v1.IPsec.RekeyTime = 8 * time.Hour
	v1.Peers = []model.Peer{ipsecPeer("legacy", "198.51.100.70", "198.51.100.70", defaultAllow, "172.16.1.0/24", "172.16.2.0/24")}

	none := baseGateway()

	return []testCase{
		{name: "single-peer-default-allow", gw: single},
		{name: "multi-peer-mixed-grants", gw: multi, opts: Options{Reqids: true}},
		{name: "any-address-dn-id", gw: anyAddr},
		{name: "ikev1-two-subnets-encap", gw: v1, opts: Options{ForceEncap: true, Reqids: true}},
		{name: "no-peers", gw: none},
	}
}

func netipPrefixZero() netip.Prefix { return netip.Prefix{} }
