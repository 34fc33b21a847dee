package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// The uplink's policy routing (model.UplinkTable, model.UplinkRulePriority, model.UplinkMark).
const (
	UplinkTable        = model.UplinkTable
	UplinkRulePriority = model.UplinkRulePriority
)

// ErrUplinkMissing: the uplink (the pod's second NIC, which Multus adds) is not there yet.
var ErrUplinkMissing = errors.New("the uplink is not attached yet")

// EnsureUplink sets up the return path of a gateway whose tunnels use a second NIC (a cloud
// port, model.Uplink): every packet from the port's address — IKE and ESP of charon bound to
// it, WireGuard's answers to peers that reached it — leaves through that NIC toward the
// subnet's gateway, not through the pod's default route (eth0, where the cloud's router would
// never see it or would drop it as spoofed). Rules "from <address> lookup UplinkTable" and
// "fwmark model.UplinkMark lookup UplinkTable" (the WireGuard device marks its packets: its
// handshakes toward a peer's endpoint take the uplink although no source is bound), and a
// table holding the subnet and a default route via the gateway on the NIC. Until the NIC is
// there with its address it returns an error wrapping ErrUplinkMissing, so the agent binds
// nothing before it (the engine retries). Without an uplink, the rule and table are removed.
// h nil: the agent's namespace. (Exported for the lab cloud's end-to-end test.)
func EnsureUplink(h *netlink.Handle, m *model.Gateway) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	u := m.Uplink
	var src *net.IPNet
	if u != nil {
		src = prefixNet(netip.PrefixFrom(u.Address.Addr(), 32))
	}
	rules, err := h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing routing rules: %w", err)
	}
	haveSrc, haveMark := false, false
	for i := range rules {
		r := &rules[i]
		if r.Table != UplinkTable {
			continue
		}
		switch {
		case src != nil && r.Priority == UplinkRulePriority && r.Src != nil && r.Src.String() == src.String() && r.Mark == 0:
			haveSrc = true
			continue
		case u != nil && r.Priority == UplinkRulePriority && r.Src == nil && r.Mark == model.UplinkMark:
			haveMark = true
			continue
		}
		if err := h.RuleDel(r); err != nil {
			return fmt.Errorf("removing the stale uplink rule %s: %w", r, err)
		}
	}

	var want []netlink.Route
	if u != nil {
		link, err := h.LinkByName(u.Interface)
		if err != nil {
			var nf netlink.LinkNotFoundError
			if errors.As(err, &nf) {
				return fmt.Errorf("waiting for %s: %w", u.Interface, ErrUplinkMissing)
			}
			return fmt.Errorf("finding the uplink %s: %w", u.Interface, err)
		}
		addrs, err := h.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("listing %s's addresses: %w", u.Interface, err)
		}
		found := false
		for _, a := range addrs {
			ip, _ := netip.AddrFromSlice(a.IP)
			ones, _ := a.Mask.Size()
			found = found || netip.PrefixFrom(ip.Unmap(), ones) == u.Address
		}
		if !found {
			return fmt.Errorf("waiting for %s on %s: %w", u.Address, u.Interface, ErrUplinkMissing)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("setting %s up: %w", u.Interface, err)
		}
		idx := link.Attrs().Index
		want = append(want, netlink.Route{LinkIndex: idx, Dst: prefixNet(u.Address.Masked()), Src: u.Address.Addr().AsSlice(),
			Scope: netlink.SCOPE_LINK, Protocol: netlink.RouteProtocol(4) /* static */, Table: UplinkTable})
		if u.Gateway.IsValid() {
			want = append(want, netlink.Route{LinkIndex: idx, Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0")), Gw: u.Gateway.AsSlice(),
				Src: u.Address.Addr().AsSlice(), Protocol: netlink.RouteProtocol(4), Table: UplinkTable})
		}
	}
	have, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: UplinkTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing the uplink table: %w", err)
	}
	for i := range have {
		if !containsRoute(want, have[i]) {
			if err := h.RouteDel(&have[i]); err != nil {
				return fmt.Errorf("removing the stale uplink route %s: %w", have[i], err)
			}
		}
	}
	for i := range want {
		if err := h.RouteReplace(&want[i]); err != nil {
			return fmt.Errorf("adding the uplink route %s: %w", want[i], err)
		}
	}
	if src != nil && !haveSrc {
		r := netlink.NewRule()
		r.Family = netlink.FAMILY_V4
		r.Src, r.Table, r.Priority = src, UplinkTable, UplinkRulePriority
		if err := h.RuleAdd(r); err != nil {
			return fmt.Errorf("adding the uplink rule from %s: %w", src, err)
		}
	}
	if u != nil && !haveMark {
		r := netlink.NewRule()
		r.Family = netlink.FAMILY_V4
		r.Mark, r.Table, r.Priority = model.UplinkMark, UplinkTable, UplinkRulePriority
		if err := h.RuleAdd(r); err != nil {
			return fmt.Errorf("adding the uplink rule for fwmark %#x: %w", model.UplinkMark, err)
		}
	}
	return nil
}

func routeKey(r netlink.Route) string {
	dst := "0.0.0.0/0"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	return fmt.Sprintf("%s via %s dev %d", dst, r.Gw, r.LinkIndex)
}

func containsRoute(rs []netlink.Route, r netlink.Route) bool {
	for _, w := range rs {
		if routeKey(w) == routeKey(r) {
			return true
		}
	}
	return false
}
