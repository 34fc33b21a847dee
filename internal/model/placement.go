package model

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Placement is what a gateway's agent knows of itself without reading the model: which
// gateway it serves, whether its pod runs in the node's network namespace, on which node, and
// the service CIDR it was started for. The operator renders these into the pod's spec (the
// agent's flags and the downward API), which a tenant cannot change; the model comes from a
// ConfigMap, which someone with edit rights in the namespace could. A model that disagrees
// with the placement would make the agent act on the node (or on another gateway's device,
// routes and addresses) as it never should, so it is refused as a whole.
type Placement struct {
	// Namespace, Name and Kind of the gateway ("" Kind: a VPNGateway).
	Namespace, Name, Kind string
	// HostNetwork: the pod runs in the node's network namespace.
	HostNetwork bool
	// NodeName is the node the pod runs on; empty when unknown (checked only when set).
	NodeName string
	// ServiceCIDR the pod was started for; invalid when unknown (checked only when valid).
	ServiceCIDR netip.Prefix
	// VIP is the address a host-network gateway with a standby moves to the active pod's
	// node (the agent adds it to the node's interface); invalid for every other gateway. The
	// model's must be the same: the agent never puts an address on a node that the pod's
	// spec does not name.
	VIP netip.Addr
}

// Check reports every way g disagrees with the placement, joined; nil when it agrees.
func (p Placement) Check(g *Gateway) error {
	if g == nil {
		return errors.New("no gateway")
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if g.Namespace != p.Namespace || g.Name != p.Name || g.Kind != p.Kind {
		bad("the model is of gateway %s/%s (kind %q), this agent serves %s/%s (kind %q)", g.Namespace, g.Name, g.Kind, p.Namespace, p.Name, p.Kind)
	}
	modelHost := g.Endpoint.Kind == EndpointHostNetwork
	switch {
	case p.HostNetwork && !modelHost:
		bad("the model's endpoint is %q, but this pod runs in the node's network namespace (hostNetwork)", g.Endpoint.Kind)
	case !p.HostNetwork && modelHost:
		bad("the model's endpoint is %q, but this pod runs in its own network namespace", g.Endpoint.Kind)
	}
	moving := modelHost && len(g.Endpoint.NodeNames) > 0
	switch {
	case moving && p.NodeName != "" && !slices.Contains(g.Endpoint.NodeNames, p.NodeName):
		bad("the model's endpoint is on nodes %q, but this pod runs on node %q", g.Endpoint.NodeNames, p.NodeName)
	case modelHost && !moving && p.NodeName != "" && g.Endpoint.NodeName != p.NodeName:
		bad("the model's endpoint is on node %q, but this pod runs on node %q", g.Endpoint.NodeName, p.NodeName)
	}
	switch {
	case moving && g.Endpoint.HostAddress != p.VIP:
		bad("the model's VIP is %s, but this pod was started for VIP %s", addrOrNone(g.Endpoint.HostAddress), addrOrNone(p.VIP))
	case !moving && p.VIP.IsValid():
		bad("this pod was started for VIP %s, but the model's endpoint has none", p.VIP)
	}
	if p.ServiceCIDR.IsValid() && g.ServiceCIDR != p.ServiceCIDR {
		bad("the model's service CIDR is %s, but this pod was started for %s", g.ServiceCIDR, p.ServiceCIDR)
	}
	if len(errs) > 0 {
		return fmt.Errorf("the model disagrees with where this agent runs: %w", errors.Join(errs...))
	}
	return nil
}

func addrOrNone(a netip.Addr) string {
	if !a.IsValid() {
		return "none"
	}
	return a.String()
}
