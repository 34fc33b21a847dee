package availability

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Announcer moves the gateway's public address with the active role: a host-network gateway
// with a standby holds its address (a VIP on the node network) only on the active pod's node.
// Claim runs when the pod becomes active (before the dataplane re-establishes its tunnels,
// which then leave from the address), Release when it becomes standby (before its tunnels are
// ended, so nothing it sends leaves from the address). A gateway whose address does not move
// (a LoadBalancer Service selects the active pod) has none.
type Announcer interface {
	Claim(ctx context.Context) error
	Release(ctx context.Context) error
}

// VIP is the Announcer of a host-network gateway: Claim adds Address (/32) to the node's
// interface on the address's network and announces it with gratuitous ARP, so the node
// network's neighbours send to this node from then on; Release removes it. Without the
// address on its node a standby neither receives the sites' packets to it nor sends from it:
// the address's absence is the standby's fence, and the node's other traffic is untouched.
type VIP struct {
	// Address is the VIP (IPv4).
	Address netip.Addr
	// Interface carries the VIP; "" is the interface holding an IPv4 address whose network
	// contains Address (the node's address on the VIP's network).
	Interface string
	// Netns is the path of the network namespace to act in ("": the agent's own).
	Netns string
	// GARPs (3) gratuitous ARP requests are sent on Claim, GARPInterval (200 ms) apart: the
	// first at once, the others after Claim returned (a neighbour that missed one).
	GARPs        int
	GARPInterval time.Duration
	Log          logr.Logger

	mu     sync.Mutex
	cancel context.CancelFunc // the pending repeats of the last Claim
}

// Claim adds the VIP to its interface (nothing when it is there) and announces it.
func (v *VIP) Claim(ctx context.Context) error {
	if !v.Address.Is4() {
		return fmt.Errorf("VIP %s: not an IPv4 address", v.Address)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopRepeats()
	var ifi *net.Interface
	err := v.do(func() error {
		link, err := v.link()
		if err != nil {
			return err
		}
		if err := netlink.AddrReplace(link, v.addr()); err != nil {
			return fmt.Errorf("adding VIP %s to %s: %w", v.Address, link.Attrs().Name, err)
		}
		ifi, err = net.InterfaceByIndex(link.Attrs().Index)
		if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	n, every := v.GARPs, v.GARPInterval
	if n <= 0 {
		n = 3
	}
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	var client *arp.Client
	if err := v.do(func() error {
		// The socket stays in this namespace for its whole life.
		c, err := arp.Dial(ifi)
		client = c
		return err
	}); err != nil {
		return fmt.Errorf("announcing VIP %s on %s: %w", v.Address, ifi.Name, err)
	}
	if err := v.garp(client); err != nil {
		_ = client.Close()
		return fmt.Errorf("announcing VIP %s on %s: %w", v.Address, ifi.Name, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	v.cancel = cancel
	go func() {
		defer client.Close()
		for i := 1; i < n; i++ {
			select {
			case <-rctx.Done():
				return
			case <-time.After(every):
			}
			if err := v.garp(client); err != nil {
				v.Log.Error(err, "availability: repeating the VIP's gratuitous ARP", "vip", v.Address.String())
			}
		}
	}()
	v.Log.Info("availability: VIP claimed", "vip", v.Address.String(), "interface", ifi.Name)
	return nil
}

// garp sends one gratuitous ARP request (sender and target the VIP, to the broadcast address),
// the form every neighbour updates its entry from.
func (v *VIP) garp(c *arp.Client) error {
	p, err := arp.NewPacket(arp.OperationRequest, c.HardwareAddr(), v.Address, ethernet.Broadcast, v.Address)
	if err != nil {
		return err
	}
	if err := c.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	return c.WriteTo(p, ethernet.Broadcast)
}

// Release removes the VIP from whichever interface holds it (nothing when none does).
func (v *VIP) Release(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopRepeats()
	return v.do(func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("listing addresses: %w", err)
		}
		var errs []error
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); !ok || ip.Unmap() != v.Address {
				continue
			}
			link, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if err := netlink.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, fmt.Errorf("removing VIP %s from %s: %w", v.Address, link.Attrs().Name, err))
				continue
			}
			v.Log.Info("availability: VIP released", "vip", v.Address.String(), "interface", link.Attrs().Name)
		}
		return errors.Join(errs...)
	})
}

// Close stops the repeats of the last Claim's announcement (the VIP stays where it is).
func (v *VIP) Close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stopRepeats()
}

// Held reports whether an interface holds the VIP.
func (v *VIP) Held() (bool, error) {
	held := false
	err := v.do(func() error {
		addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == v.Address {
				held = true
			}
		}
		return err
	})
	return held, err
}

func (v *VIP) stopRepeats() {
	if v.cancel != nil {
		v.cancel()
		v.cancel = nil
	}
}

func (v *VIP) addr() *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: v.Address.AsSlice(), Mask: net.CIDRMask(32, 32)}}
}

// link is Interface, or the interface whose IPv4 network (other than the VIP's own /32)
// contains the VIP.
func (v *VIP) link() (netlink.Link, error) {
	if v.Interface != "" {
		l, err := netlink.LinkByName(v.Interface)
		if err != nil {
			return nil, fmt.Errorf("VIP %s: interface %s: %w", v.Address, v.Interface, err)
		}
		return l, nil
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		if !ok || ones >= 32 || ip.Unmap() == v.Address {
			continue
		}
		if netip.PrefixFrom(ip.Unmap(), ones).Masked().Contains(v.Address) {
			return netlink.LinkByIndex(a.LinkIndex)
		}
	}
	return nil, fmt.Errorf("VIP %s: no interface has an address on its network", v.Address)
}

// do runs f in Netns (on a locked OS thread switched into it), or directly.
func (v *VIP) do(f func() error) error {
	if v.Netns == "" {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(v.Netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := f()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// The thread stays locked and ends with its goroutine.
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
