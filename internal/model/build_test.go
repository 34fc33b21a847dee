package model

import (
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

func TestBuildIPsec(t *testing.T) {
	in := testInput(
		ipsecPeer("b", []string{"10.30.0.0/16", "10.29.0.0/16"}, gen.Grants("metrics"), age(2)),
		ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("internal-api", "metrics"), gen.ReverseGrants("acme-erp"), age(1)),
	)
	in.PublicAddress = "198.51.100.7"
	// a keeps the virtual IP it had; metrics asks for a fixed one.
	in.Gateway.Status.Exposures = []vpnv1.ExposureStatus{{Name: "internal-api", VirtualIP: "100.64.3.40"}}
	in.Gateway.Spec.Exposures[1].VirtualIP = "100.64.3.2"

	gw, errs := Build(in)
	if errs != nil {
		t.Fatalf("Build: %v", errs)
	}
	if gw.Namespace != "tenant" || gw.Name != "gw" || gw.UID != "gw-uid" || gw.Generation != 3 {
		t.Errorf("metadata not copied: %+v", gw)
	}
	if gw.Protocol != ProtocolIPsec || gw.Mode != ModeSNAT || gw.PublicAddress != "198.51.100.7" {
		t.Errorf("protocol/mode/public address: %s %s %s", gw.Protocol, gw.Mode, gw.PublicAddress)
	}
	if !reflect.DeepEqual(gw.Endpoint, Endpoint{Kind: EndpointFloatingIPPool, FloatingIPPool: "public"}) {
		t.Errorf("endpoint %+v", gw.Endpoint)
	}
	if gw.ServiceCIDR.String() != "100.64.3.0/24" || gw.LocalAddress.String() != "100.64.3.1" {
		t.Errorf("service CIDR %s local %s", gw.ServiceCIDR, gw.LocalAddress)
	}
	wantIPsec := &IPsecGateway{
		IKEVersion:   2,
		IKEProposals: []string{"aes256gcm16-prfsha256-ecp256", "aes256-sha256-modp2048"},
		DPDDelay:     30 * time.Second,
		DPDAction:    "restart",
		RekeyTime:    4 * time.Hour,
	}
	if !reflect.DeepEqual(gw.IPsec, wantIPsec) || gw.WireGuard != nil {
		t.Errorf("ipsec %+v wireguard %+v", gw.IPsec, gw.WireGuard)
	}
	wantExp := []Exposure{
		{Name: "internal-api", VirtualIP: netip.MustParseAddr("100.64.3.40"), Target: netip.MustParseAddr("100.70.7.10"),
			Ports: []Port{{Protocol: "tcp", Port: 443, TargetPort: 443}}, GrantedTo: []string{"a"}},
		{Name: "metrics", VirtualIP: netip.MustParseAddr("100.64.3.2"), Target: netip.MustParseAddr("10.96.0.20"), TargetService: "metrics",
			Ports: []Port{{Protocol: "udp", Port: 9090, TargetPort: 19090}}, GrantedTo: []string{"a", "b"}},
	}
	if !reflect.DeepEqual(gw.Exposures, wantExp) {
		t.Errorf("exposures\n got  %+v\n want %+v", gw.Exposures, wantExp)
	}
	wantRev := []ReverseExposure{{Name: "acme-erp", VirtualIP: netip.MustParseAddr("100.64.3.3"), Target: netip.MustParseAddr("10.20.0.5"),
		Ports: []Port{{Protocol: "tcp", Port: 1433, TargetPort: 1433, GatewayPort: ReverseGatewayPortBase}}, Grantee: "a"}}
	if !reflect.DeepEqual(gw.ReverseExposures, wantRev) {
		t.Errorf("reverse exposures\n got  %+v\n want %+v", gw.ReverseExposures, wantRev)
	}
	if !reflect.DeepEqual(gw.InternalSourceCIDRs, []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}) {
		t.Errorf("internal sources %v", gw.InternalSourceCIDRs)
	}
	wantPeers := []Peer{
		{
			Name: "a", UID: "a-uid", Generation: 1,
			SourceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
			Authorization: Decision{true, ReasonAuthorized,
				`granted exposures: "internal-api", "metrics"; reverse exposures: "acme-erp"`},
			Exposures:        []string{"internal-api", "metrics"},
			ReverseExposures: []string{"acme-erp"},
			IPsec: &IPsecPeer{RemoteAddress: "203.0.113.9", RemoteID: "a.example.com",
				ESPProposals: []string{"aes256gcm16-ecp256", "aes256-sha256-modp2048"}, RekeyTime: time.Hour,
				PSK: SecretKeyRef{"a-psk", "psk"}, Reqid: PeerReqid("tenant", "gw", "a")},
		},
		{
			Name: "b", UID: "b-uid", Generation: 1,
			SourceCIDRs:   []netip.Prefix{netip.MustParsePrefix("10.29.0.0/16"), netip.MustParsePrefix("10.30.0.0/16")},
			Authorization: Decision{true, ReasonAuthorized, `granted exposures: "metrics"; reverse exposures: none`},
			Exposures:     []string{"metrics"},
			IPsec: &IPsecPeer{RemoteAddress: "203.0.113.9", RemoteID: "b.example.com",
				ESPProposals: []string{"aes256gcm16-ecp256", "aes256-sha256-modp2048"}, RekeyTime: time.Hour,
				PSK: SecretKeyRef{"b-psk", "psk"}, Reqid: PeerReqid("tenant", "gw", "b"),
				SubnetReqids: []uint32{SubnetReqid("tenant", "gw", "b", netip.MustParsePrefix("10.29.0.0/16")),
					SubnetReqid("tenant", "gw", "b", netip.MustParsePrefix("10.30.0.0/16"))}},
		},
	}
	if !reflect.DeepEqual(gw.Peers, wantPeers) {
		t.Errorf("peers\n got  %+v\n want %+v", gw.Peers, wantPeers)
	}
	if gw.Problems != nil {
		t.Errorf("problems %v", gw.Problems)
	}
	checkNoPartialGrants(t, in, gw)
}

