// Package labnet is the lab's pod source guard. Production CNIs drop what a pod sends from an
// address that is not its own (Calico's per-workload checks, Cilium's source IP verification,
// OVN-Kubernetes' port security); the lab's pod network is the reference bridge plugin, which
// forwards whatever a pod sends. The gateways' reverse exposures admit clients by source address,
// so the lab adds the check production clusters have: a bridge-family nftables table that
// accepts, from each guarded bridge port (a pod's host-side veth), only IPv4 and ARP from the
// addresses the CNI gave that pod, and drops and counts everything else the pod sends.
//
// The table is installed once when the lab starts (Guard.Install); the lab-sourceguard CNI
// plugin, chained right after the bridge plugin, guards a pod's veth with the pod's addresses
// while its sandbox is created (Guard.Admit), before any container of the pod runs — a failure
// fails the sandbox — and takes the addresses away when the sandbox goes (Guard.Revoke): the
// port then stays guarded and sends nothing. Ports are named in a set rather than matched by
// bridge, because the bridge a frame enters (nft's meta ibrname) needs a kernel option
// (CONFIG_NFT_BRIDGE_META) that the lab's kernels lack; the ports of other bridges on the node
// are left alone.
package labnet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// TableName is the guard's nftables table (family bridge).
const TableName = "bnerd-lab-srcguard"

// Runner runs nft with args and stdin, returning its combined output.
type Runner func(ctx context.Context, stdin string, args ...string) (string, error)

// Guard is the node's pod source guard.
type Guard struct {
	// NFT runs nft; ExecNFT when nil.
	NFT Runner
}

// Source is one admitted (bridge port, address) pair: a set element.
type Source struct {
	Port string
	Addr netip.Addr
}

