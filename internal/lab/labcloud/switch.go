package labcloud

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// Switch is the cloud's L2 agent for the provider network, a Linux bridge in the router
// namespace (the router's provider link, which carries the router's gateway address). A port
// is plugged in as a link named TapName(port ID) enslaved to the bridge: one end of a veth
// whose other end is the VM's NIC (hack/lab/cloud.sh plugs them). For every trunk whose
// parent port is plugged in, the agent carries each subport as Neutron's trunk driver does: a
// VLAN link on the parent's tap (the subport's segmentation ID, named TapName(subport ID)),
// enslaved to the bridge; a subport that left its trunk loses its link. It enforces port
// security on every member (PortSecurity, table PortSecurityTable).
type Switch struct {
	// Netns is the router namespace's name (ip netns); Bridge the bridge's name in it.
	Netns, Bridge string
	// NFT is the nft binary; "nft" when empty.
	NFT string
	Log logr.Logger

	applied string
}

func (s *Switch) nft() string {
	if s.NFT == "" {
		return "nft"
	}
	return s.NFT
}

// bridgeNetfilter are the per-namespace switches of bridge netfilter (br_netfilter).
var bridgeNetfilter = []string{"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.bridge.bridge-nf-call-arptables"}

// Setup checks that Bridge is a bridge and keeps bridged frames out of the ip family's hooks:
// with bridge netfilter on, a frame between two ports would meet the router's forward chain
// (policy drop) as if routed. Bridge netfilter is switched off in the namespace (its sysctls
// are per namespace); a kernel without it has nothing to switch off.
func (s *Switch) Setup() error {
	h, closeH, err := netlinkIn(s.Netns)
	if err != nil {
		return err
	}
	defer closeH()
	l, err := h.LinkByName(s.Bridge)
	if err != nil {
		return fmt.Errorf("provider bridge %s in %s: %w", s.Bridge, s.Netns, err)
	}
	if _, ok := l.(*netlink.Bridge); !ok {
		return fmt.Errorf("the provider link %s in %s is a %s, not a bridge", s.Bridge, s.Netns, l.Type())
	}
	if err := exec.Command("ip", "netns", "exec", s.Netns, "sysctl", "-n", bridgeNetfilter[0]).Run(); err != nil {
		return nil // no bridge netfilter in this kernel
	}
	for _, k := range bridgeNetfilter {
		if out, err := exec.Command("ip", "netns", "exec", s.Netns, "sysctl", "-qw", k+"=0").CombinedOutput(); err != nil {
			return fmt.Errorf("switching off %s in %s: %v: %s", k, s.Netns, err, out)
		}
	}
	return nil
}

// SubportLink is the VLAN link that carries a trunk's subport on its parent's tap.
type SubportLink struct {
	// Name is TapName(subport ID), Parent TapName(trunk's parent port ID).
	Name, Parent string
	VLAN         int
}

// SubportLinks are the links the trunks' subports need: one per subport of every trunk whose
// parent's tap is among links (names of the namespace's links), sorted by name.
func SubportLinks(trunks []neutronfake.Trunk, links []string) []SubportLink {
	var out []SubportLink
	for _, t := range trunks {
		parent := TapName(t.PortID)
		if !slices.Contains(links, parent) {
			continue
		}
		for _, sp := range t.SubPorts {
			out = append(out, SubportLink{Name: TapName(sp.PortID), Parent: parent, VLAN: sp.SegmentationID})
		}
	}
	slices.SortFunc(out, func(a, b SubportLink) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Program wires the subports' VLAN links (SubportLinks: missing ones added, enslaved and up;
// VLAN links named tap... that no subport needs as they are removed) and applies the port
// security of the bridge's members when it differs from what was applied last. Reports
// whether anything changed.
func (s *Switch) Program(ctx context.Context, ports []neutronfake.Port, trunks []neutronfake.Trunk) (bool, error) {
	h, closeH, err := netlinkIn(s.Netns)
	if err != nil {
		return false, err
	}
	defer closeH()
	br, err := h.LinkByName(s.Bridge)
	if err != nil {
		return false, fmt.Errorf("provider bridge %s in %s: %w", s.Bridge, s.Netns, err)
	}
	links, err := h.LinkList()
	if err != nil {
		return false, fmt.Errorf("links in %s: %w", s.Netns, err)
	}
	// a subport that cannot be wired (a kernel without 802.1Q) leaves the others' port
	// security in force: the error is reported after it is applied
	changed, wireErr := s.wireSubports(h, br, links, trunks)
	if changed {
		if links, err = h.LinkList(); err != nil {
			return changed, errors.Join(wireErr, fmt.Errorf("links in %s: %w", s.Netns, err))
		}
	}
	var members []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			members = append(members, l.Attrs().Name)
		}
	}
	text := PortSecurity(ports, trunks, members)
	if text == s.applied {
		return changed, wireErr
	}
	if err := applyNFT(ctx, s.Netns, s.nft(), text); err != nil {
		return changed, errors.Join(wireErr, err)
	}
	s.applied = text
	return true, wireErr
}

