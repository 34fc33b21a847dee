package gen_test

import (
	"reflect"
	"regexp"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// The defaults are what the package comment and the builders' comments say they are.
func TestDefaults(t *testing.T) {
	gw := gen.VPNGateway("tenant", "edge")
	wantGW := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "edge"},
		Spec:       vpnv1.VPNGatewaySpec{Protocol: vpnv1.ProtocolIPsec, Endpoint: vpnv1.Endpoint{FloatingIPPool: "public"}},
	}
	if !reflect.DeepEqual(gw, wantGW) {
		t.Errorf("VPNGateway defaults:\n got %+v\nwant %+v", gw, wantGW)
	}

	p := gen.VPNPeer("tenant", "branch")
	wantPeer := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "branch"},
		Spec: vpnv1.VPNPeerSpec{GatewayRef: "gw", IPsec: &vpnv1.IPsecPeer{
			Peer:          vpnv1.IPsecRemote{Address: "203.0.113.9", ID: "branch.example.com"},
			RemoteSubnets: []string{"10.20.0.0/16"},
			PSKSecretRef:  vpnv1.SecretKeyRef{Name: "branch-psk", Key: "psk"},
		}},
	}
	if !reflect.DeepEqual(p, wantPeer) {
		t.Errorf("VPNPeer defaults:\n got %+v\nwant %+v", p, wantPeer)
	}

	s := gen.PSKSecret("tenant", "branch", "secret")
	if s.Name != p.Spec.IPsec.PSKSecretRef.Name || string(s.Data[p.Spec.IPsec.PSKSecretRef.Key]) != "secret" || s.Namespace != "tenant" {
		t.Errorf("PSKSecret %+v is not the Secret the default peer names (%+v)", s, p.Spec.IPsec.PSKSecretRef)
	}

	key := gen.WireGuardKeySecret("tenant", "gw-key", "private")
	ref := gen.VPNGateway("tenant", "gw", gen.WireGuardPrivateKey("gw-key", "privateKey")).Spec.WireGuard.PrivateKeySecretRef
	if key.Name != ref.Name || string(key.Data[ref.Key]) != "private" {
		t.Errorf("WireGuardKeySecret %+v is not the Secret %+v names", key, ref)
	}
}

// Switching a peer's protocol keeps its subnets and drops the other protocol's settings;
// RemoteSubnets sets the subnets of whichever protocol the peer has.
func TestPeerProtocols(t *testing.T) {
	key := gen.WireGuardKey("branch")
	wg := gen.VPNPeer("ns", "branch", gen.RemoteSubnets("10.30.0.0/16"), gen.WireGuardPeer(key), gen.PersistentKeepalive(25))
	want := &vpnv1.WireGuardPeer{PublicKey: key, Subnets: []string{"10.30.0.0/16"}, PersistentKeepalive: ptr(int32(25))}
	if wg.Spec.IPsec != nil || !reflect.DeepEqual(wg.Spec.WireGuard, want) {
		t.Errorf("WireGuard peer: ipsec %+v, wireguard %+v, want %+v", wg.Spec.IPsec, wg.Spec.WireGuard, want)
	}
	wg = gen.VPNPeerFrom(wg, gen.RemoteSubnets("10.40.0.0/16", "10.41.0.0/16"))
	if got := wg.Spec.WireGuard.Subnets; !reflect.DeepEqual(got, []string{"10.40.0.0/16", "10.41.0.0/16"}) {
		t.Errorf("RemoteSubnets on a WireGuard peer: %v", got)
	}

	back := gen.VPNPeerFrom(wg, gen.RemoteID("branch.example.net"))
	wantIPsec := &vpnv1.IPsecPeer{
		Peer:          vpnv1.IPsecRemote{Address: "203.0.113.9", ID: "branch.example.net"},
		RemoteSubnets: []string{"10.40.0.0/16", "10.41.0.0/16"},
		PSKSecretRef:  vpnv1.SecretKeyRef{Name: "branch-psk", Key: "psk"},
	}
	if back.Spec.WireGuard != nil || !reflect.DeepEqual(back.Spec.IPsec, wantIPsec) {
		t.Errorf("back to IPsec: wireguard %+v, ipsec %+v, want %+v", back.Spec.WireGuard, back.Spec.IPsec, wantIPsec)
	}
	if wg.Spec.WireGuard == nil || wg.Spec.IPsec != nil {
		t.Errorf("VPNPeerFrom changed the peer it copied: %+v", wg.Spec)
	}
}

// Grants and ReverseGrants fill one block; Grants() alone is a present, empty block (default
// deny), unlike no block at all.
func TestGrants(t *testing.T) {
	p := gen.VPNPeer("ns", "p", gen.Grants("web", "db"), gen.ReverseGrants("erp"))
	if want := (&vpnv1.Authorization{Exposures: []string{"web", "db"}, ReverseExposures: []string{"erp"}}); !reflect.DeepEqual(p.Spec.Authorization, want) {
		t.Errorf("authorization %+v, want %+v", p.Spec.Authorization, want)
	}
	if a := gen.VPNPeer("ns", "p", gen.Grants()).Spec.Authorization; a == nil || a.Exposures != nil || a.ReverseExposures != nil {
		t.Errorf("Grants(): %+v, want an empty block", a)
	}
	if a := gen.VPNPeer("ns", "p", gen.Grants("web"), gen.Authorization(nil)).Spec.Authorization; a != nil {
		t.Errorf("Authorization(nil): %+v, want no block", a)
	}
}

