// Package labcloud is the lab's OpenStack: the in-repo Neutron/Keystone (neutronfake) served
// over HTTP by cmd/lab-cloud, and the cloud's L3 agent, which programs a "cloud router"
// network namespace between the client sites and the provider network from Neutron's state —
// 1:1 NAT between each floating IP and its port's fixed IP, and each port's security-group
// rules as real nft filters — re-programmed whenever that state changes. It is lab and test
// tooling: neither the operator nor the agent links it.
package labcloud

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// Table is the router namespace's nft table (family ip).
const Table = "bnerd_lab_cloud"

// Links names the router's two sides.
type Links struct {
	// Client faces the client sites (and the floating IPs' network); Provider faces the
	// provider network the ports' fixed IPs live on.
	Client, Provider string
}

// Snapshot is the part of Neutron's state the router is programmed from.
type Snapshot struct {
	Ports       []neutronfake.Port
	FloatingIPs []neutronfake.FloatingIP
	Groups      []neutronfake.SecurityGroup // with their Rules
}

// SnapshotOf reads the state from the cloud.
func SnapshotOf(c *neutronfake.Server) Snapshot {
	return Snapshot{Ports: c.PortList(), FloatingIPs: c.FloatingIPList(), Groups: c.SecurityGroupList()}
}

// protocols numbers the protocol names Neutron accepts (nft in a bare namespace may lack
// /etc/protocols names; numbers always work).
var protocols = map[string]int{"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51, "ipv6-icmp": 58, "sctp": 132}

// Ruleset renders the router's nft table, replacing whatever the table held (one
// transaction): DNAT of each associated floating IP to its port's fixed IP arriving from the
// client side, SNAT of the fixed IP back to it leaving there, and a stateful filter on what
// the router forwards — to a port only what an ingress rule of one of its security groups
// admits, from a port only what an egress rule admits, replies to admitted flows, nothing
// else (a port without a floating IP is not reachable from the client side at all).
func Ruleset(s Snapshot, l Links) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("table ip %s", Table)
	w("delete table ip %s", Table)
	w("table ip %s {", Table)

	type nat struct{ fip, fixed netip.Addr }
	var nats []nat
	for _, f := range s.FloatingIPs {
		if f.PortID == nil || f.FixedIPAddress == nil {
			continue
		}
		fip, err1 := netip.ParseAddr(f.FloatingIPAddress)
		fixed, err2 := netip.ParseAddr(*f.FixedIPAddress)
		if err1 != nil || err2 != nil || !fip.Is4() || !fixed.Is4() {
			continue
		}
		nats = append(nats, nat{fip, fixed})
	}
	slices.SortFunc(nats, func(a, b nat) int { return a.fip.Compare(b.fip) })

	w("  chain prerouting {")
	w("    type nat hook prerouting priority dstnat; policy accept;")
	for _, n := range nats {
		w("    iifname %q ip daddr %s counter dnat to %s", l.Client, n.fip, n.fixed)
	}
	w("  }")
	w("  chain postrouting {")
	w("    type nat hook postrouting priority srcnat; policy accept;")
	for _, n := range nats {
		w("    oifname %q ip saddr %s counter snat to %s", l.Client, n.fixed, n.fip)
	}
	w("  }")

	groups := map[string]neutronfake.SecurityGroup{}
	members := map[string][]netip.Addr{} // group -> its ports' IPv4 fixed IPs
	for _, g := range s.Groups {
		groups[g.ID] = g
	}
	for _, p := range s.Ports {
		for _, ip := range fixedIPv4(p) {
			for _, g := range p.SecurityGroups {
				members[g] = append(members[g], ip)
			}
		}
	}

	// Which port's groups filter an address, as ML2 decides it: the bound port carrying it —
	// a fixed IP or an allowed address pair of a port with a device (a VM's NIC, a trunk's
	// subport) — before an unbound port's own fixed IP (a port nothing carries, as the
	// gateway's is with the address-pairs binding: its traffic passes the node's NIC).
	var bound, unbound, chains []string
	for i, p := range s.Ports {
		ips := fixedIPv4(p)
		if len(ips) == 0 {
			continue
		}
		in, out := "in_"+strconv.Itoa(i), "out_"+strconv.Itoa(i)
		var inRules, outRules []string
		for _, gid := range p.SecurityGroups {
			for _, r := range groups[gid].Rules {
				m, ok := match(*r, members)
				if !ok {
					continue
				}
				if r.Direction == "ingress" {
					inRules = append(inRules, m)
				} else {
					outRules = append(outRules, m)
				}
			}
		}
		addrs := make([]string, 0, len(ips))
		for _, ip := range ips {
			addrs = append(addrs, ip.String())
		}
		dispatch := &unbound
		if p.DeviceOwner != "" {
			dispatch = &bound
			addrs = append(addrs, pairIPv4(p)...)
		}
		for _, a := range addrs {
			*dispatch = append(*dispatch,
				fmt.Sprintf("    oifname %q ip daddr %s jump %s", l.Provider, a, in),
				fmt.Sprintf("    iifname %q ip saddr %s jump %s", l.Provider, a, out))
		}
		chains = append(chains, chainText("port "+p.ID+" ingress", in, inRules), chainText("port "+p.ID+" egress", out, outRules))
	}
	dispatch := append(bound, unbound...)
	w("  chain forward {")
	w("    type filter hook forward priority filter; policy drop;")
	w("    ct state established,related accept")
	w("    ct state invalid drop")
	for _, d := range dispatch {
		w("%s", d)
	}
	w("    counter drop")
	w("  }")
	for _, c := range chains {
		b.WriteString(c)
	}
	w("}")
	return b.String()
}