// ExecNFT runs the nft binary on PATH (or /usr/sbin/nft: a CNI plugin's PATH may be short).
func ExecNFT(ctx context.Context, stdin string, args ...string) (string, error) {
	bin, err := exec.LookPath("nft")
	if err != nil {
		bin = "/usr/sbin/nft"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

func (g Guard) nft(ctx context.Context, stdin string, args ...string) (string, error) {
	if g.NFT != nil {
		return g.NFT(ctx, stdin, args...)
	}
	return ExecNFT(ctx, stdin, args...)
}

// TableScript is the nft script that (re)creates the guard's table, guarding no port yet: what
// enters a bridge from a guarded port passes only from an admitted (port . address); IPv6 (the
// lab's pod network has none) and every other frame from the port are dropped and counted in
// "spoofed". Frames the node itself sends into a bridge take the output hook and are not
// checked.
func TableScript() string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table bridge %s\ndelete table bridge %s\n", TableName, TableName)
	fmt.Fprintf(&b, "table bridge %s {\n", TableName)
	b.WriteString("\tset guarded_ports {\n\t\ttype ifname\n\t}\n")
	b.WriteString("\tset pod_sources {\n\t\ttype ifname . ipv4_addr\n\t}\n")
	b.WriteString("\tcounter spoofed {\n\t}\n")
	b.WriteString("\tchain prerouting {\n\t\ttype filter hook prerouting priority -300; policy accept;\n")
	b.WriteString("\t\tiifname != @guarded_ports accept\n")
	b.WriteString("\t\tether type ip iifname . ip saddr @pod_sources accept\n")
	b.WriteString("\t\tether type arp iifname . arp saddr ip @pod_sources accept\n")
	b.WriteString("\t\tcounter name spoofed drop\n")
	b.WriteString("\t}\n}\n")
	return b.String()
}

// Install (re)creates the guard's table with no sources admitted.
func (g Guard) Install(ctx context.Context) error {
	_, err := g.nft(ctx, TableScript(), "-f", "-")
	return err
}

// Uninstall deletes the guard's table (nothing when it is not there).
func (g Guard) Uninstall(ctx context.Context) error {
	_, err := g.nft(ctx, fmt.Sprintf("add table bridge %s\ndelete table bridge %s\n", TableName, TableName), "-f", "-")
	return err
}

// AdmitScript is the nft script that guards port and makes addrs its only sources: it deletes the
// elements in current that name the port or one of the addresses (a veth name or an address
// reused after a pod whose removal was missed), then adds the new ones, in one transaction.
func AdmitScript(current []Source, port string, addrs []netip.Addr) string {
	var b strings.Builder
	for _, s := range current {
		if s.Port == port || slices.Contains(addrs, s.Addr) {
			fmt.Fprintf(&b, "delete element bridge %s pod_sources { %q . %s }\n", TableName, s.Port, s.Addr)
		}
	}
	fmt.Fprintf(&b, "add element bridge %s guarded_ports { %q }\n", TableName, port)
	for _, a := range addrs {
		fmt.Fprintf(&b, "add element bridge %s pod_sources { %q . %s }\n", TableName, port, a)
	}
	return b.String()
}

// RevokeScript is the nft script that deletes every source of port found in current; the port
// stays guarded.
func RevokeScript(current []Source, port string) string {
	var b strings.Builder
	for _, s := range current {
		if s.Port == port {
			fmt.Fprintf(&b, "delete element bridge %s pod_sources { %q . %s }\n", TableName, s.Port, s.Addr)
		}
	}
	return b.String()
}

// Admit makes addrs (IPv4) the sources port may send from.
func (g Guard) Admit(ctx context.Context, port string, addrs []netip.Addr) error {
	if port == "" {
		return fmt.Errorf("admitting %v: no bridge port", addrs)
	}
	for _, a := range addrs {
		if !a.Is4() {
			return fmt.Errorf("admitting %s on %s: the lab's pod network is IPv4 only", a, port)
		}
	}
	cur, err := g.Sources(ctx)
	if err != nil {
		return err
	}
	_, err = g.nft(ctx, AdmitScript(cur, port, addrs), "-f", "-")
	return err
}

// Revoke removes every source of port, which stays guarded: it sends nothing more.
func (g Guard) Revoke(ctx context.Context, port string) error {
	cur, err := g.Sources(ctx)
	if err != nil {
		return err
	}
	script := RevokeScript(cur, port)
	if script == "" {
		return nil
	}
	_, err = g.nft(ctx, script, "-f", "-")
	return err
}

// Sources lists the admitted (port, address) pairs.
func (g Guard) Sources(ctx context.Context) ([]Source, error) {
	out, err := g.nft(ctx, "", "-j", "list", "set", "bridge", TableName, "pod_sources")
	if err != nil {
		return nil, err
	}
	return parseSources([]byte(out))
}

// Spoofed is the number of frames the guard dropped.
func (g Guard) Spoofed(ctx context.Context) (uint64, error) {
	out, err := g.nft(ctx, "", "-j", "list", "counter", "bridge", TableName, "spoofed")
	if err != nil {
		return 0, err
	}
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Packets uint64 `json:"packets"`
			} `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return 0, fmt.Errorf("nft's counter spoofed: %w", err)
	}
	for _, o := range doc.Nftables {
		if o.Counter != nil {
			return o.Counter.Packets, nil
		}
	}
	return 0, fmt.Errorf("nft listed no counter spoofed in table bridge %s", TableName)
}

// parseSources reads `nft -j list set` of pod_sources: elements {"concat": [port, address]}.
func parseSources(out []byte) ([]Source, error) {
	var doc struct {
		Nftables []struct {
			Set *struct {
				Elem []struct {
					Concat []string `json:"concat"`
				} `json:"elem"`
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("nft's set pod_sources: %w", err)
	}
	var srcs []Source
	for _, o := range doc.Nftables {
		if o.Set == nil {
			continue
		}
		for _, e := range o.Set.Elem {
			if len(e.Concat) != 2 {
				return nil, fmt.Errorf("nft's set pod_sources: element %v is not (port . address)", e.Concat)
			}
			a, err := netip.ParseAddr(e.Concat[1])
			if err != nil {
				return nil, fmt.Errorf("nft's set pod_sources: element %v: %w", e.Concat, err)
			}
			srcs = append(srcs, Source{Port: e.Concat[0], Addr: a})
		}
	}
	return srcs, nil
}

// PodSources picks, from the result of the bridge plugin the guard is chained after, the pod's
// bridge port (the host-side veth: an interface outside any sandbox that is not the bridge)
// and its IPv4 addresses.
func PodSources(res *current.Result, bridge string) (port string, addrs []netip.Addr, err error) {
	if res == nil {
		return "", nil, fmt.Errorf("no result of the bridge plugin to take the pod's port and addresses from")
	}
	for _, i := range res.Interfaces {
		if i.Sandbox == "" && i.Name != bridge {
			if port != "" {
				return "", nil, fmt.Errorf("the bridge plugin's result has two host-side interfaces (%s, %s)", port, i.Name)
			}
			port = i.Name
		}
	}
	if port == "" {
		return "", nil, fmt.Errorf("the bridge plugin's result has no host-side interface on bridge %s", bridge)
	}
	for _, ip := range res.IPs {
		a, ok := netip.AddrFromSlice(ip.Address.IP)
		if ok && a.Unmap().Is4() {
			addrs = append(addrs, a.Unmap())
		}
	}
	if len(addrs) == 0 {
		return "", nil, fmt.Errorf("the bridge plugin's result gives %s no IPv4 address", port)
	}
	return port, addrs, nil
}
