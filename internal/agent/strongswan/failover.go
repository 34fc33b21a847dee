package strongswan

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/strongswan/govici/vici"
)

// TakeOver re-establishes the tunnels at once when the gateway's standby pod becomes active:
// every loaded connection with a concrete remote address and no tunnel up has what is left of
// its IKE_SAs terminated — negotiations charon kept retrying while the fence dropped them —
// and each of its children initiated. A connection whose remote is %any (a site behind a NAT
// or with a changing address) waits for the site to initiate: VICI initiates only toward a
// connection's configured remote addresses.
func (d *Driver) TakeOver(ctx context.Context) error {
	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	d.mu.Lock()
	conns := slices.Clone(d.conns)
	loaded := maps.Clone(d.loadedConns)
	d.mu.Unlock()
	sas, err := d.listSAs(ctx)
	if err != nil {
		return err
	}
	started := 0
	for _, c := range conns {
		if _, ok := loaded[c.Name]; !ok || !initiator(c) {
			continue
		}
		if slices.ContainsFunc(sas[c.Name], ikeSA.up) {
			continue
		}
		for _, sa := range sas[c.Name] {
			d.terminateIKE(ctx, c.Name, sa.UniqueID)
		}
		d.startChildren(ctx, c, startedChildren(c))
		started++
	}
	d.log.Info("took over: connections initiated", "connections", started)
	d.signal()
	return nil
}

// StepDown terminates every IKE_SA without waiting for the peer: the caller has fenced the
// pod, so no DELETE reaches a site, whose SAs now belong to the active pod.
func (d *Driver) StepDown(ctx context.Context) error {
	sas, err := d.listSAs(ctx)
	if err != nil {
		return err
	}
	n := 0
	for conn, list := range sas {
		for _, sa := range list {
			d.terminateIKE(ctx, conn, sa.UniqueID)
			n++
		}
	}
	d.log.Info("stepped down: IKE_SAs terminated behind the fence", "ikeSAs", n)
	d.signal()
	return nil
}

// Alive reports whether charon answers on VICI (the availability's own health check).
func (d *Driver) Alive(ctx context.Context) error {
	if _, err := d.call(ctx, "version", nil); err != nil {
		return fmt.Errorf("charon does not answer: %w", err)
	}
	return nil
}

func (d *Driver) listSAs(ctx context.Context) (map[string][]ikeSA, error) {
	in := vici.NewMessage()
	_ = in.Set("noblock", "yes")
	events, err := d.collect(ctx, "list-sas", "list-sa", in)
	if err != nil {
		return nil, err
	}
	return parseSAs(events)
}

// terminateIKE ends one IKE_SA at once: force, without waiting for the peer's answer.
func (d *Driver) terminateIKE(ctx context.Context, conn, id string) {
	t := vici.NewMessage()
	_ = t.Set("ike-id", id)
	_ = t.Set("force", "yes")
	_ = t.Set("timeout", "-1")
	if _, err := d.call(ctx, "terminate", t); err != nil {
		d.log.V(1).Info("terminating an IKE_SA", "connection", conn, "ike-id", id, "error", err.Error())
	}
}