// The gateway's modifiers: one endpoint kind at a time, exposures in the order given, and a
// protocol's settings with that protocol.
func TestGateway(t *testing.T) {
	gw := gen.VPNGateway("ns", "gw",
		gen.HostNetwork("node-1", "198.51.100.10"),
		gen.Exposure("api", "192.0.2.10", gen.Port(443)),
		gen.ServiceExposure("metrics", "metrics", vpnv1.PortSpec{Port: 9090, Protocol: vpnv1.PortProtocolUDP, TargetPort: 19090}),
		gen.ReverseExposure("erp", "10.20.0.5", gen.Port(1433)),
		gen.WireGuardListenPort(51820), gen.WireGuardPrivateKey("gw-key", "privateKey"),
		gen.UID("gw-uid"), gen.Generation(3))
	want := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", UID: "gw-uid", Generation: 3},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolWireGuard,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1", Address: "198.51.100.10"}},
			Exposures: []vpnv1.Exposure{
				{Name: "api", Target: vpnv1.ExposureTarget{Address: "192.0.2.10", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 443})}},
				{Name: "metrics", Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "metrics"},
					Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 9090, Protocol: vpnv1.PortProtocolUDP, TargetPort: 19090})}},
			},
			ReverseExposures: []vpnv1.ReverseExposure{
				{Name: "erp", Target: vpnv1.ReverseExposureTarget{Address: "10.20.0.5", Ports: vpnv1.Ports(vpnv1.PortSpec{Port: 1433})}},
			},
			WireGuard: &vpnv1.WireGuardGatewaySettings{ListenPort: 51820, PrivateKeySecretRef: &vpnv1.SecretKeyRef{Name: "gw-key", Key: "privateKey"}},
		},
	}
	if !reflect.DeepEqual(gw, want) {
		t.Errorf("gateway:\n got %+v\nwant %+v", gw, want)
	}

	ipsec := gen.VPNGatewayFrom(gw, gen.Protocol(vpnv1.ProtocolIPsec), gen.GatewayFunc(func(g *vpnv1.VPNGateway) { g.Spec.WireGuard = nil }),
		gen.DPDDelay(time.Second), gen.LoadBalancer(vpnv1.LoadBalancerEndpoint{LoadBalancerClass: "lb"}))
	if ipsec.Spec.IPsec == nil || ipsec.Spec.IPsec.IKE.DPD.Delay.Duration != time.Second || ipsec.Spec.Endpoint.HostNetwork != nil ||
		ipsec.Spec.Endpoint.LoadBalancer.LoadBalancerClass != "lb" || ipsec.Spec.Protocol != vpnv1.ProtocolIPsec {
		t.Errorf("IPsec gateway with a load balancer: %+v", ipsec.Spec)
	}
	if gw.Spec.WireGuard == nil || gw.Spec.IPsec != nil {
		t.Errorf("VPNGatewayFrom changed the gateway it copied: %+v", gw.Spec)
	}
}

// WireGuardKey gives keys the CRD's pattern accepts, distinct per seed.
func TestWireGuardKey(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$`) // spec.wireguard.publicKey
	seen := map[string]string{}
	for _, seed := range []string{"", "a", "b", "branch", "p00001"} {
		k := gen.WireGuardKey(seed)
		if !pattern.MatchString(k) {
			t.Errorf("WireGuardKey(%q) = %q: not a key the CRD accepts", seed, k)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("seeds %q and %q give the same key", other, seed)
		}
		seen[k] = seed
		if gen.WireGuardKey(seed) != k {
			t.Errorf("WireGuardKey(%q) differs between calls", seed)
		}
	}
}

// A modifier used for two objects gives each its own values.
func TestModifiersShareNothing(t *testing.T) {
	keepalive := gen.PersistentKeepalive(25)
	a := gen.VPNPeer("ns", "a", gen.WireGuardPeer(gen.WireGuardKey("a")), keepalive)
	b := gen.VPNPeer("ns", "b", gen.WireGuardPeer(gen.WireGuardKey("b")), keepalive)
	*a.Spec.WireGuard.PersistentKeepalive = 1
	if *b.Spec.WireGuard.PersistentKeepalive != 25 {
		t.Errorf("two peers share their keepalive")
	}
	data := gen.SecretData("psk", "x")
	s1, s2 := gen.Secret("ns", "s1", data), gen.Secret("ns", "s2", data)
	s1.Data["psk"] = []byte("changed")
	if string(s2.Data["psk"]) != "x" {
		t.Errorf("two Secrets share their data")
	}
	if got := gen.Secret("ns", "s", gen.SecretFunc(func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque })).Type; got != corev1.SecretTypeOpaque {
		t.Errorf("SecretFunc: type %q", got)
	}
}

func ptr[T any](v T) *T { return &v }
