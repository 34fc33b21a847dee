package wireguard

import (
	"bytes"
	"encoding/base64"
	"net/netip"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func baseGateway() *model.Gateway {
	return &model.Gateway{
		Namespace:     "tenant-b",
		Name:          "globex",
		UID:           "4f1c0b5e-1f0e-4f7a-8f7e-2b0d7a3c9e02",
		Generation:    2,
		Protocol:      model.ProtocolWireGuard,
		Mode:          model.ModeSNAT,
		Endpoint:      model.Endpoint{Kind: model.EndpointLoadBalancer},
		PublicAddress: "203.0.113.20",
		ServiceCIDR:   netip.MustParsePrefix("100.64.9.0/24"),
		LocalAddress:  netip.MustParseAddr("100.64.9.1"),
		WireGuard: &model.WireGuardGateway{
			ListenPort: 51820,
			MTU:        1420,
			PrivateKey: model.SecretKeyRef{Name: "globex-wireguard-key", Key: "privateKey"},
		},
	}
}

func wgPeer(name string, k byte, d model.Decision, subnets ...string) model.Peer {
	return model.Peer{
		Name:          name,
		Generation:    1,
		SourceCIDRs:   prefixes(subnets...),
		Authorization: d,
		WireGuard:     &model.WireGuardPeer{PublicKey: key(k)},
	}
}

var (
	defaultAllow   = model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow}
	authorized     = model.Decision{Authorized: true, Reason: model.ReasonAuthorized}
	noGrants       = model.Decision{Reason: model.ReasonNoGrants, Message: model.MessageNoBlockMultiPeer}
	subnetConflict = model.Decision{Reason: model.ReasonSubnetConflict, Message: `subnets overlap those of older peer "alpha": 10.20.0.0/16`}
)

type testCase struct {
	name string
	gw   *model.Gateway
}

func cases() []testCase {
	single := baseGateway()
	p := wgPeer("branch", 1, defaultAllow, "10.20.0.0/16")
	p.WireGuard.Endpoint = "198.51.100.20:51820"
	single.Peers = []model.Peer{p}

	multi := baseGateway()
	multi.WireGuard.ListenPort = 443
	multi.WireGuard.MTU = 1380
	alpha := wgPeer("alpha", 2, authorized, "10.20.0.0/16")
	alpha.Exposures = []string{"crm"}
	alpha.WireGuard.Endpoint = "wg.alpha.example.net:51820"
	alpha.WireGuard.PersistentKeepalive = 25
	alpha.WireGuard.PresharedKey = &model.SecretKeyRef{Name: "alpha-wg", Key: "presharedKey"}
	bravo := wgPeer("bravo", 3, authorized, "10.30.0.0/24", "10.30.8.0/24")
	bravo.Exposures = []string{"crm"}
	bravo.WireGuard.PresharedKey = &model.SecretKeyRef{Name: "bravo-wg", Key: "psk"}
	// The model withholds charlie's 10.20.5.0/24 (inside alpha's older /16) from its tunnel.
	charlie := wgPeer("charlie", 4, subnetConflict, "10.40.0.0/16")
	charlie.WithheldCIDRs = prefixes("10.20.5.0/24")
	charlie.WireGuard.Endpoint = "[2001:db8::40]:51820"
	charlie.WireGuard.PersistentKeepalive = 15
	ipsecPeer := model.Peer{
		Name: "delta", WithheldCIDRs: prefixes("10.60.0.0/16"),
		Authorization: model.Decision{Reason: model.ReasonProtocolMismatch},
		IPsec:         &model.IPsecPeer{RemoteAddress: "198.51.100.60", RemoteID: "198.51.100.60", ESPProposals: []string{"aes256"}, PSK: model.SecretKeyRef{Name: "delta", Key: "psk"}},
	}
	echo := wgPeer("echo", 5, noGrants, "10.70.0.0/16")
	multi.Peers = []model.Peer{alpha, bravo, charlie, ipsecPeer, echo}

	return []testCase{
		{name: "single-peer-default-allow", gw: single},
		{name: "psk-keepalive-dark-peer", gw: multi},
		{name: "no-peers", gw: baseGateway()},
	}
}
