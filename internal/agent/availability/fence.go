package availability

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
)

// FenceTable is the nftables table that fences a standby pod: an inet table of its own, so
// the gateway's ruleset (table ip bnerd_vpn, which the agent's ruleset check lists and
// repairs by name) never sees or removes it.
const FenceTable = "bnerd_standby"

// removeFence deletes the fence (and does nothing where there is none).
const removeFence = "table inet " + FenceTable + " {}\ndelete table inet " + FenceTable + "\n"

// Fence is the standby's nftables table: it drops IKE (UDP 500 and 4500), ESP and the
// WireGuard listen port in both directions, so a standby's charon or WireGuard device, fully
// configured, neither answers nor reaches a site. The pod's other traffic (the API server,
// the probes of the metrics port, DNS) passes.
//
// On the host network (Scope set: the gateway's VIP) the fence drops only IKE and ESP to and
// from the VIP, and the WireGuard listen port (the gateway's own on its node): the node's own
// IKE and the other gateways' traffic on the node pass. The VIP's absence from a standby's
// node (VIP.Release) is what keeps the sites' packets away; the scoped fence only keeps a
// standby that still held the VIP from answering.
type Fence struct {
	// NFT is the nft binary; "nft" from PATH when empty.
	NFT string
	// Scope limits the IKE and ESP rules to this address (invalid: every address).
	Scope netip.Addr

	mu sync.Mutex
	// installed: the table is in place with wgPort.
	installed bool
	wgPort    uint16
}

// FenceRuleset is the fence's nft script for the WireGuard listen port wgPort (0: none known).
func FenceRuleset(wgPort uint16) string {
	return FenceRulesetFor(netip.Addr{}, wgPort)
}

// FenceRulesetFor is FenceRuleset with the IKE and ESP rules limited to scope (the VIP of a
// host-network gateway) when it is valid.
func FenceRulesetFor(scope netip.Addr, wgPort uint16) string {
	in, out := "", ""
	if scope.IsValid() {
		in, out = "ip daddr "+scope.String()+" ", "ip saddr "+scope.String()+" "
	}
	wg := ""
	if wgPort != 0 {
		wg = fmt.Sprintf("\t\tudp dport %d drop\n", wgPort)
	}
	wgOut := ""
	if wgPort != 0 {
		wgOut = fmt.Sprintf("\t\tudp sport %d drop\n", wgPort)
	}
	return removeFence + `table inet ` + FenceTable + ` {
	chain input {
		type filter hook input priority filter - 20; policy accept;
		` + in + `udp dport { 500, 4500 } drop
		` + in + `meta l4proto esp drop
` + wg + `	}
	chain output {
		type filter hook output priority filter - 20; policy accept;
		` + out + `udp sport { 500, 4500 } drop
		` + out + `udp dport { 500, 4500 } drop
		` + out + `meta l4proto esp drop
` + wgOut + `	}
}
`
}

// Install puts the fence in place (one transaction: the table replaced as a whole), with
// wgPort dropped too when not 0.
func (f *Fence) Install(ctx context.Context, wgPort uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(ctx, FenceRulesetFor(f.Scope, wgPort)); err != nil {
		return fmt.Errorf("installing the standby fence: %w", err)
	}
	f.installed, f.wgPort = true, wgPort
	return nil
}

// Follow re-installs the fence for a new WireGuard listen port, when it is installed for
// another.
func (f *Fence) Follow(ctx context.Context, wgPort uint16) error {
	f.mu.Lock()
	stale := f.installed && f.wgPort != wgPort
	f.mu.Unlock()
	if !stale {
		return nil
	}
	return f.Install(ctx, wgPort)
}

// Remove deletes the fence (nothing happens where there is none).
func (f *Fence) Remove(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.load(ctx, removeFence); err != nil {
		return fmt.Errorf("removing the standby fence: %w", err)
	}
	f.installed = false
	return nil
}

// Installed reports whether this Fence installed the table (and has not removed it).
func (f *Fence) Installed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.installed
}

func (f *Fence) load(ctx context.Context, text string) error {
	nft := f.NFT
	if nft == "" {
		nft = "nft"
	}
	cmd := exec.CommandContext(ctx, nft, "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