// A host-network gateway's Service target: traffic goes to the endpoint the caller chose, on
// the endpoint's port for each Service port.
func TestBuildServiceEndpointTarget(t *testing.T) {
	in := testInput(ipsecPeer("a", []string{"10.20.0.0/16"}))
	in.Services["metrics"] = ServiceTarget{
		Address:  netip.MustParseAddr("100.96.0.7"),
		Endpoint: true,
		Ports:    map[ServicePort]uint16{{"udp", 19090}: 9100, {"tcp", 19090}: 9999},
	}
	gw, errs := Build(in)
	if errs != nil {
		t.Fatalf("Build: %v", errs)
	}
	x := gw.Exposures[1]
	want := []Port{{Protocol: "udp", Port: 9090, TargetPort: 9100}}
	if x.TargetService != "metrics" || x.Target != netip.MustParseAddr("100.96.0.7") || !reflect.DeepEqual(x.Ports, want) {
		t.Errorf("exposure %+v, want target 100.96.0.7 and ports %+v", x, want)
	}
}

func TestBuildIPsecSettings(t *testing.T) {
	in := testInput(ipsecPeer("a", []string{"10.20.0.0/16"}, gen.RemoteID("acme-hq.example.com"), gen.PeerFunc(func(p *vpnv1.VPNPeer) {
		p.Spec.IPsec.ESP = vpnv1.ESPSettings{Proposals: []string{"aes128gcm16"}, RekeyTime: &metav1.Duration{Duration: 20 * time.Minute}}
	})))
	in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{
		LocalID: "gw.example.net",
		IKE: vpnv1.IKESettings{
			Version:    1,
			Proposals:  []string{"aes128-sha1-modp1024"},
			DPD:        &vpnv1.DPDSettings{Delay: &metav1.Duration{Duration: 10 * time.Second}, Action: "clear"},
			RekeyTime:  &metav1.Duration{Duration: time.Hour},
			ReauthTime: &metav1.Duration{Duration: 8 * time.Hour},
		},
		ForceEncapsulation: true,
		MTU:                1392,
	}
	gw, errs := Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	want := &IPsecGateway{IKEVersion: 1, IKEProposals: []string{"aes128-sha1-modp1024"}, LocalID: "gw.example.net",
		DPDDelay: 10 * time.Second, DPDAction: "clear", RekeyTime: time.Hour, ReauthTime: 8 * time.Hour, ForceEncap: true, TunnelMTU: 1392}
	if !reflect.DeepEqual(gw.IPsec, want) {
		t.Errorf("ipsec %+v", gw.IPsec)
	}
	wantPeer := &IPsecPeer{RemoteAddress: "203.0.113.9", RemoteID: "acme-hq.example.com", ESPProposals: []string{"aes128gcm16"},
		RekeyTime: 20 * time.Minute, PSK: SecretKeyRef{"a-psk", "psk"}, Reqid: PeerReqid("tenant", "gw", "a")}
	if !reflect.DeepEqual(gw.Peers[0].IPsec, wantPeer) {
		t.Errorf("peer %+v", gw.Peers[0].IPsec)
	}

	// A DPD block without values keeps the defaults.
	in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{DPD: &vpnv1.DPDSettings{}}}
	gw, errs = Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	if gw.IPsec.DPDDelay != 30*time.Second || gw.IPsec.DPDAction != "restart" || gw.IPsec.IKEVersion != 2 || gw.IPsec.MTU() != DefaultIPsecMTU || gw.IPsec.ForceEncap {
		t.Errorf("defaults not applied: %+v", gw.IPsec)
	}
}

