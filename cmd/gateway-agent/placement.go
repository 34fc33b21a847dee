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
}

const flagHostNetwork = "host-network"

func (p *placementFlags) bind(f *pflag.FlagSet) {
	f.BoolVar(&p.hostNetwork, flagHostNetwork, false, "the pod runs in the node's network namespace; when given (true or false), a model that says otherwise, or names another gateway, node or service CIDR, is refused")
	f.StringVar(&p.nodeName, "node-name", "", "the node the pod runs on (downward API spec.nodeName), checked against a host-network model's node")
	f.StringVar(&p.serviceCIDR, "service-cidr", "", "the service CIDR the pod was started for, checked against the model's")
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
	return out, nil
}
