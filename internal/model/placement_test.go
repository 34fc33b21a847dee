package model

import (
	"net/netip"
	"strings"
	"testing"
)

// A model is checked against what the agent knows of its own pod: every field that decides
// where it acts (the node's namespace or its own, whose device and addresses) must agree.
func TestPlacementCheck(t *testing.T) {
	sc := netip.MustParsePrefix("100.64.3.0/24")
	host := func() *Gateway {
		return &Gateway{Namespace: "acme", Name: "gw", ServiceCIDR: sc,
			Endpoint: Endpoint{Kind: EndpointHostNetwork, NodeName: "node-1"}}
	}
	onNode := Placement{Namespace: "acme", Name: "gw", HostNetwork: true, NodeName: "node-1", ServiceCIDR: sc}
	inPod := Placement{Namespace: "acme", Name: "gw", ServiceCIDR: sc}
	vip := netip.MustParseAddr("198.51.100.10")
	moving := func(g *Gateway) {
		g.Endpoint = Endpoint{Kind: EndpointHostNetwork, NodeNames: []string{"node-1", "node-2"}, HostAddress: vip}
	}
	cases := []struct {
		name string
		p    Placement
		mut  func(*Gateway)
		want string // "" accepted; else a fragment of the error
	}{
		{"host-network model on the node", onNode, nil, ""},
		{"pod model in a pod", inPod, func(g *Gateway) { g.Endpoint = Endpoint{Kind: EndpointLoadBalancer} }, ""},
		{"unknown node and service CIDR are not checked", Placement{Namespace: "acme", Name: "gw", HostNetwork: true}, nil, ""},
		{"pod endpoint on the node's network", onNode, func(g *Gateway) { g.Endpoint = Endpoint{Kind: EndpointLoadBalancer} }, `endpoint is "loadBalancer", but this pod runs in the node's network namespace`},
		{"host endpoint in a pod", inPod, nil, "runs in its own network namespace"},
		{"another node", onNode, func(g *Gateway) { g.Endpoint.NodeName = "node-2" }, `on node "node-2", but this pod runs on node "node-1"`},
		{"another gateway", onNode, func(g *Gateway) { g.Name = "victim" }, "the model is of gateway acme/victim"},
		{"another namespace", onNode, func(g *Gateway) { g.Namespace = "other" }, "the model is of gateway other/gw"},
		{"another kind", onNode, func(g *Gateway) { g.Kind = KindIPsecGateway }, `kind "IPsecGateway"`},
		{"a node of a standby's nodes, the VIP given", Placement{Namespace: "acme", Name: "gw", HostNetwork: true, NodeName: "node-2", ServiceCIDR: sc, VIP: vip}, moving, ""},
		{"a node not among a standby's nodes", Placement{Namespace: "acme", Name: "gw", HostNetwork: true, NodeName: "node-3", ServiceCIDR: sc, VIP: vip}, moving, `on nodes ["node-1" "node-2"], but this pod runs on node "node-3"`},
		{"another VIP", Placement{Namespace: "acme", Name: "gw", HostNetwork: true, NodeName: "node-1", VIP: netip.MustParseAddr("198.51.100.99")}, moving, "the model's VIP is 198.51.100.10, but this pod was started for VIP 198.51.100.99"},
		{"a VIP in the model the pod was not started for", onNode, moving, "this pod was started for VIP none"},
		{"a VIP the model does not have", Placement{Namespace: "acme", Name: "gw", HostNetwork: true, NodeName: "node-1", VIP: vip}, nil, "started for VIP 198.51.100.10, but the model's endpoint has none"},
		{"another service CIDR", onNode, func(g *Gateway) { g.ServiceCIDR = netip.MustParsePrefix("100.64.4.0/24") }, "service CIDR is 100.64.4.0/24, but this pod was started for 100.64.3.0/24"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := host()
			if c.mut != nil {
				c.mut(g)
			}
			err := c.p.Check(g)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q, want %q", err, c.want)
			}
		})
	}
}