func TestBuildWireGuard(t *testing.T) {
	in := testInput(wgPeer("a", []string{"10.20.0.0/16"}, gen.WireGuardEndpoint("peer.example.com:51820"),
		gen.PresharedKeySecretRef("a-psk", "psk"), gen.PersistentKeepalive(25)))
	in.Gateway = testGateway(vpnv1.ProtocolWireGuard)
	in.Gateway.Spec.Endpoint = vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: "198.51.100.8"}}
	gw, errs := Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	want := &WireGuardGateway{ListenPort: 51820, MTU: 1420, PrivateKey: SecretKeyRef{"gw-wireguard-key", "privateKey"}}
	if !reflect.DeepEqual(gw.WireGuard, want) || gw.IPsec != nil {
		t.Errorf("wireguard %+v ipsec %+v", gw.WireGuard, gw.IPsec)
	}
	wantEP := Endpoint{Kind: EndpointHostNetwork, NodeName: "node-1", HostAddress: netip.MustParseAddr("198.51.100.8")}
	if !reflect.DeepEqual(gw.Endpoint, wantEP) {
		t.Errorf("endpoint %+v", gw.Endpoint)
	}
	wantPeer := &WireGuardPeer{PublicKey: testPeerKey("a"), Endpoint: "peer.example.com:51820",
		PresharedKey: &SecretKeyRef{"a-psk", "psk"}, PersistentKeepalive: 25}
	if p := gw.Peers[0]; !reflect.DeepEqual(p.WireGuard, wantPeer) || p.IPsec != nil || p.Authorization.Reason != ReasonDefaultAllow {
		t.Errorf("peer %+v", p)
	}

	in.Gateway.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{ListenPort: 4500, MTU: 1380,
		PrivateKeySecretRef: &vpnv1.SecretKeyRef{Name: "my-key", Key: "k"}}
	gw, errs = Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	want = &WireGuardGateway{ListenPort: 4500, MTU: 1380, PrivateKey: SecretKeyRef{"my-key", "k"}}
	if !reflect.DeepEqual(gw.WireGuard, want) {
		t.Errorf("wireguard %+v", gw.WireGuard)
	}
}

func TestBuildEndpoints(t *testing.T) {
	tests := []struct {
		ep   vpnv1.Endpoint
		want Endpoint
	}{
		{vpnv1.Endpoint{FloatingIP: "198.51.100.9"}, Endpoint{Kind: EndpointFloatingIP, FloatingIP: netip.MustParseAddr("198.51.100.9")}},
		{vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{LoadBalancerClass: "lb", Annotations: map[string]string{"k": "v"}}},
			Endpoint{Kind: EndpointLoadBalancer, LoadBalancerClass: "lb", Annotations: map[string]string{"k": "v"}}},
		{vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "n"}}, Endpoint{Kind: EndpointHostNetwork, NodeName: "n"}},
	}
	for _, tt := range tests {
		in := testInput(ipsecPeer("a", []string{"10.20.0.0/16"}))
		in.Gateway.Spec.Endpoint = tt.ep
		gw, errs := Build(in)
		if errs != nil {
			t.Fatal(errs)
		}
		if !reflect.DeepEqual(gw.Endpoint, tt.want) {
			t.Errorf("endpoint %+v, want %+v", gw.Endpoint, tt.want)
		}
	}
}

