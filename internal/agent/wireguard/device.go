package wireguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// UAPIDir is where userspace WireGuard devices put their control sockets
// (<dir>/<interface>.sock), which wgctrl and wg(8) find.
const UAPIDir = "/var/run/wireguard"

// userspaceDevice is the embedded wireguard-go device and its UAPI listener.
type userspaceDevice struct {
	dev  *device.Device
	uapi net.Listener
	sock string
}

// AliasPrefix starts the alias (ip link show: "alias ...") of every kernel device the driver
// creates; the rest is Options.Owner. It is how a restarted agent knows a device as its own.
const AliasPrefix = "bnerd-vpn-gateway:"

// ownerAlias is the alias of the devices the driver creates for owner.
func ownerAlias(owner string) string { return AliasPrefix + owner }

// adoptable says whether an existing link of that name may be adopted: only a kernel WireGuard
// device that a driver created for the same owner (its alias) — a previous agent of the same
// gateway — and never anything else: someone else's device, a TUN, a WireGuard device of another
// program or another gateway is refused, with an error saying so, and left alone.
func adoptable(name, linkType, alias, owner string, mode Mode) error {
	switch {
	case linkType != "wireguard":
		return fmt.Errorf("interface %s already exists and is not a WireGuard device (type %s): it is not this gateway's, refusing to use it", name, linkType)
	case alias != ownerAlias(owner):
		return fmt.Errorf("interface %s already exists and was not created for this gateway (alias %q, want %q): refusing to adopt someone else's device", name, alias, ownerAlias(owner))
	case mode == ModeUserspace:
		return fmt.Errorf("interface %s exists as a kernel WireGuard device, but userspace mode was requested", name)
	}
	return nil
}

// openDevice makes d.name a WireGuard device: a kernel link this gateway's driver created
// earlier is adopted (see adoptable); otherwise, depending on the mode, a kernel link is
// created (with the owner's alias) or the userspace device started.
func (d *Driver) openDevice() error {
	link, err := netlink.LinkByName(d.name)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil:
		if err := adoptable(d.name, link.Type(), link.Attrs().Alias, d.opts.Owner, d.opts.Mode); err != nil {
			return err
		}
		d.mode = ModeKernel
		d.log.Info("adopting the kernel WireGuard device a previous agent of this gateway created")
		return nil
	case !errors.As(err, &notFound):
		return fmt.Errorf("looking up interface %s: %w", d.name, err)
	}

	if d.opts.Mode != ModeUserspace {
		la := netlink.NewLinkAttrs()
		la.Name = d.name
		kerr := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: la})
		if kerr == nil {
			d.mode = ModeKernel
			d.created = true
			if link, err := netlink.LinkByName(d.name); err != nil {
				kerr = err
			} else {
				kerr = netlink.LinkSetAlias(link, ownerAlias(d.opts.Owner))
			}
			if kerr != nil {
				_ = d.teardown()
				return fmt.Errorf("marking the new device %s as this gateway's: %w", d.name, kerr)
			}
			d.log.Info("created kernel WireGuard device")
			return nil
		}
		if d.opts.Mode == ModeKernel {
			return fmt.Errorf("kernel WireGuard is not available (creating link %s: %w)", d.name, kerr)
		}
		d.log.Info("kernel WireGuard is not available; using the embedded userspace device", "reason", kerr.Error())
	}
	return d.startUserspace()
}

func (d *Driver) startUserspace() error {
	u, err := startUserspaceDevice(d.name, d.log)
	if err != nil {
		return err
	}
	d.uspace = u
	d.mode = ModeUserspace
	d.created = true
	d.log.Info("started embedded userspace WireGuard device")
	return nil
}

