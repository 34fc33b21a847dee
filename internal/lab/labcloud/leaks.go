package labcloud

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// Leak is a cloud resource of the operator's still in the cloud.
type Leak struct {
	// Kind is "port", "subport", "address pair", "security group" or "floating IP"; What
	// names it (name or address and where it is attached).
	Kind, ID, What string
	// Kept: a pinned floating IP, detached — kept on purpose (never released), not a leak.
	// A pinned address still attached, or gone (released), is listed as not kept.
	Kept bool
}

// ours: a resource the operator tagged or named as a gateway's.
func ours(name string, tags []string) bool {
	return strings.HasPrefix(name, openstack.NamePrefix) ||
		slices.ContainsFunc(tags, func(t string) bool { return strings.HasPrefix(t, openstack.TagGatewayPrefix) })
}

// Leaks lists what the operator left in the cloud once its gateways are gone: its ports (and
// where one is still a trunk's subport or an address pair on a node's NIC, or a NIC keeps the
// pair of a port that is gone), security groups and floating IPs,
// and the pinned addresses (the gateways' spec.endpoint floatingIP), Kept when detached, not
// kept when still attached or released.
func Leaks(st State, pinned ...string) []Leak {
	var out []Leak
	names := map[string]string{}
	for _, p := range st.Ports {
		names[p.ID] = p.Name
		if ours(p.Name, p.Tags) {
			out = append(out, Leak{Kind: "port", ID: p.ID, What: p.Name})
		}
	}
	byMAC := map[string]neutronfake.Port{}
	for _, p := range st.Ports {
		byMAC[p.MACAddress] = p
	}
	for _, p := range st.Ports {
		for _, pair := range p.AllowedAddressPairs {
			owner, exists := byMAC[pair.MACAddress]
			switch {
			case exists && ours(owner.Name, owner.Tags) && owner.ID != p.ID:
				out = append(out, Leak{Kind: "address pair", ID: owner.ID, What: fmt.Sprintf("%s %s on %s", pair.IPAddress, pair.MACAddress, p.Name)})
			case !exists:
				out = append(out, Leak{Kind: "address pair", ID: p.ID, What: fmt.Sprintf("%s %s on %s (no port has that MAC any more)", pair.IPAddress, pair.MACAddress, p.Name)})
			}
		}
	}
	for _, p := range st.Ports {
		if !ours(p.Name, p.Tags) {
			continue
		}
		for _, tr := range st.Trunks {
			for _, sp := range tr.SubPorts {
				if sp.PortID == p.ID {
					out = append(out, Leak{Kind: "subport", ID: p.ID, What: fmt.Sprintf("VLAN %d on the trunk of %s", sp.SegmentationID, names[tr.PortID])})
				}
			}
		}
	}
	for _, g := range st.SecurityGroups {
		if ours(g.Name, g.Tags) {
			out = append(out, Leak{Kind: "security group", ID: g.ID, What: g.Name})
		}
	}
	seen := map[string]bool{}
	for _, f := range st.FloatingIPs {
		isPinned := slices.Contains(pinned, f.FloatingIPAddress)
		seen[f.FloatingIPAddress] = true
		if !isPinned && !ours(f.Description, f.Tags) {
			continue
		}
		what := f.FloatingIPAddress + " (detached)"
		if f.PortID != nil {
			what = f.FloatingIPAddress + " on port " + *f.PortID
		}
		out = append(out, Leak{Kind: "floating IP", ID: f.ID, What: what, Kept: isPinned && f.PortID == nil})
	}
	for _, a := range pinned {
		if !seen[a] {
			out = append(out, Leak{Kind: "floating IP", What: a + " released (pinned: must be kept)"})
		}
	}
	return out
}

// LeakTable prints leaks as a table, and says so when there are none.
func LeakTable(ls []Leak) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tID\tWHAT\tVERDICT")
	leaked := 0
	for _, l := range ls {
		verdict := "LEAKED"
		if l.ID == "" {
			verdict = "MISSING"
		}
		if l.Kept {
			verdict = "kept (pinned, detached)"
		} else {
			leaked++
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", l.Kind, l.ID, l.What, verdict)
	}
	_ = w.Flush()
	fmt.Fprintf(&b, "%d leaked or missing, %d kept\n", leaked, len(ls)-leaked)
	return b.String()
}

// Leaked counts the leaks that are not kept on purpose (missing pinned addresses included).
func Leaked(ls []Leak) int {
	n := 0
	for _, l := range ls {
		if !l.Kept {
			n++
		}
	}
	return n
}