func TestBuildProblems(t *testing.T) {
	// Reverse exposure granted to a second, disjoint peer: the first keeps its grant and is
	// the grantee, the second is dark, and the gateway problem names both.
	in := testInput(
		ipsecPeer("a", []string{"10.20.0.0/16"}, gen.ReverseGrants("acme-erp"), age(1)),
		ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("metrics"), gen.ReverseGrants("acme-erp"), age(2)),
	)
	in.Config.InternalSourceCIDRs = nil
	gw, errs := Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	if got := gw.ReverseExposures[0].Grantee; got != "a" {
		t.Errorf("grantee %q, want a", got)
	}
	if a := gw.Peers[0]; a.Authorization.Reason != ReasonAuthorized || !slices.Equal(a.ReverseExposures, []string{"acme-erp"}) {
		t.Errorf("a: %+v", a)
	}
	if b := gw.Peers[1]; b.Authorization.Reason != ReasonReverseExposureOutsideSubnets || b.Exposures != nil || b.ReverseExposures != nil {
		t.Errorf("b: %+v", b)
	}
	if gw.Exposures[1].GrantedTo != nil {
		t.Errorf("metrics granted to %v; b is dark", gw.Exposures[1].GrantedTo)
	}
	want := []Problem{
		{ReasonReverseExposureConflict, `reverse exposure "acme-erp" (10.20.0.5) is granted to peer "b", whose subnets do not contain it; its valid grantee is "a"`},
		{ReasonNoInternalSources, `reverse exposures "acme-erp" are unreachable: the operator has no internalSourceCIDRs configured`},
	}
	if !reflect.DeepEqual(gw.Problems, want) {
		t.Errorf("problems\n got  %q\n want %q", gw.Problems, want)
	}
	checkNoPartialGrants(t, in, gw)

	// Without reverse exposures, no internal sources is no problem.
	in.Gateway.Spec.ReverseExposures = nil
	in.Peers = in.Peers[:1]
	in.Peers[0].Spec.Authorization = nil
	gw, errs = Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	if gw.Problems != nil || gw.Peers[0].Authorization.Reason != ReasonDefaultAllow {
		t.Errorf("problems %v, peer %+v", gw.Problems, gw.Peers[0])
	}
}

