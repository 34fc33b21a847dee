package main

import (
	"fmt"
	"net/netip"

	"github.com/spf13/pflag"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// placementFlags are what the operator tells the agent of its pod in the pod's spec (flags
// and the downward API), never through the model: the model is checked against them
// (model.Placement).
type placementFlags struct {
	hostNetwork bool
	nodeName    string
	serviceCIDR string
	vip         string
}

const flagHostNetwork = "host-network"

func (p *placementFlags) bind(f *pflag.FlagSet) {
	f.BoolVar(&p.hostNetwork, flagHostNetwork, false, "the pod runs in the node's network namespace; when given (true or false), a model that says otherwise, or names another gateway, node or service CIDR, is refused")
	f.StringVar(&p.nodeName, "node-name", "", "the node the pod runs on (downward API spec.nodeName), checked against a host-network model's node")
	f.StringVar(&p.serviceCIDR, "service-cidr", "", "the service CIDR the pod was started for, checked against the model's")
	f.StringVar(&p.vip, "vip", "", "a host-network gateway with a standby: the VIP the active pod's agent holds on its node (checked against the model's); with --standby-lease it is added and announced on becoming active, removed on becoming standby")
}

// vipAddr is --vip parsed (invalid when not given).
func (p *placementFlags) vipAddr() (netip.Addr, error) {
	if p.vip == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(p.vip)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("--vip %q: not an IPv4 address", p.vip)
	}
	return a, nil
}

// placement is the model.Placement of the flags, or nil when --host-network was not given
// (the agent run by hand or by tests, on a model it trusts).
func (p *placementFlags) placement(f *pflag.FlagSet, namespace, gateway, kind string) (*model.Placement, error) {
	if !f.Changed(flagHostNetwork) {
		return nil, nil
	}
	if namespace == "" || gateway == "" {
		return nil, fmt.Errorf("--%s needs --gateway and --namespace", flagHostNetwork)
	}
	out := &model.Placement{Namespace: namespace, Name: gateway, Kind: kind, HostNetwork: p.hostNetwork, NodeName: p.nodeName}
	if p.serviceCIDR != "" {
		sc, err := netip.ParsePrefix(p.serviceCIDR)
		if err != nil {
			return nil, fmt.Errorf("--service-cidr: %w", err)
		}
		out.ServiceCIDR = sc
	}
	vip, err := p.vipAddr()
	if err != nil {
		return nil, err
	}
	if vip.IsValid() && !p.hostNetwork {
		return nil, fmt.Errorf("--vip needs --%s", flagHostNetwork)
	}
	out.VIP = vip
	return out, nil
}