// wireSubports makes the namespace's VLAN links those SubportLinks wants.
func (s *Switch) wireSubports(h *netlink.Handle, br netlink.Link, links []netlink.Link, trunks []neutronfake.Trunk) (bool, error) {
	names := make([]string, 0, len(links))
	nameOf := map[int]string{}
	for _, l := range links {
		names = append(names, l.Attrs().Name)
		nameOf[l.Attrs().Index] = l.Attrs().Name
	}
	want := map[string]SubportLink{}
	for _, w := range SubportLinks(trunks, names) {
		want[w.Name] = w
	}
	changed := false
	var errs []error
	for _, l := range links {
		name := l.Attrs().Name
		v, isVLAN := l.(*netlink.Vlan)
		w, wanted := want[name]
		if !isVLAN || !strings.HasPrefix(name, "tap") {
			if wanted {
				errs = append(errs, fmt.Errorf("subport link %s: a %s of that name is in the way", name, l.Type()))
				delete(want, name)
			}
			continue
		}
		if wanted && v.VlanId == w.VLAN && nameOf[v.ParentIndex] == w.Parent {
			delete(want, name)
			did, err := enslaveUp(h, l, br)
			changed = changed || did
			if err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := h.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("removing the VLAN link %s: %w", name, err))
			continue
		}
		changed = true
		s.Log.Info("subport link removed", "link", name, "vlan", v.VlanId)
	}
	for _, w := range slices.SortedFunc(maps.Values(want), func(a, b SubportLink) int { return cmp.Compare(a.Name, b.Name) }) {
		parent, err := h.LinkByName(w.Parent)
		if err != nil {
			errs = append(errs, fmt.Errorf("subport link %s: parent %s: %w", w.Name, w.Parent, err))
			continue
		}
		l := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: w.Name, ParentIndex: parent.Attrs().Index}, VlanId: w.VLAN}
		if err := h.LinkAdd(l); err != nil {
			errs = append(errs, fmt.Errorf("adding the VLAN link %s (vlan %d on %s): %w", w.Name, w.VLAN, w.Parent, err))
			continue
		}
		changed = true
		if _, err := enslaveUp(h, l, br); err != nil {
			errs = append(errs, err)
			continue
		}
		s.Log.Info("subport link added", "link", w.Name, "parent", w.Parent, "vlan", w.VLAN)
	}
	return changed, errors.Join(errs...)
}

// enslaveUp makes l a port of br, up; reports whether it had to change anything.
func enslaveUp(h *netlink.Handle, l, br netlink.Link) (bool, error) {
	changed := false
	if l.Attrs().MasterIndex != br.Attrs().Index {
		if err := h.LinkSetMasterByIndex(l, br.Attrs().Index); err != nil {
			return changed, fmt.Errorf("enslaving %s to %s: %w", l.Attrs().Name, br.Attrs().Name, err)
		}
		changed = true
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(l); err != nil {
			return changed, fmt.Errorf("setting %s up: %w", l.Attrs().Name, err)
		}
		changed = true
	}
	return changed, nil
}

// Run programs the switch now, after every change of the cloud and after every change of the
// namespace's links (a tap plugged in or unplugged), until ctx ends; a failed programming is
// retried after retry (a lasting error is logged once). Without link notifications it polls
// every retry.
func (s *Switch) Run(ctx context.Context, c *neutronfake.Server, retry time.Duration) {
	linksChanged := s.watchLinks(ctx)
	lastErr := ""
	for {
		changed := c.Changed()
		var wait <-chan time.Time
		did, err := s.Program(ctx, c.PortList(), c.TrunkList())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if err.Error() != lastErr { // a lasting failure is logged once, retried quietly
				s.Log.Error(err, "programming the switch", "netns", s.Netns)
			}
			lastErr = err.Error()
			wait = time.After(retry)
		} else {
			lastErr = ""
		}
		if did {
			s.Log.Info("switch programmed", "netns", s.Netns)
		}
		if linksChanged == nil && wait == nil {
			wait = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-wait:
		case _, ok := <-linksChanged:
			if !ok {
				s.Log.Info("link notifications ended; polling", "netns", s.Netns, "every", retry)
				linksChanged = nil
			}
		}
	}
}

// watchLinks signals (coalesced) every link change in the namespace until ctx ends; nil when
// it cannot subscribe. The channel is closed when the subscription ends.
func (s *Switch) watchLinks(ctx context.Context) <-chan struct{} {
	ns, err := netns.GetFromName(s.Netns)
	if err != nil {
		s.Log.Error(err, "watching links", "netns", s.Netns)
		return nil
	}
	defer ns.Close() // the subscription's socket stays in the namespace
	updates := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(updates, ctx.Done(), netlink.LinkSubscribeOptions{
		Namespace: &ns,
		ErrorCallback: func(err error) {
			if ctx.Err() == nil {
				s.Log.Error(err, "link notifications", "netns", s.Netns)
			}
		},
	}); err != nil {
		s.Log.Error(err, "watching links", "netns", s.Netns)
		return nil
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for range updates {
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out
}

// Teardown removes the port security table.
func (s *Switch) Teardown() error {
	out, err := exec.Command("ip", "netns", "exec", s.Netns, s.nft(), "delete", "table", "bridge", PortSecurityTable).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("No such file")) {
		return fmt.Errorf("nft in %s: %v: %s", s.Netns, err, out)
	}
	s.applied = ""
	return nil
}
