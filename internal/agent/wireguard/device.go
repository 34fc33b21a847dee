package wireguard

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

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
	tdev, err := tun.CreateTUN(d.name, DefaultMTU)
	if err != nil {
		return fmt.Errorf("creating TUN %s for the userspace WireGuard device: %w", d.name, err)
	}
	name, err := tdev.Name()
	if err != nil {
		_ = tdev.Close()
		return fmt.Errorf("TUN %s: %w", d.name, err)
	}
	if name != d.name {
		_ = tdev.Close()
		return fmt.Errorf("TUN was created as %s instead of %s", name, d.name)
	}
	logger := deviceLogger(d.log.WithName("wireguard-go"))
	dev := device.NewDevice(tdev, conn.NewDefaultBind(), logger)
	file, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return fmt.Errorf("opening the UAPI socket of %s in %s: %w", name, UAPIDir, err)
	}
	uapi, err := ipc.UAPIListen(name, file)
	_ = file.Close()
	if err != nil {
		dev.Close()
		return fmt.Errorf("listening on the UAPI socket of %s: %w", name, err)
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
	d.uspace = &userspaceDevice{dev: dev, uapi: uapi, sock: filepath.Join(UAPIDir, name+".sock")}
	d.mode = ModeUserspace
	d.created = true
	d.log.Info("started embedded userspace WireGuard device")
	return nil
}

// teardown removes the device (DeleteOnClose, or a failed New).
func (d *Driver) teardown() error {
	if u := d.uspace; u != nil {
		d.uspace = nil
		err := u.uapi.Close()
		u.dev.Close()
		if rerr := os.Remove(u.sock); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		return err
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