// startUserspaceDevice creates the TUN name, runs a wireguard-go device on it and serves its
// UAPI socket in UAPIDir.
func startUserspaceDevice(name string, log logr.Logger) (*userspaceDevice, error) {
	tdev, err := tun.CreateTUN(name, DefaultMTU)
	if err != nil {
		return nil, fmt.Errorf("creating TUN %s for the userspace WireGuard device: %w", name, err)
	}
	got, err := tdev.Name()
	if err != nil {
		_ = tdev.Close()
		return nil, fmt.Errorf("TUN %s: %w", name, err)
	}
	if got != name {
		_ = tdev.Close()
		return nil, fmt.Errorf("TUN was created as %s instead of %s", got, name)
	}
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), deviceLogger(log.WithName("wireguard-go")))
	file, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("opening the UAPI socket of %s in %s: %w", name, UAPIDir, err)
	}
	uapi, err := ipc.UAPIListen(name, file)
	_ = file.Close()
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("listening on the UAPI socket of %s: %w", name, err)
	}
	go func() {
		for {
			c, err := uapi.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	return &userspaceDevice{dev: dev, uapi: uapi, sock: filepath.Join(UAPIDir, name+".sock")}, nil
}

// close stops the device (the TUN goes with it) and removes its UAPI socket.
func (u *userspaceDevice) close() error {
	err := u.uapi.Close()
	u.dev.Close()
	if rerr := os.Remove(u.sock); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

// RunDevice runs a userspace WireGuard device named name — a TUN, wireguard-go and its UAPI
// socket in UAPIDir, with no configuration at all — until ctx ends, then removes it. It is the
// gateway pod's wireguard container: the device lives in a process of its own, so the agent,
// which configures it over the UAPI socket (ModeExternal), can restart without the tunnels
// noticing. It holds no key until the agent configures one, and no API credentials ever.
func RunDevice(ctx context.Context, name string, log logr.Logger) error {
	if err := validInterfaceName(name); err != nil {
		return err
	}
	u, err := startUserspaceDevice(name, log)
	if err != nil {
		return err
	}
	log.Info("userspace WireGuard device running; the agent configures it over its UAPI socket", "interface", name, "socket", u.sock)
	select {
	case <-ctx.Done():
	case <-u.dev.Wait():
	}
	log.Info("stopping the userspace WireGuard device", "interface", name)
	return u.close()
}

// uapiAnswers: a device listens on the UAPI socket (a socket file left by a device that died
// refuses the connection).
func uapiAnswers(sock string) error {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// UAPIAnswers reports whether a userspace device named name listens on its UAPI socket.
func UAPIAnswers(name string) error { return uapiAnswers(filepath.Join(UAPIDir, name+".sock")) }

// openExternal waits until the pod's wireguard container has the device up: a TUN of the name
// and its UAPI socket. It is adopted as it is (keys, peers and their endpoints intact) and never
// deleted by the driver.
func (d *Driver) openExternal(ctx context.Context) error {
	sock := filepath.Join(UAPIDir, d.name+".sock")
	wait := d.opts.ExternalWait
	if wait <= 0 {
		wait = DefaultExternalWait
	}
	deadline := time.Now().Add(wait)
	for {
		link, err := netlink.LinkByName(d.name)
		serr := uapiAnswers(sock)
		switch {
		case err == nil && link.Type() != "tuntap" && link.Type() != "tun":
			return fmt.Errorf("interface %s is not a TUN (type %s): it is not the pod's userspace WireGuard device, refusing to use it", d.name, link.Type())
		case err == nil && serr == nil:
			d.mode = ModeExternal
			d.log.Info("using the userspace WireGuard device of the pod's wireguard container", "socket", sock)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the userspace WireGuard device %s (its TUN and %s) did not appear within %s: is the pod's wireguard container running?", d.name, sock, wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// teardown removes the device (DeleteOnClose, or a failed New).
func (d *Driver) teardown() error {
	if u := d.uspace; u != nil {
		d.uspace = nil
		return u.close()
	}
	if d.mode == ModeKernel {
		link, err := netlink.LinkByName(d.name)
		if err != nil {
			return nil
		}
		return netlink.LinkDel(link)
	}
	return nil
}