func TestBuildErrors(t *testing.T) {
	type wantErr struct{ reason, field string }
	tests := []struct {
		name   string
		mutate func(in *Input)
		want   []wantErr
	}{
		{"nil gateway", func(in *Input) { in.Gateway = nil }, []wantErr{{ReasonInvalidSpec, "gateway"}}},
		{"routed mode", func(in *Input) { in.Gateway.Spec.Mode = vpnv1.ModeRouted },
			[]wantErr{{ReasonModeNotImplemented, "spec.mode"}}},
		{"unknown mode", func(in *Input) { in.Gateway.Spec.Mode = "bridged" }, []wantErr{{ReasonInvalidSpec, "spec.mode"}}},
		{"DPD timeout on an IKEv2 gateway", func(in *Input) {
			in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{DPD: &vpnv1.DPDSettings{Timeout: &metav1.Duration{Duration: time.Minute}}}}
		}, []wantErr{{ReasonInvalidSpec, "spec.ipsec.ike.dpd.timeout"}}},
		{"unknown protocol", func(in *Input) { in.Gateway.Spec.Protocol = "openvpn" }, []wantErr{{ReasonInvalidSpec, "spec.protocol"}}},
		{"no endpoint", func(in *Input) { in.Gateway.Spec.Endpoint = vpnv1.Endpoint{} }, []wantErr{{ReasonInvalidSpec, "spec.endpoint"}}},
		{"two endpoints", func(in *Input) { in.Gateway.Spec.Endpoint.FloatingIP = "198.51.100.9" },
			[]wantErr{{ReasonInvalidSpec, "spec.endpoint"}}},
		{"bad floating IP", func(in *Input) { in.Gateway.Spec.Endpoint = vpnv1.Endpoint{FloatingIP: "198.51.100"} },
			[]wantErr{{ReasonInvalidSpec, "spec.endpoint.floatingIP"}}},
		{"bad host address", func(in *Input) {
			in.Gateway.Spec.Endpoint = vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "n", Address: "nope"}}
		}, []wantErr{{ReasonInvalidSpec, "spec.endpoint.hostNetwork.address"}}},
		{"no service CIDR", func(in *Input) { in.ServiceCIDR = netip.Prefix{} }, []wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"service CIDR outside CGNAT", func(in *Input) { in.ServiceCIDR = netip.MustParsePrefix("10.64.0.0/24") },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"service CIDR larger than CGNAT", func(in *Input) { in.ServiceCIDR = netip.MustParsePrefix("100.0.0.0/8") },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"service CIDR with host bits", func(in *Input) { in.ServiceCIDR = netip.MustParsePrefix("100.64.3.1/24") },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"IPv6 service CIDR", func(in *Input) { in.ServiceCIDR = netip.MustParsePrefix("fd00::/64") },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"service CIDR too small", func(in *Input) { in.ServiceCIDR = netip.MustParsePrefix("100.64.3.0/31") },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"unparsable spec service CIDR", func(in *Input) { in.Gateway.Spec.ServiceCIDR = "100.64.3.0" },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"spec service CIDR differs from the assigned one", func(in *Input) { in.Gateway.Spec.ServiceCIDR = "100.64.9.0/24" },
			[]wantErr{{ReasonInvalidSpec, "spec.serviceCIDR"}}},
		{"wireguard settings on ipsec gateway", func(in *Input) {
			in.Gateway.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{}
		}, []wantErr{{ReasonInvalidSpec, "spec.wireguard"}}},
		{"bad IKE settings", func(in *Input) {
			in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{
				Version: 3, DPD: &vpnv1.DPDSettings{Action: "hold"}, RekeyTime: &metav1.Duration{Duration: -time.Second}}}
		}, []wantErr{{ReasonInvalidSpec, "spec.ipsec.ike.version"}, {ReasonInvalidSpec, "spec.ipsec.ike.dpd.action"},
			{ReasonInvalidSpec, "spec.ipsec.ike.rekeyTime"}}},
		{"IPsec MTU below 1280", func(in *Input) {
			in.Gateway.Spec.IPsec = &vpnv1.IPsecGatewaySettings{MTU: 576}
		}, []wantErr{{ReasonInvalidSpec, "spec.ipsec.mtu"}}},
		{"bad wireguard settings", func(in *Input) {
			in.Gateway.Spec.Protocol = vpnv1.ProtocolWireGuard
			in.Gateway.Spec.WireGuard = &vpnv1.WireGuardGatewaySettings{ListenPort: 70000, MTU: 100,
				PrivateKeySecretRef: &vpnv1.SecretKeyRef{}}
			in.Peers = []vpnv1.VPNPeer{wgPeer("a", []string{"10.20.0.0/16"})}
		}, []wantErr{{ReasonInvalidSpec, "spec.wireguard.listenPort"}, {ReasonInvalidSpec, "spec.wireguard.mtu"},
			{ReasonInvalidSpec, "spec.wireguard.privateKeySecretRef.name"}, {ReasonInvalidSpec, "spec.wireguard.privateKeySecretRef.key"}}},
		{"target service not found", func(in *Input) { delete(in.Services, "metrics") },
			[]wantErr{{ReasonTargetServiceNotFound, "spec.exposures[1].target.service.name"}}},
		{"target service without address", func(in *Input) { in.Services["metrics"] = ServiceTarget{} },
			[]wantErr{{ReasonTargetServiceNoAddress, "spec.exposures[1].target.service.name"}}},
		{"target service with unspecified address", func(in *Input) { in.Services["metrics"] = ServiceTarget{Address: netip.IPv4Unspecified()} },
			[]wantErr{{ReasonTargetServiceNoAddress, "spec.exposures[1].target.service.name"}}},
		{"target service without a ready endpoint (host network)", func(in *Input) { in.Services["metrics"] = ServiceTarget{Endpoint: true} },
			[]wantErr{{ReasonTargetServiceNoEndpoints, "spec.exposures[1].target.service.name"}}},
		{"target service without the target port", func(in *Input) {
			in.Services["metrics"] = ServiceTarget{Address: netip.MustParseAddr("10.96.0.20"), Ports: map[ServicePort]uint16{{"tcp", 19090}: 19090}}
		}, []wantErr{{ReasonTargetServicePortNotFound, "spec.exposures[1].target.ports[0]"}}},
		{"unparsable exposure target", func(in *Input) { in.Gateway.Spec.Exposures[0].Target.Address = "100.70.7" },
			[]wantErr{{ReasonInvalidSpec, "spec.exposures[0].target.address"}}},
		{"exposure target both address and service", func(in *Input) { in.Gateway.Spec.Exposures[1].Target.Address = "10.1.1.1" },
			[]wantErr{{ReasonInvalidSpec, "spec.exposures[1].target"}}},
		{"exposure target neither address nor service", func(in *Input) { in.Gateway.Spec.Exposures[0].Target.Address = "" },
			[]wantErr{{ReasonInvalidSpec, "spec.exposures[0].target"}}},
		{"unparsable reverse target", func(in *Input) { in.Gateway.Spec.ReverseExposures[0].Target.Address = "10.20.0.300" },
			[]wantErr{{ReasonInvalidSpec, "spec.reverseExposures[0].target.address"}}},
		{"bad ports", func(in *Input) {
			in.Gateway.Spec.Exposures[0].Target.Ports = []intstr.IntOrString{intstr.FromInt32(0), intstr.FromString("80/sctp"),
				intstr.FromString("81:70000"), intstr.FromInt32(443), intstr.FromString("443/tcp")}
			in.Gateway.Spec.ReverseExposures[0].Target.Ports = nil
		}, []wantErr{{ReasonInvalidSpec, "spec.exposures[0].target.ports[0]"},
			{ReasonInvalidSpec, "spec.exposures[0].target.ports[1]"},
			{ReasonInvalidSpec, "spec.exposures[0].target.ports[2]"},
			{ReasonInvalidSpec, "spec.exposures[0].target.ports[4]"},
			{ReasonInvalidSpec, "spec.reverseExposures[0].target.ports"}}},
		{"duplicate names across exposures and reverse exposures", func(in *Input) {
			in.Gateway.Spec.ReverseExposures[0].Name = "metrics"
		}, []wantErr{{ReasonInvalidSpec, "spec.reverseExposures[0].name"}}},
		{"unparsable virtual IP", func(in *Input) { in.Gateway.Spec.Exposures[0].VirtualIP = "100.64.3" },
			[]wantErr{{ReasonInvalidSpec, "spec.exposures[0].virtualIP"}}},
		{"virtual IP outside the service CIDR", func(in *Input) { in.Gateway.Spec.ReverseExposures[0].VirtualIP = "100.64.4.9" },
			[]wantErr{{ReasonVirtualIPOutsideCIDR, "spec.reverseExposures[0].virtualIP"}}},
		{"virtual IP requested twice", func(in *Input) {
			in.Gateway.Spec.Exposures[0].VirtualIP = "100.64.3.9"
			in.Gateway.Spec.ReverseExposures[0].VirtualIP = "100.64.3.9"
		}, []wantErr{{ReasonVirtualIPConflict, "spec.reverseExposures[0].virtualIP"}}},
		{"virtual IP is the gateway's own address", func(in *Input) { in.Gateway.Spec.Exposures[1].VirtualIP = "100.64.3.1" },
			[]wantErr{{ReasonVirtualIPConflict, "spec.exposures[1].virtualIP"}}},
		{"virtual IP is the broadcast address", func(in *Input) { in.Gateway.Spec.Exposures[1].VirtualIP = "100.64.3.255" },
			[]wantErr{{ReasonVirtualIPConflict, "spec.exposures[1].virtualIP"}}},
		{"service CIDR exhausted", func(in *Input) { in.ServiceCIDR = netip.MustParsePrefix("100.64.3.0/30") },
			[]wantErr{{ReasonServiceCIDRExhausted, "spec.exposures[1].virtualIP"},
				{ReasonServiceCIDRExhausted, "spec.reverseExposures[0].virtualIP"}}},
		{"bad internal source CIDR", func(in *Input) { in.Config.InternalSourceCIDRs = append(in.Config.InternalSourceCIDRs, netip.Prefix{}) },
			[]wantErr{{ReasonInvalidSpec, "config.internalSourceCIDRs[1]"}}},
		{"unparsable peer subnet", func(in *Input) { in.Peers[1].Spec.IPsec.RemoteSubnets = []string{"10.30.0.0/16", "10.31.0.0/33"} },
			[]wantErr{{ReasonInvalidSpec, "peers[b].spec.ipsec.remoteSubnets[1]"}}},
		{"peer subnet with host bits", func(in *Input) { in.Peers[0].Spec.IPsec.RemoteSubnets = []string{"10.20.0.1/16"} },
			[]wantErr{{ReasonInvalidSpec, "peers[a].spec.ipsec.remoteSubnets[0]"}}},
		{"peer without subnets", func(in *Input) { in.Peers[0].Spec.IPsec.RemoteSubnets = nil },
			[]wantErr{{ReasonInvalidSpec, "peers[a].spec.ipsec.remoteSubnets"}}},
		{"peer without PSK ref and address", func(in *Input) {
			in.Peers[0].Spec.IPsec.PSKSecretRef = vpnv1.SecretKeyRef{}
			in.Peers[0].Spec.IPsec.Peer.Address = ""
		}, []wantErr{{ReasonInvalidSpec, "peers[a].spec.ipsec.pskSecretRef.name"}, {ReasonInvalidSpec, "peers[a].spec.ipsec.pskSecretRef.key"},
			{ReasonInvalidSpec, "peers[a].spec.ipsec.peer.address"}}},
		{"bad wireguard peer", func(in *Input) {
			in.Gateway.Spec.Protocol = vpnv1.ProtocolWireGuard
			in.Peers = []vpnv1.VPNPeer{wgPeer("w", []string{"10.20.0.0/16", "fd00::/64"}, gen.WireGuardPeer("short"), gen.PersistentKeepalive(-1))}
		}, []wantErr{{ReasonInvalidSpec, "peers[w].spec.wireguard.publicKey"}, {ReasonInvalidSpec, "peers[w].spec.wireguard.persistentKeepalive"},
			{ReasonInvalidSpec, "peers[w].spec.wireguard.subnets[1]"}}},
		{"duplicate peer names", func(in *Input) { in.Peers = append(in.Peers, in.Peers[0]) },
			[]wantErr{{ReasonInvalidSpec, "peers[a]"}}},
		{"every error at once, in order", func(in *Input) {
			in.Gateway.Spec.Mode = vpnv1.ModeRouted
			in.Gateway.Spec.Endpoint = vpnv1.Endpoint{}
			in.Gateway.Spec.Exposures[0].VirtualIP = "100.64.200.1"
			delete(in.Services, "metrics")
			in.Peers[1].Spec.IPsec.RemoteSubnets = []string{"x"}
			in.Peers[0].Spec.IPsec.RemoteSubnets = []string{"y"}
		}, []wantErr{{ReasonModeNotImplemented, "spec.mode"}, {ReasonInvalidSpec, "spec.endpoint"},
			{ReasonTargetServiceNotFound, "spec.exposures[1].target.service.name"},
			{ReasonVirtualIPOutsideCIDR, "spec.exposures[0].virtualIP"},
			{ReasonInvalidSpec, "peers[a].spec.ipsec.remoteSubnets[0]"}, {ReasonInvalidSpec, "peers[b].spec.ipsec.remoteSubnets[0]"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := testInput(
				ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.ReverseGrants("acme-erp"), age(1)),
				ipsecPeer("b", []string{"10.30.0.0/16"}, gen.Grants("internal-api"), age(2)),
			)
			tt.mutate(&in)
			gw, errs := Build(in)
			if gw != nil {
				t.Errorf("got a model despite errors: %+v", gw)
			}
			var got []wantErr
			for _, e := range errs {
				got = append(got, wantErr{e.Reason, e.Field})
				if e.Detail == "" {
					t.Errorf("%s: empty detail", e.Field)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors\n got  %v\n want %v\n (%v)", got, tt.want, errs)
			}
			// Same errors again: deterministic.
			if in.Gateway != nil {
				_, errs2 := Build(in)
				if !reflect.DeepEqual(errs, errs2) {
					t.Errorf("second Build differs:\n%v\n%v", errs, errs2)
				}
			}
		})
	}
}