func chainText(comment, name string, rules []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  chain %s {\n    comment %q\n", name, comment)
	for _, r := range rules {
		fmt.Fprintf(&b, "    %s\n", strings.TrimSpace(r+" counter accept"))
	}
	fmt.Fprintf(&b, "    counter drop\n  }\n")
	return b.String()
}

// pairIPv4 are a port's IPv4 allowed address pairs (addresses or CIDRs) as nft matches them.
func pairIPv4(p neutronfake.Port) []string {
	var out []string
	for _, pair := range p.AllowedAddressPairs {
		if pfx, err := netip.ParsePrefix(pair.IPAddress); err == nil && pfx.Addr().Is4() {
			out = append(out, pfx.Masked().String())
		} else if a, err := netip.ParseAddr(pair.IPAddress); err == nil && a.Is4() {
			out = append(out, a.String())
		}
	}
	return out
}

func fixedIPv4(p neutronfake.Port) []netip.Addr {
	var out []netip.Addr
	for _, f := range p.FixedIPs {
		if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is4() {
			out = append(out, a)
		}
	}
	return out
}

// match is the nft match of a rule (without its verdict); false for rules the IPv4 router
// does not see (IPv6) or that admit nothing (a remote group without IPv4 members).
func match(r neutronfake.Rule, members map[string][]netip.Addr) (string, bool) {
	if r.EtherType != "IPv4" {
		return "", false
	}
	var parts []string
	remote := "saddr"
	if r.Direction == "egress" {
		remote = "daddr"
	}
	switch {
	case r.RemoteIPPrefix != nil && *r.RemoteIPPrefix != "":
		parts = append(parts, fmt.Sprintf("ip %s %s", remote, *r.RemoteIPPrefix))
	case r.RemoteGroupID != nil && *r.RemoteGroupID != "":
		ips := members[*r.RemoteGroupID]
		if len(ips) == 0 {
			return "", false
		}
		var set []string
		for _, ip := range ips {
			set = append(set, ip.String())
		}
		parts = append(parts, fmt.Sprintf("ip %s { %s }", remote, strings.Join(set, ", ")))
	}
	if r.Protocol != nil && *r.Protocol != "" && *r.Protocol != "any" {
		name := strings.ToLower(*r.Protocol)
		num, known := protocols[name]
		if !known {
			n, err := strconv.Atoi(name)
			if err != nil {
				return "", false
			}
			num = n
		}
		parts = append(parts, fmt.Sprintf("meta l4proto %d", num))
		switch num {
		case 6, 17, 132:
			if r.PortRangeMin != nil {
				hi := *r.PortRangeMin
				if r.PortRangeMax != nil {
					hi = *r.PortRangeMax
				}
				l4 := map[int]string{6: "tcp", 17: "udp", 132: "sctp"}[num]
				parts = append(parts, fmt.Sprintf("%s dport %d-%d", l4, *r.PortRangeMin, hi))
			}
		case 1:
			if r.PortRangeMin != nil {
				parts = append(parts, fmt.Sprintf("icmp type %d", *r.PortRangeMin))
				if r.PortRangeMax != nil {
					parts = append(parts, fmt.Sprintf("icmp code %d", *r.PortRangeMax))
				}
			}
		}
	}
	return strings.Join(parts, " "), true // "": every IPv4 packet
}
