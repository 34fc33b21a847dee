package wireguard

import (
	"context"
	"fmt"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TakeOver re-establishes the tunnels at once when the gateway's standby pod becomes active:
// every peer with a known endpoint is removed and added back with the same configuration, so
// any session it kept from an earlier time as the active pod is gone, and with a persistent
// keepalive, which the kernel and wireguard-go both answer — when a peer's keepalive turns on
// from off — with an immediate keepalive; without a session that is a handshake initiation
// to the endpoint. A peer without a keepalive of its own gets a one-second one for that
// moment, set back to none right after. Peers without an endpoint wait for the site.
func (d *Driver) TakeOver(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.client.Device(d.name)
	if err != nil {
		return fmt.Errorf("reading device %s: %s", d.name, redact(err.Error()))
	}
	defer wipeDevice(dev)
	var remove, add, restore []wgtypes.PeerConfig
	for _, p := range dev.Peers {
		if p.Endpoint == nil {
			continue
		}
		remove = append(remove, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
		keepalive := p.PersistentKeepaliveInterval
		if keepalive == 0 {
			keepalive = time.Second
			none := time.Duration(0)
			restore = append(restore, wgtypes.PeerConfig{PublicKey: p.PublicKey, UpdateOnly: true, PersistentKeepaliveInterval: &none})
		}
		pc := wgtypes.PeerConfig{PublicKey: p.PublicKey, Endpoint: p.Endpoint, ReplaceAllowedIPs: true,
			AllowedIPs: p.AllowedIPs, PersistentKeepaliveInterval: &keepalive}
		if p.PresharedKey != (wgtypes.Key{}) {
			psk := p.PresharedKey
			pc.PresharedKey = &psk
		}
		add = append(add, pc)
	}
	defer func() {
		for i := range add {
			if add[i].PresharedKey != nil {
				clear(add[i].PresharedKey[:])
			}
		}
	}()
	if len(add) == 0 {
		return nil
	}
	for _, step := range [][]wgtypes.PeerConfig{remove, add, restore} {
		if len(step) == 0 {
			continue
		}
		if err := d.client.ConfigureDevice(d.name, wgtypes.Config{Peers: step}); err != nil {
			return fmt.Errorf("re-adding the peers of device %s: %s", d.name, redact(err.Error()))
		}
	}
	d.log.Info("took over: handshakes sent to the peers with a known endpoint", "peers", len(add))
	d.signal()
	return nil
}

// StepDown does nothing: the standby's fence keeps the device's packets in the pod, and
// TakeOver starts every session afresh.
func (d *Driver) StepDown(context.Context) error { return nil }

// Alive reports whether the device answers (the availability's own health check).
func (d *Driver) Alive(context.Context) error {
	dev, err := d.client.Device(d.name)
	if err != nil {
		return fmt.Errorf("device %s: %s", d.name, redact(err.Error()))
	}
	wipeDevice(dev)
	return nil
}