// Same input with the peers shuffled gives the identical model.
func TestBuildDeterministic(t *testing.T) {
	in := testInput(
		ipsecPeer("a", []string{"10.20.0.0/16"}, gen.Grants("metrics"), gen.ReverseGrants("acme-erp"), age(3)),
		ipsecPeer("b", []string{"10.30.0.0/16", "10.31.0.0/16"}, gen.Grants("internal-api", "metrics"), age(1)),
		ipsecPeer("c", []string{"10.20.5.0/24"}, gen.Grants("metrics"), age(2)), // overlaps a, older
		ipsecPeer("d", []string{"10.40.0.0/16"}, gen.ReverseGrants("acme-erp"), age(4)),
		ipsecPeer("e", []string{"10.50.0.0/16"}),
		ipsecPeer("f", []string{"10.60.0.0/16"}, gen.Grants("ghost")),
		wgPeer("g", []string{"10.70.0.0/16"}),
	)
	in.Gateway.Spec.Endpoint = vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{
		Annotations: map[string]string{"a": "1", "b": "2", "c": "3", "d": "4"}}}
	first, errs := Build(in)
	if errs != nil {
		t.Fatal(errs)
	}
	firstJSON, err := json.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	checkNoPartialGrants(t, in, first)
	if r := first.Peers[0]; r.Authorization.Reason != ReasonSubnetConflict {
		t.Errorf("a: %+v", r.Authorization)
	}

	r := rand.New(rand.NewPCG(7, 7))
	for i := range 30 {
		shuffled := in
		shuffled.Peers = slices.Clone(in.Peers)
		r.Shuffle(len(shuffled.Peers), func(i, j int) {
			shuffled.Peers[i], shuffled.Peers[j] = shuffled.Peers[j], shuffled.Peers[i]
		})
		got, errs := Build(shuffled)
		if errs != nil {
			t.Fatal(errs)
		}
		if !reflect.DeepEqual(first, got) {
			t.Fatalf("run %d differs:\n%+v\n%+v", i, first, got)
		}
		gotJSON, _ := json.Marshal(got)
		if string(gotJSON) != string(firstJSON) {
			t.Fatalf("run %d JSON differs:\n%s\n%s", i, firstJSON, gotJSON)
		}
	}
}

