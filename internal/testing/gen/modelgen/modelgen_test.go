package modelgen_test

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen/modelgen"
)

func TestGateway(t *testing.T) {
	g := modelgen.Gateway("tenant-a", "acme", modelgen.UID("u"), modelgen.Generation(3),
		modelgen.FloatingIP("203.0.113.10"), modelgen.PublicAddress("203.0.113.10"), modelgen.ServiceCIDR("100.64.7.0/24"),
		modelgen.IKE(2, "aes256gcm16-prfsha256-ecp256"), modelgen.DPD(30*time.Second, "restart"), modelgen.IKELifetime(4*time.Hour, 0),
		modelgen.Peers(modelgen.Peer("hq", modelgen.DefaultAllow())))
	want := &model.Gateway{
		Namespace: "tenant-a", Name: "acme", UID: "u", Generation: 3,
		Protocol: model.ProtocolIPsec, Mode: model.ModeSNAT,
		Endpoint:      model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: netip.MustParseAddr("203.0.113.10")},
		PublicAddress: "203.0.113.10",
		ServiceCIDR:   netip.MustParsePrefix("100.64.7.0/24"),
		LocalAddress:  netip.MustParseAddr("100.64.7.1"),
		IPsec: &model.IPsecGateway{IKEVersion: 2, IKEProposals: []string{"aes256gcm16-prfsha256-ecp256"},
			DPDDelay: 30 * time.Second, DPDAction: "restart", RekeyTime: 4 * time.Hour},
		Peers: []model.Peer{{Name: "hq", Authorization: model.Decision{Authorized: true, Reason: model.ReasonDefaultAllow}}},
	}
	if !reflect.DeepEqual(g, want) {
		t.Errorf("gateway:\n got %+v\nwant %+v", g, want)
	}

	wg := modelgen.Gateway("tenant-b", "globex", modelgen.LoadBalancer("", nil), modelgen.WireGuardDevice(51820, 1420),
		modelgen.WireGuardPrivateKey("globex-wireguard-key", "privateKey"), modelgen.HostNetwork("node-1", "198.51.100.1"))
	wantWG := &model.Gateway{Namespace: "tenant-b", Name: "globex", Protocol: model.ProtocolWireGuard, Mode: model.ModeSNAT,
		Endpoint:  model.Endpoint{Kind: model.EndpointHostNetwork, NodeName: "node-1", HostAddress: netip.MustParseAddr("198.51.100.1")},
		WireGuard: &model.WireGuardGateway{ListenPort: 51820, MTU: 1420, PrivateKey: model.SecretKeyRef{Name: "globex-wireguard-key", Key: "privateKey"}}}
	if !reflect.DeepEqual(wg, wantWG) {
		t.Errorf("WireGuard gateway:\n got %+v\nwant %+v", wg, wantWG)
	}
}

func TestPeer(t *testing.T) {
	p := modelgen.Peer("bravo", modelgen.Authorized(), modelgen.SourceCIDRs("10.30.0.0/24", "10.30.8.0/24"),
		modelgen.IPsec("fw.bravo.example.org", "fw.bravo.example.org"), modelgen.ESP(time.Hour, "aes128gcm16-modp2048"),
		modelgen.PSK("bravo-psk", "psk"), modelgen.Reqid("tenant-a", "acme"), modelgen.Grants("crm"), modelgen.UID("u"))
	want := model.Peer{Name: "bravo", UID: "u", Authorization: model.Decision{Authorized: true, Reason: model.ReasonAuthorized},
		SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.30.0.0/24"), netip.MustParsePrefix("10.30.8.0/24")},
		Exposures:   []string{"crm"},
		IPsec: &model.IPsecPeer{RemoteAddress: "fw.bravo.example.org", RemoteID: "fw.bravo.example.org",
			ESPProposals: []string{"aes128gcm16-modp2048"}, RekeyTime: time.Hour,
			PSK: model.SecretKeyRef{Name: "bravo-psk", Key: "psk"}, Reqid: model.PeerReqid("tenant-a", "acme", "bravo"),
			SubnetReqids: []uint32{model.SubnetReqid("tenant-a", "acme", "bravo", netip.MustParsePrefix("10.30.0.0/24")),
				model.SubnetReqid("tenant-a", "acme", "bravo", netip.MustParsePrefix("10.30.8.0/24"))}}}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("IPsec peer:\n got %+v\nwant %+v", p, want)
	}

	wg := modelgen.Peer("laptop", modelgen.NoGrants(), modelgen.IPsec("x", "y"), modelgen.WireGuard("k"),
		modelgen.WithheldCIDRs("10.20.5.0/24"), modelgen.ReverseGrants("erp"))
	wantWG := model.Peer{Name: "laptop", Authorization: model.Decision{Reason: model.ReasonNoGrants, Message: model.MessageNoBlockMultiPeer},
		WithheldCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.5.0/24")}, ReverseExposures: []string{"erp"},
		WireGuard: &model.WireGuardPeer{PublicKey: "k"}}
	if !reflect.DeepEqual(wg, wantWG) {
		t.Errorf("WireGuard peer:\n got %+v\nwant %+v", wg, wantWG)
	}
	if d := modelgen.Dark(model.ReasonSubnetConflict, "m"); d != (model.Decision{Reason: model.ReasonSubnetConflict, Message: "m"}) {
		t.Errorf("Dark: %+v", d)
	}
}
