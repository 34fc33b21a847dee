// Package lablb is the lab's load balancer for Services of one load balancer class, as a cloud's
// network load balancer with IP targets does it (an AWS NLB with "ip" targets, a GKE
// container-native load balancer): it writes the lab's address into the Service's status with
// ipMode Proxy, so kube-proxy leaves the address alone, and forwards the address's Service ports
// straight to a ready endpoint of the Service — wherever in the pod network it runs — keeping
// the client's source address. When the endpoint changes (a pod replaced, moved to another
// node), the address's connection tracking for that port is flushed so that every flow, UDP
// included, follows at once; while no endpoint is ready (a frozen node's pod marked NotReady,
// the API server unreachable) the last target stays, as a load balancer without news keeps its
// member.
//
// Plan (this file) is pure: from the Services and their EndpointSlices to the forwarding rules
// and the nftables ruleset. The Controller (controller.go) applies them on the machine.
package lablb

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TableName is the load balancer's nftables table (family ip) on the machine.
const TableName = "bnerd-lab-lb"

// Frontend is one forwarded port of the load balancer's address.
type Frontend struct {
	Protocol corev1.Protocol
	Port     int32
}

func (f Frontend) String() string {
	return fmt.Sprintf("%s/%d", strings.ToLower(string(f.Protocol)), f.Port)
}

// Rule forwards a frontend to one endpoint of a Service.
type Rule struct {
	Frontend
	Service types.NamespacedName
	Target  netip.AddrPort
}

// ServiceEndpoints is a Service of the class with its EndpointSlices.
type ServiceEndpoints struct {
	Service *corev1.Service
	Slices  []discoveryv1.EndpointSlice
}

// Plan computes the rules for the Services (sorted by namespace/name; a frontend another
// Service already claimed is skipped and reported). For each Service port it picks a ready
// endpoint that is not terminating, else a serving one, keeping the previous target while it stays in the
// best tier; with none, the previous rule stays.
func Plan(services []ServiceEndpoints, previous map[Frontend]Rule) (map[Frontend]Rule, []string) {
	sort.Slice(services, func(i, j int) bool {
		a, b := services[i].Service, services[j].Service
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	rules := map[Frontend]Rule{}
	var problems []string
	for _, se := range services {
		svc := types.NamespacedName{Namespace: se.Service.Namespace, Name: se.Service.Name}
		for _, sp := range se.Service.Spec.Ports {
			fe := Frontend{Protocol: sp.Protocol, Port: sp.Port}
			if fe.Protocol == "" {
				fe.Protocol = corev1.ProtocolTCP
			}
			if other, taken := rules[fe]; taken {
				problems = append(problems, fmt.Sprintf("%s: %s is %s's already", svc, fe, other.Service))
				continue
			}
			prev, had := previous[fe]
			if had && prev.Service != svc {
				had = false
			}
			if target, ok := choose(se.Slices, sp, prev.Target, had); ok {
				rules[fe] = Rule{Frontend: fe, Service: svc, Target: target}
			} else if had {
				rules[fe] = prev
			}
		}
	}
	return rules, problems
}

// choose picks the endpoint a Service port forwards to: the current one while it is in the best
// tier there is (ready and not terminating, else serving), otherwise the lowest address of that
// tier.
func choose(slices []discoveryv1.EndpointSlice, sp corev1.ServicePort, current netip.AddrPort, hasCurrent bool) (netip.AddrPort, bool) {
	var ready, serving []netip.AddrPort
	for _, s := range slices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		port, ok := slicePort(s, sp)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			addr, err := netip.ParseAddr(ep.Addresses[0])
			if err != nil {
				continue
			}
			ap := netip.AddrPortFrom(addr, uint16(port))
			// a terminating endpoint is never in the first tier: a Service that publishes
			// not-ready addresses (the gateways' do) keeps it "ready" until its pod is gone
			terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
			switch {
			case (ep.Conditions.Ready == nil || *ep.Conditions.Ready) && !terminating:
				ready = append(ready, ap)
			case ep.Conditions.Serving != nil && *ep.Conditions.Serving:
				serving = append(serving, ap)
			}
		}
	}
	for _, tier := range [][]netip.AddrPort{ready, serving} {
		if len(tier) == 0 {
			continue
		}
		sort.Slice(tier, func(i, j int) bool { return tier[i].Compare(tier[j]) < 0 })
		for _, ap := range tier {
			if hasCurrent && ap == current {
				return ap, true
			}
		}
		return tier[0], true
	}
	return netip.AddrPort{}, false
}

// slicePort is the endpoints' port number for a Service port (matched by name and protocol).
func slicePort(s discoveryv1.EndpointSlice, sp corev1.ServicePort) (int32, bool) {
	for _, p := range s.Ports {
		name, proto := "", corev1.ProtocolTCP
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		want := sp.Protocol
		if want == "" {
			want = corev1.ProtocolTCP
		}
		if name == sp.Name && proto == want && p.Port != nil {
			return *p.Port, true
		}
	}
	return 0, false
}

// Ruleset is the nftables table forwarding the address's frontends to their targets, for
// packets that arrive (prerouting) and those the machine sends itself (output); it replaces the
// table as a whole.
func Ruleset(address netip.Addr, rules map[Frontend]Rule) string {
	var fes []Frontend
	for fe := range rules {
		fes = append(fes, fe)
	}
	sort.Slice(fes, func(i, j int) bool {
		if fes[i].Protocol != fes[j].Protocol {
			return fes[i].Protocol < fes[j].Protocol
		}
		return fes[i].Port < fes[j].Port
	})
	var dnat strings.Builder
	for _, fe := range fes {
		r := rules[fe]
		fmt.Fprintf(&dnat, "\t\tip daddr %s %s dport %d dnat to %s comment \"%s\"\n", address, strings.ToLower(string(fe.Protocol)), fe.Port, r.Target, r.Service)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table ip %s\ndelete table ip %s\ntable ip %s {\n", TableName, TableName, TableName)
	for _, hook := range []string{"prerouting", "output"} {
		// -110: before kube-proxy's and anyone's dstnat (-100); numeric, as nft names dstnat
		// for the prerouting hook only
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype nat hook %s priority -110; policy accept;\n%s\t}\n", hook, hook, dnat.String())
	}
	b.WriteString("}\n")
	return b.String()
}

// Changed lists the frontends whose target differs between two plans (added, moved, removed).
func Changed(before, after map[Frontend]Rule) []Frontend {
	var out []Frontend
	for fe, r := range after {
		if b, ok := before[fe]; !ok || b.Target != r.Target {
			out = append(out, fe)
		}
	}
	for fe := range before {
		if _, ok := after[fe]; !ok {
			out = append(out, fe)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}
