package labcloud

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// Router is the cloud's L3 agent for one router network namespace (which exists, with both
// links in it).
type Router struct {
	// Netns is the router namespace's name (ip netns).
	Netns string
	Links Links
	// NFT is the nft binary; "nft" when empty.
	NFT string
	Log logr.Logger

	applied string
}

func (r *Router) nft() string {
	if r.NFT == "" {
		return "nft"
	}
	return r.NFT
}

// Setup makes the namespace a router: forwarding on, and gateway (the provider subnet's
// gateway address with the subnet's length, e.g. 198.51.100.1/24) on the provider link, up.
func (r *Router) Setup(gateway netip.Prefix) error {
	if out, err := exec.Command("ip", "netns", "exec", r.Netns, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		return fmt.Errorf("enabling forwarding in %s: %v: %s", r.Netns, err, out)
	}
	h, closeH, err := r.handle()
	if err != nil {
		return err
	}
	defer closeH()
	for _, name := range []string{r.Links.Provider, r.Links.Client} {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("router link %s in %s: %w", name, r.Netns, err)
		}
		if name == r.Links.Provider && gateway.IsValid() {
			a := &netlink.Addr{IPNet: &net.IPNet{IP: gateway.Addr().AsSlice(), Mask: net.CIDRMask(gateway.Bits(), 32)}}
			if err := h.AddrReplace(l, a); err != nil {
				return fmt.Errorf("adding %s to %s: %w", gateway, name, err)
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", name, err)
		}
	}
	return nil
}

func (r *Router) handle() (*netlink.Handle, func(), error) { return netlinkIn(r.Netns) }

// netlinkIn is a netlink handle in the named namespace and the function that closes it.
func netlinkIn(name string) (*netlink.Handle, func(), error) {
	ns, err := netns.GetFromName(name)
	if err != nil {
		return nil, nil, fmt.Errorf("opening namespace %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		_ = ns.Close()
		return nil, nil, fmt.Errorf("netlink in %s: %w", name, err)
	}
	return h, func() { h.Close(); _ = ns.Close() }, nil
}

// applyNFT runs `nft -f -` with text in the named namespace.
func applyNFT(ctx context.Context, name, nft, text string) error {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", name, nft, "-f", "-")
	cmd.Stdin = bytes.NewBufferString(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s: %v: %s", name, err, out)
	}
	return nil
}

// Program applies the ruleset of s when it differs from what was applied last, and then
// forgets the router's connection tracking state, as Neutron's agents delete the conntrack
// entries of rules and floating IPs that went away: a flow the new rules refuse stops at its
// next packet instead of living on as "established". Reports whether anything changed.
func (r *Router) Program(ctx context.Context, s Snapshot) (bool, error) {
	text := Ruleset(s, r.Links)
	if text == r.applied {
		return false, nil
	}
	if err := applyNFT(ctx, r.Netns, r.nft(), text); err != nil {
		return false, err
	}
	r.applied = text
	h, closeH, err := r.handle()
	if err != nil {
		return true, err
	}
	defer closeH()
	if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return true, fmt.Errorf("flushing conntrack in %s: %w", r.Netns, err)
	}
	return true, nil
}

// Run programs the router from the cloud now and after every change until ctx ends; a failed
// programming is retried after retry (or the next change).
func (r *Router) Run(ctx context.Context, c *neutronfake.Server, retry time.Duration) {
	for {
		changed := c.Changed()
		var wait <-chan time.Time
		if did, err := r.Program(ctx, SnapshotOf(c)); ctx.Err() != nil {
			return
		} else if err != nil {
			r.Log.Error(err, "programming the router", "netns", r.Netns)
			wait = time.After(retry)
		} else if did {
			r.Log.Info("router programmed", "netns", r.Netns)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-wait:
		}
	}
}

// Teardown removes the router's table.
func (r *Router) Teardown() error {
	out, err := exec.Command("ip", "netns", "exec", r.Netns, r.nft(), "delete", "table", "ip", Table).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("No such file")) {
		return fmt.Errorf("nft in %s: %v: %s", r.Netns, err, out)
	}
	r.applied = ""
	return nil
}