// Property: over many peer combinations, every peer is fully granted as written or dark.
func TestBuildNoPartialGrants(t *testing.T) {
	subnets := [][]string{{"10.20.0.0/16"}, {"10.20.0.0/24"}, {"10.30.0.0/16"}, {"10.0.0.0/8"}, {"192.168.1.0/24", "10.20.0.0/20"}}
	blocks := []*vpnv1.Authorization{
		nil,
		{},
		{Exposures: []string{"metrics"}},
		{Exposures: []string{"metrics", "internal-api"}, ReverseExposures: []string{"acme-erp"}},
		{ReverseExposures: []string{"acme-erp"}},
		{Exposures: []string{"metrics", "nope"}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		n := 1 + r.IntN(4)
		var peers []vpnv1.VPNPeer
		for j := range n {
			p := ipsecPeer(string(rune('a'+j)), subnets[r.IntN(len(subnets))], age(r.IntN(3)))
			if b := blocks[r.IntN(len(blocks))]; b != nil {
				p.Spec.Authorization = b.DeepCopy()
			}
			if r.IntN(8) == 0 {
				p.Spec.IPsec, p.Spec.WireGuard = nil, &vpnv1.WireGuardPeer{PublicKey: testWGKey, Subnets: p.Spec.IPsec.RemoteSubnets}
			}
			peers = append(peers, p)
		}
		in := testInput(peers...)
		gw, errs := Build(in)
		if errs != nil {
			t.Fatalf("case %d: %v", i, errs)
		}
		checkNoPartialGrants(t, in, gw)
		if t.Failed() {
			t.Fatalf("case %d: peers %+v", i, peers)
		}
	}
}

// The reverse clients are the tenant's pods inside the internal source CIDRs, sorted and
// unique; anything else the caller passes (another range, IPv6, the unspecified address) is
// dropped, and the agent-side Verify refuses a model that admits one outside them.
func TestBuildReverseClients(t *testing.T) {
	in := testInput()
	a := netip.MustParseAddr
	in.ReverseClients = []netip.Addr{a("10.244.0.9"), a("192.0.2.7"), a("10.244.0.3"), a("::ffff:10.244.0.4"), a("2001:db8::1"), a("0.0.0.0"), a("10.244.0.9")}
	in.Gateway.Spec.ReverseExposureNamespaces = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "acme"}}
	gw, errs := Build(in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := []netip.Addr{a("10.244.0.3"), a("10.244.0.4"), a("10.244.0.9")}
	if !reflect.DeepEqual(gw.ReverseClients, want) {
		t.Errorf("reverse clients %v, want %v", gw.ReverseClients, want)
	}
	if gw.ReverseClientNamespaces == nil || gw.ReverseClientNamespaces.MatchLabels["team"] != "acme" {
		t.Errorf("reverse client namespaces %v", gw.ReverseClientNamespaces)
	}
	if err := Verify(gw); err != nil {
		t.Fatalf("a built model fails Verify: %v", err)
	}
	gw.ReverseClients = append(gw.ReverseClients, a("192.0.2.7"))
	if err := Verify(gw); err == nil || !strings.Contains(err.Error(), "192.0.2.7") {
		t.Errorf("Verify admitted a reverse client outside the internal sources: %v", err)
	}

	in.Gateway.Spec.ReverseExposureNamespaces = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Sideways"}}}
	if _, errs := Build(in); len(errs) == 0 || errs[0].Field != "spec.reverseExposureNamespaces" {
		t.Errorf("an invalid selector: %v", errs)
	}
}

