package lablb

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// endpoint is an EndpointSlice endpoint: ready, serving-only (terminating) or neither.
type endpoint struct {
	addr           string
	ready, serving bool
	terminating    bool
}

func service(name string, ports ...corev1.ServicePort) ServiceEndpoints {
	return ServiceEndpoints{Service: &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: ports},
	}}
}

func withSlice(se ServiceEndpoints, portName string, proto corev1.Protocol, port int32, eps ...endpoint) ServiceEndpoints {
	s := discoveryv1.EndpointSlice{
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Protocol: ptr.To(proto), Port: ptr.To(port)}},
	}
	for _, e := range eps {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(e.ready), Serving: ptr.To(e.serving), Terminating: ptr.To(e.terminating || !e.ready && e.serving)},
		})
	}
	se.Slices = append(se.Slices, s)
	return se
}

var wgPort = corev1.ServicePort{Name: "wireguard", Protocol: corev1.ProtocolUDP, Port: 51820}

func target(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestPlan(t *testing.T) {
	fe := Frontend{Protocol: corev1.ProtocolUDP, Port: 51820}
	gw := types.NamespacedName{Namespace: "ns", Name: "gw"}
	prev := map[Frontend]Rule{fe: {Frontend: fe, Service: gw, Target: target("100.96.0.4:51820")}}
	for _, tc := range []struct {
		name     string
		services []ServiceEndpoints
		previous map[Frontend]Rule
		want     string // the target, "" for no rule
		problems int
	}{
		{"a ready endpoint", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.1.5", true, true, false})}, nil, "100.96.1.5:51820", 0},
		{"the endpoints' own port number", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 4500, endpoint{"100.96.1.5", true, true, false})}, nil, "100.96.1.5:4500", 0},
		{"a port of another name is not the Service port's", []ServiceEndpoints{withSlice(service("gw", wgPort), "other", corev1.ProtocolUDP, 51820, endpoint{"100.96.1.5", true, true, false})}, nil, "", 0},
		{"ready before terminating", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.0.4", false, true, false}, endpoint{"100.96.1.5", true, true, false})}, prev, "100.96.1.5:51820", 0},
		{"a terminating endpoint the Service still calls ready (publishNotReadyAddresses) gives way", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.0.4", true, true, true}, endpoint{"100.96.1.5", true, true, false})}, prev, "100.96.1.5:51820", 0},
		{"a terminating one while none is ready", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.0.4", false, true, false})}, nil, "100.96.0.4:51820", 0},
		{"the current target kept among ready ones", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.0.2", true, true, false}, endpoint{"100.96.0.4", true, true, false})}, prev, "100.96.0.4:51820", 0},
		{"otherwise the lowest address", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.2.9", true, true, false}, endpoint{"100.96.0.9", true, true, false})}, nil, "100.96.0.9:51820", 0},
		{"no endpoint ready: the last target stays", []ServiceEndpoints{withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.0.4", false, false, false})}, prev, "100.96.0.4:51820", 0},
		{"no endpoint and no previous: no rule", []ServiceEndpoints{service("gw", wgPort)}, nil, "", 0},
		{"the Service gone: its rule goes", nil, prev, "", 0},
		{"a previous rule of another Service is not kept", []ServiceEndpoints{service("other", wgPort)}, prev, "", 0},
		{"a frontend claimed twice: the first Service by name keeps it", []ServiceEndpoints{
			withSlice(service("zz", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.0.7", true, true, false}),
			withSlice(service("gw", wgPort), "wireguard", corev1.ProtocolUDP, 51820, endpoint{"100.96.1.5", true, true, false}),
		}, nil, "100.96.1.5:51820", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules, problems := Plan(tc.services, tc.previous)
			got := ""
			if r, ok := rules[fe]; ok {
				got = r.Target.String()
			}
			if got != tc.want || len(problems) != tc.problems {
				t.Fatalf("target %q, problems %q; want %q and %d problems", got, problems, tc.want, tc.problems)
			}
		})
	}
}

func TestRulesetAndChanged(t *testing.T) {
	udp := Frontend{Protocol: corev1.ProtocolUDP, Port: 51820}
	tcp := Frontend{Protocol: corev1.ProtocolTCP, Port: 443}
	svc := types.NamespacedName{Namespace: "ns", Name: "gw"}
	before := map[Frontend]Rule{udp: {udp, svc, target("100.96.0.4:51820")}, tcp: {tcp, svc, target("100.96.0.4:8443")}}
	after := map[Frontend]Rule{udp: {udp, svc, target("100.96.1.5:51820")}}
	if got, want := Changed(before, after), []Frontend{tcp, udp}; !reflect.DeepEqual(got, want) {
		t.Errorf("changed %v, want %v", got, want)
	}
	if got := Changed(after, after); len(got) != 0 {
		t.Errorf("changed %v between equal plans", got)
	}
	rs := Ruleset(netip.MustParseAddr("192.0.2.2"), before)
	for _, want := range []string{
		"table ip bnerd-lab-lb\ndelete table ip bnerd-lab-lb\n",
		"chain prerouting {\n\t\ttype nat hook prerouting priority -110; policy accept;\n\t\tip daddr 192.0.2.2 tcp dport 443 dnat to 100.96.0.4:8443 comment \"ns/gw\"\n\t\tip daddr 192.0.2.2 udp dport 51820 dnat to 100.96.0.4:51820 comment \"ns/gw\"\n\t}",
		"chain output {\n\t\ttype nat hook output priority -110;",
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("ruleset lacks %q:\n%s", want, rs)
		}
	}
}

// The ruleset, loaded by the real nft in a network namespace playing the machine, forwards the
// address's port to the target in another namespace with the client's source address kept, and
// to the new target once the plan changes.
func TestRulesetForwards(t *testing.T) {
	netns.Skip(t, "nft", "socat")
	run := netns.NewRun(t, "lablb")
	lb, client, pod1, pod2 := run.NS("lb"), run.NS("cl"), run.NS("p1"), run.NS("p2")
	netns.VethAddr(client, "eth0", "198.51.100.2/30", lb, "site0", "198.51.100.1/30")
	client.MustRun("ip", "route", "add", "default", "via", "198.51.100.1")
	lb.MustRun("ip", "link", "add", "br0", "type", "bridge")
	lb.MustRun("ip", "addr", "add", "100.96.1.1/24", "dev", "br0")
	lb.MustRun("ip", "link", "set", "br0", "up")
	for i, pod := range []*netns.NS{pod1, pod2} {
		port := fmt.Sprintf("pod%d", i+1)
		netns.VethAddr(lb, port, "", pod, "eth0", fmt.Sprintf("100.96.1.%d/24", 5+i))
		lb.MustRun("ip", "link", "set", port, "master", "br0")
		pod.MustRun("ip", "route", "add", "default", "via", "100.96.1.1")
		pod.Start("socat", "TCP-LISTEN:8080,reuseaddr,fork", fmt.Sprintf("SYSTEM:echo %s \\$SOCAT_PEERADDR", port))
	}
	lb.Sysctl("net.ipv4.ip_forward", "1")
	lb.AddLoopback("192.0.2.2/32")
	address := netip.MustParseAddr("192.0.2.2")
	fe := Frontend{Protocol: corev1.ProtocolTCP, Port: 443}
	svc := types.NamespacedName{Namespace: "ns", Name: "gw"}
	for _, want := range []struct{ target, answer string }{{"100.96.1.5:8080", "pod1 198.51.100.2"}, {"100.96.1.6:8080", "pod2 198.51.100.2"}} {
		rules := map[Frontend]Rule{fe: {fe, svc, target(want.target)}}
		if out, err := lb.RunInput(Ruleset(address, rules), "nft", "-f", "-"); err != nil {
			t.Fatalf("nft -f: %v %s", err, out)
		}
		err := netns.Eventually(10*time.Second, func() error {
			out, err := client.Run("socat", "-T", "2", "-", "TCP:192.0.2.2:443,connect-timeout=1")
			if err != nil || strings.TrimSpace(out) != want.answer {
				return fmt.Errorf("answer %q (%v), want %q", strings.TrimSpace(out), err, want.answer)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("192.0.2.2:443 -> %s: %v", want.target, err)
		}
	}
}
