package wireguard

import (
	"bytes"
	"encoding/base64"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func baseGateway() *model.Gateway {
	return modelgen.Gateway("tenant-b", "globex",
		modelgen.UID("4f1c0b5e-1f0e-4f7a-8f7e-2b0d7a3c9e02"), modelgen.Generation(2),
		modelgen.LoadBalancer("", nil), modelgen.PublicAddress("203.0.113.20"), modelgen.ServiceCIDR("100.64.9.0/24"),
		modelgen.WireGuardDevice(51820, 1420), modelgen.WireGuardPrivateKey("globex-wireguard-key", "privateKey"))
}

// wgPeer is a peer with the public key key(k).
func wgPeer(name string, k byte, d model.Decision, subnets ...string) model.Peer {
	return modelgen.Peer(name, d, modelgen.Generation(1), modelgen.SourceCIDRs(subnets...), modelgen.WireGuard(key(k)))
}

var subnetConflict = modelgen.Dark(model.ReasonSubnetConflict, `subnets overlap those of older peer "alpha": 10.20.0.0/16`)

type testCase struct {
	name string
	gw   *model.Gateway
}

func cases() []testCase {
	single := baseGateway()
	p := wgPeer("branch", 1, modelgen.DefaultAllow(), "10.20.0.0/16")
	p.WireGuard.Endpoint = "198.51.100.20:51820"
	single.Peers = []model.Peer{p}

	multi := baseGateway()
	multi.WireGuard.ListenPort = 443
	multi.WireGuard.MTU = 1380
	alpha := wgPeer("alpha", 2, modelgen.Authorized(), "10.20.0.0/16")
	alpha.Exposures = []string{"crm"}
	alpha.WireGuard.Endpoint = "wg.alpha.example.net:51820"
	alpha.WireGuard.PersistentKeepalive = 25
	alpha.WireGuard.PresharedKey = &model.SecretKeyRef{Name: "alpha-wg", Key: "presharedKey"}
	bravo := wgPeer("bravo", 3, modelgen.Authorized(), "10.30.0.0/24", "10.30.8.0/24")
	bravo.Exposures = []string{"crm"}
	bravo.WireGuard.PresharedKey = &model.SecretKeyRef{Name: "bravo-wg", Key: "psk"}
	// The model withholds charlie's 10.20.5.0/24 (inside alpha's older /16) from its tunnel.
	charlie := wgPeer("charlie", 4, subnetConflict, "10.40.0.0/16")
	charlie.WithheldCIDRs = modelgen.Prefixes("10.20.5.0/24")
	charlie.WireGuard.Endpoint = "[2001:db8::40]:51820"
	charlie.WireGuard.PersistentKeepalive = 15
	ipsecPeer := modelgen.Peer("delta", modelgen.Dark(model.ReasonProtocolMismatch, ""), modelgen.WithheldCIDRs("10.60.0.0/16"),
		modelgen.IPsec("198.51.100.60", "198.51.100.60"), modelgen.ESP(0, "aes256"), modelgen.PSK("delta", "psk"))
	echo := wgPeer("echo", 5, modelgen.NoGrants(), "10.70.0.0/16")
	multi.Peers = []model.Peer{alpha, bravo, charlie, ipsecPeer, echo}

	return []testCase{
		{name: "single-peer-default-allow", gw: single},
		{name: "psk-keepalive-dark-peer", gw: multi},
		{name: "no-peers", gw: baseGateway()},
	}
}