// A gateway's standby is its spec's, else the install's default; only a VPNGateway with a
// loadBalancer endpoint has one.
func TestBuildStandby(t *testing.T) {
	lb := gen.LoadBalancer(vpnv1.LoadBalancerEndpoint{})
	for _, tc := range []struct {
		name    string
		kind    string
		mods    []gen.GatewayMod
		install bool
		want    bool
	}{
		{name: "unset", mods: []gen.GatewayMod{lb}},
		{name: "install-default", mods: []gen.GatewayMod{lb}, install: true, want: true},
		{name: "spec-on", mods: []gen.GatewayMod{lb, gen.Standby(true)}, want: true},
		{name: "spec-off-wins", mods: []gen.GatewayMod{lb, gen.Standby(false)}, install: true},
		{name: "floating-ip-ignores-the-default", mods: []gen.GatewayMod{gen.FloatingIPPool("public")}, install: true},
		{name: "host-network-ignores-the-default", mods: []gen.GatewayMod{gen.HostNetwork("node-1", "198.51.100.1")}, install: true},
		{name: "host-network-spec-on", mods: []gen.GatewayMod{gen.HostNetwork("node-1", "198.51.100.1"), gen.Standby(true)}},
		{name: "legacy", kind: KindIPsecGateway, mods: []gen.GatewayMod{lb}, install: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := testInput()
			in.Gateway = gen.VPNGatewayFrom(in.Gateway, tc.mods...)
			in.Config.Standby = tc.install
			if got := StandbyOf(tc.kind, in.Gateway, in.Config); got != tc.want {
				t.Errorf("StandbyOf = %v, want %v", got, tc.want)
			}
			if tc.kind != "" {
				return
			}
			out, errs := Build(in)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if out.Standby != tc.want {
				t.Errorf("model Standby = %v, want %v", out.Standby, tc.want)
			}
		})
	}
}
