package labcloud

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// PortSecurityTable is the router namespace's bridge-family nft table: Neutron's port
// security (as ML2's agents enforce it) on the ports plugged into the provider bridge.
const PortSecurityTable = "bnerd_lab_portsec"

// TapName is the link Neutron's agents plug a port in as: "tap" and the first 11 characters of
// the port's ID (14 characters, within the kernel's 15).
func TapName(portID string) string { return "tap" + short(portID) }

// SpoofedCounter names the counter of the frames the port sent and port security dropped
// (a source MAC or address that is not the port's).
func SpoofedCounter(portID string) string { return "spoofed_" + short(portID) }

// MisdirectedCounter names the counter of the frames port security kept from the port (a
// unicast destination MAC that is not the port's).
func MisdirectedCounter(portID string) string { return "misdirected_" + short(portID) }

func short(id string) string {
	if len(id) > 11 {
		return id[:11]
	}
	return id
}

// PortSecurity renders PortSecurityTable, replacing whatever the table held (one transaction),
// for the links enslaved to the provider bridge (members, by name): each member that is a
// port's tap (TapName) on a port with port security enabled gets two chains. From the port
// (prerouting: before the bridge learns the source or forwards the frame, or the router
// receives it) only IPv4 whose (source MAC, source address) is the port's (MAC, a fixed IP) or
// one of its allowed address pairs (MAC, address or CIDR), and ARP whose (source MAC, sender
// MAC, sender address) is likewise; every other frame is dropped and counted
// (SpoofedCounter). To the port (postrouting: forwarded or sent by the router) only broadcast,
// multicast and frames for its MAC or a pair's; others are dropped and counted
// (MisdirectedCounter). A port without port security, and a link that is no port's, is not
// checked. trunks only annotate a subport's chains with its VLAN and its parent's tap.
func PortSecurity(ports []neutronfake.Port, trunks []neutronfake.Trunk, members []string) string {
	byTap := map[string]neutronfake.Port{}
	for _, p := range ports {
		byTap[TapName(p.ID)] = p
	}
	vlanOf := map[string]string{} // subport ID -> "vlan N on tapX"
	for _, t := range trunks {
		for _, sp := range t.SubPorts {
			vlanOf[sp.PortID] = fmt.Sprintf("vlan %d on %s", sp.SegmentationID, TapName(t.PortID))
		}
	}
	var checked []neutronfake.Port
	for _, m := range slices.Sorted(slices.Values(members)) {
		if p, ok := byTap[m]; ok && p.PortSecurityEnabled {
			checked = append(checked, p)
		}
	}

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("table bridge %s", PortSecurityTable)
	w("delete table bridge %s", PortSecurityTable)
	w("table bridge %s {", PortSecurityTable)
	for _, p := range checked {
		w("  counter %s {}", SpoofedCounter(p.ID))
		w("  counter %s {}", MisdirectedCounter(p.ID))
	}
	var from, to []string
	for _, p := range checked {
		from = append(from, fmt.Sprintf("%q : jump %s", TapName(p.ID), fromChain(p.ID)))
		to = append(to, fmt.Sprintf("%q : jump %s", TapName(p.ID), toChain(p.ID)))
	}
	w("  chain from_ports {")
	w("    type filter hook prerouting priority filter; policy accept;")
	if len(from) > 0 {
		w("    iifname vmap { %s }", strings.Join(from, ", "))
	}
	w("  }")
	w("  chain to_ports {")
	w("    type filter hook postrouting priority filter; policy accept;")
	if len(to) > 0 {
		w("    oifname vmap { %s }", strings.Join(to, ", "))
	}
	w("  }")
	for _, p := range checked {
		w("  chain %s {", fromChain(p.ID))
		w("    comment %q", chainComment(p, vlanOf[p.ID], "what it may send"))
		for _, s := range sources(p) {
			w("    ether type ip ether saddr %s ip saddr %s accept", s.mac, s.prefix)
			w("    ether type arp ether saddr %s arp saddr ether %s arp saddr ip %s accept", s.mac, s.mac, s.prefix)
		}
		w("    counter name %q drop", SpoofedCounter(p.ID))
		w("  }")
		w("  chain %s {", toChain(p.ID))
		w("    comment %q", chainComment(p, vlanOf[p.ID], "what it may receive"))
		w("    ether daddr & 01:00:00:00:00:00 == 01:00:00:00:00:00 accept")
		w("    ether daddr { %s } accept", strings.Join(macs(p), ", "))
		w("    counter name %q drop", MisdirectedCounter(p.ID))
		w("  }")
	}
	w("}")
	return b.String()
}

// maxComment is the longest comment nft takes.
const maxComment = 128

// chainComment says whose chain it is: the port's ID, its name when that is plain (letters,
// digits, ".", "_", "-") and fits in nft's comment, and its VLAN when it is a subport.
func chainComment(p neutronfake.Port, vlan, what string) string {
	tail := ": " + what
	if vlan != "" {
		tail = ", " + vlan + tail
	}
	named := "port " + p.ID + " (" + p.Name + ")" + tail
	if p.Name != "" && plain(p.Name) && len(named) <= maxComment {
		return named
	}
	return "port " + p.ID + tail
}

func plain(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	})
}

func fromChain(portID string) string { return "from_" + short(portID) }
func toChain(portID string) string   { return "to_" + short(portID) }

// source is a (MAC, IPv4 address or prefix) a port may send from.
type source struct {
	mac    string
	prefix string
}

// sources are the port's (MAC, fixed IP)s and its IPv4 allowed address pairs, in order,
// without repeats.
func sources(p neutronfake.Port) []source {
	var out []source
	add := func(mac, ip string) {
		s := source{strings.ToLower(mac), ip}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, f := range p.FixedIPs {
		if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is4() {
			add(p.MACAddress, a.String())
		}
	}
	for _, pair := range p.AllowedAddressPairs {
		mac := pair.MACAddress
		if mac == "" {
			mac = p.MACAddress
		}
		if a, err := netip.ParseAddr(pair.IPAddress); err == nil && a.Is4() {
			add(mac, a.String())
		} else if pf, err := netip.ParsePrefix(pair.IPAddress); err == nil && pf.Addr().Is4() {
			add(mac, pf.Masked().String())
		}
	}
	return out
}

// macs are the MACs frames to the port may carry: its own and its address pairs'.
func macs(p neutronfake.Port) []string {
	out := []string{strings.ToLower(p.MACAddress)}
	for _, pair := range p.AllowedAddressPairs {
		if m := strings.ToLower(pair.MACAddress); m != "" && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}
