package hostnetwork_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/hostnetwork"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, func(e *testenv.Env) { env = e }))
}

var seq atomic.Int32

func namespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("hn%d", seq.Add(1))
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// node creates a Node with the given addresses ("ExternalIP=203.0.113.5", ...).
func node(t *testing.T, addrs ...string) string {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", seq.Add(1))}}
	if err := env.Client.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		typ, ip, _ := strings.Cut(a, "=")
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(typ), Address: ip})
	}
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	return n.Name
}

// gateway creates a host-network VPNGateway and returns its request.
func gateway(t *testing.T, ns, name, nodeName string, protocol vpnv1.Protocol, wgPort int32) cloud.Request {
	t.Helper()
	mods := []gen.GatewayMod{gen.Protocol(protocol), gen.HostNetwork(nodeName, "")}
	if protocol == vpnv1.ProtocolWireGuard && wgPort != 0 {
		mods = append(mods, gen.WireGuardListenPort(wgPort))
	}
	gw := gen.VPNGateway(ns, name, mods...)
	if err := env.Client.Create(context.Background(), gw); err != nil {
		t.Fatal(err)
	}
	if protocol == vpnv1.ProtocolWireGuard && wgPort == 0 {
		wgPort = 51820 // what the API server defaulted (when the block is set) and the model uses
	}
	return cloud.Request{
		Namespace: ns, Name: name, UID: gw.UID, Protocol: model.Protocol(protocol), WireGuardPort: uint16(wgPort),
		Endpoint: model.Endpoint{Kind: model.EndpointHostNetwork, NodeName: nodeName},
	}
}

func ensure(t *testing.T, p cloud.Provider, req cloud.Request) cloud.Result {
	t.Helper()
	res, err := p.Ensure(context.Background(), req)
	if err != nil {
		t.Fatalf("Ensure %s: %v", req, err)
	}
	return res
}

func TestAddress(t *testing.T) {
	ns := namespace(t)
	p := hostnetwork.New(env.Client, hostnetwork.Config{})
	both := node(t, "InternalIP=10.0.0.5", "ExternalIP=2001:db8::5", "ExternalIP=203.0.113.5", "Hostname=n1")
	internal := node(t, "InternalIP=10.0.0.6", "Hostname=n2")
	none := node(t, "Hostname=n3")

	cases := []struct {
		name, node string
		host       string
		want       string
		reason     string
	}{
		{"external", both, "", "203.0.113.5", cloud.ReasonReady},
		{"internal", internal, "", "10.0.0.6", cloud.ReasonReady},
		{"configured", none, "198.51.100.9", "198.51.100.9", cloud.ReasonReady},
		{"noaddress", none, "", "", cloud.ReasonNotFound},
		{"nonode", "no-such-node", "", "", cloud.ReasonNotFound},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Each gateway on its own node (noaddress fails on its address before any conflict).
			req := gateway(t, ns, c.name, c.node, vpnv1.ProtocolWireGuard, int32(51000+i))
			if c.host != "" {
				req.Endpoint.HostAddress = netip.MustParseAddr(c.host)
			}
			res := ensure(t, p, req)
			if res.Reason != c.reason || res.PublicAddress != c.want {
				t.Fatalf("got %+v, want %s %q", res, c.reason, c.want)
			}
			if c.reason == cloud.ReasonReady {
				if !res.Ready || !res.Pod.HostNetwork || res.Pod.NodeName != c.node || res.Pod.NetworkAttachment != nil {
					t.Errorf("result %+v", res)
				}
			} else if !res.Terminal || res.RetryAfter == 0 || res.Ready || !strings.Contains(res.Message, c.node) {
				t.Errorf("result %+v: want terminal, re-checked, naming the node", res)
			}
		})
	}
}

