package controller

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// serviceTarget resolves an exposure's target Service for the model. A gateway in its own
// network namespace DNATs to the ClusterIP, and kube-proxy on the node takes it from there. A
// host-network gateway DNATs in the node's own namespace, where kube-proxy cannot translate a
// ClusterIP a second time (a packet is NATed once): it gets one ready endpoint instead — the
// lowest IPv4 address, so the choice is stable — with that endpoint's ports, and is re-rendered
// when the endpoints change. No ready endpoint leaves Address unset (the model says so).
func serviceTarget(svc *corev1.Service, slices []discoveryv1.EndpointSlice, toEndpoint bool) model.ServiceTarget {
	if !toEndpoint {
		addr, _ := netip.ParseAddr(svc.Spec.ClusterIP) // "None" or empty: the model reports it
		ports := map[model.ServicePort]uint16{}
		for _, p := range svc.Spec.Ports {
			if sp, ok := servicePort(p.Protocol, p.Port); ok {
				ports[sp] = sp.Port
			}
		}
		return model.ServiceTarget{Address: addr, Ports: ports}
	}

	out := model.ServiceTarget{Endpoint: true, Ports: map[model.ServicePort]uint16{}}
	var chosen *discoveryv1.EndpointSlice
	for i := range slices {
		es := &slices[i]
		if es.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				addr, err := netip.ParseAddr(a)
				if err != nil || !addr.Is4() {
					continue
				}
				if !out.Address.IsValid() || addr.Less(out.Address) {
					out.Address, chosen = addr, es
				}
			}
		}
	}
	if chosen == nil {
		return out
	}
	// The Service's ports by name and protocol → the chosen slice's port of that name.
	for _, sp := range svc.Spec.Ports {
		key, ok := servicePort(sp.Protocol, sp.Port)
		if !ok {
			continue
		}
		for _, ep := range chosen.Ports {
			proto := corev1.ProtocolTCP
			if ep.Protocol != nil {
				proto = *ep.Protocol
			}
			name := ""
			if ep.Name != nil {
				name = *ep.Name
			}
			if name == sp.Name && proto == sp.Protocol && ep.Port != nil && *ep.Port > 0 && *ep.Port <= 65535 {
				out.Ports[key] = uint16(*ep.Port)
			}
		}
	}
	return out
}

// servicePort is a Service port in the model's terms; SCTP is not one.
func servicePort(protocol corev1.Protocol, port int32) (model.ServicePort, bool) {
	proto := strings.ToLower(string(protocol))
	if proto == "" {
		proto = "tcp"
	}
	if (proto != "tcp" && proto != "udp") || port < 1 || port > 65535 {
		return model.ServicePort{}, false
	}
	return model.ServicePort{Protocol: proto, Port: uint16(port)}, true
}