// A node holds one host-network gateway, whatever the protocols and ports: the older keeps it.
func TestOneGatewayPerNode(t *testing.T) {
	p := hostnetwork.New(env.Client, hostnetwork.Config{})
	nsA, nsB := namespace(t), namespace(t)
	n1 := node(t, "ExternalIP=203.0.113.11")
	n2 := node(t, "ExternalIP=203.0.113.12")
	n3 := node(t, "ExternalIP=203.0.113.13")

	// Created first, but sorting after the younger by name: age decides, not name.
	older := gateway(t, nsB, "zz-older", n1, vpnv1.ProtocolIPsec, 0)
	time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
	younger := gateway(t, nsA, "aa-younger", n1, vpnv1.ProtocolIPsec, 0)
	otherNode := gateway(t, nsA, "elsewhere", n2, vpnv1.ProtocolIPsec, 0)
	wgBesideIPsec := gateway(t, nsB, "wg-beside-ipsec", n1, vpnv1.ProtocolWireGuard, 51821)
	time.Sleep(1100 * time.Millisecond)
	wgA := gateway(t, nsA, "wg-a", n3, vpnv1.ProtocolWireGuard, 51820)
	time.Sleep(1100 * time.Millisecond)
	wgB := gateway(t, nsB, "wg-b", n3, vpnv1.ProtocolWireGuard, 51821)

	if res := ensure(t, p, older); res.Reason != cloud.ReasonReady {
		t.Errorf("older IPsec gateway: %+v", res)
	}
	res := ensure(t, p, younger)
	if res.Reason != cloud.ReasonConflict || !res.Terminal || res.Ready || res.RetryAfter == 0 ||
		!strings.Contains(res.Message, nsB+"/zz-older") || !strings.Contains(res.Message, "UDP/500, UDP/4500") {
		t.Errorf("younger IPsec gateway on the same node: %+v", res)
	}
	if res := ensure(t, p, otherNode); res.Reason != cloud.ReasonReady {
		t.Errorf("IPsec gateway on another node: %+v", res)
	}
	// Different protocol and ports, same node: the firewall table would be shared.
	if res := ensure(t, p, wgBesideIPsec); res.Reason != cloud.ReasonConflict || !strings.Contains(res.Message, nsB+"/zz-older") {
		t.Errorf("WireGuard gateway beside an IPsec gateway: %+v", res)
	}
	// WireGuard on different listen ports, same node: the older keeps it.
	if res := ensure(t, p, wgA); res.Reason != cloud.ReasonReady {
		t.Errorf("wg-a: %+v", res)
	}
	if res := ensure(t, p, wgB); res.Reason != cloud.ReasonConflict || !strings.Contains(res.Message, nsA+"/wg-a") || !strings.Contains(res.Message, "UDP/51820") {
		t.Errorf("wg-b beside wg-a: %+v", res)
	}

	// The older gateway goes: the younger gets the node.
	if err := env.Client.Delete(context.Background(), &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "zz-older"}}); err != nil {
		t.Fatal(err)
	}
	if res := ensure(t, p, younger); res.Reason != cloud.ReasonReady {
		t.Errorf("after the older gateway went: %+v", res)
	}
	if res := ensure(t, p, wgBesideIPsec); res.Reason != cloud.ReasonConflict || !strings.Contains(res.Message, nsA+"/aa-younger") {
		t.Errorf("WireGuard gateway beside the remaining IPsec gateway: %+v", res)
	}
	if err := p.Delete(context.Background(), younger); err != nil {
		t.Fatal(err)
	}
}

// A gateway whose namespace may not run host-network gateways holds no node: an older one of a
// tenant without the right does not block the node for a gateway that may run there.
func TestNodeHeldOnlyByPermittedGateways(t *testing.T) {
	nsAllowed, nsDenied := namespace(t), namespace(t)
	p := hostnetwork.New(env.Client, hostnetwork.Config{NamespacePermitted: func(_ context.Context, ns string) (bool, error) {
		return ns == nsAllowed, nil
	}})
	n := node(t, "ExternalIP=203.0.113.21")
	gateway(t, nsDenied, "squatter", n, vpnv1.ProtocolIPsec, 0)
	time.Sleep(1100 * time.Millisecond) // creation timestamps have one-second resolution
	allowed := gateway(t, nsAllowed, "allowed", n, vpnv1.ProtocolIPsec, 0)
	if res := ensure(t, p, allowed); res.Reason != cloud.ReasonReady {
		t.Errorf("a permitted gateway beside an older gateway that may not run: %+v", res)
	}
	// Without the permission check the older one holds the node (the check above can fail).
	if res := ensure(t, hostnetwork.New(env.Client, hostnetwork.Config{}), allowed); res.Reason != cloud.ReasonConflict || !strings.Contains(res.Message, nsDenied+"/squatter") {
		t.Errorf("without NamespacePermitted: %+v, want the squatter to hold the node", res)
	}
}
