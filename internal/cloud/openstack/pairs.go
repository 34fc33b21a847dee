package openstack

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
)

// pairOf is the allowed address pair that lets a node's NIC send as the gateway's port: the
// port's fixed IP (exactly, never a range) and MAC.
func pairOf(port ports.Port) (ports.AddressPair, error) {
	if len(port.FixedIPs) == 0 {
		return ports.AddressPair{}, cloud.Transient(nil, "port %s has no fixed IP yet", port.ID)
	}
	return ports.AddressPair{IPAddress: port.FixedIPs[0].IPAddress, MACAddress: port.MACAddress}, nil
}

// networkPorts lists every port of the gateways' network (all pages).
func (o *op) networkPorts(ctx context.Context, opts ports.ListOpts) ([]ports.Port, error) {
	opts.NetworkID = o.p.cfg.NetworkID
	var out []ports.Port
	err := o.call(ctx, func(ctx context.Context) error {
		pages, err := ports.List(o.sc, opts).AllPages(ctx)
		if err != nil {
			return err
		}
		out, err = ports.ExtractPorts(pages)
		return err
	})
	if err != nil {
		return nil, o.fail(err, "listing the ports of network %s", o.p.cfg.NetworkID)
	}
	return out, nil
}

// setPair gives nic the pair and the gateway's security group (with) or takes both away,
// as a compare-and-swap on the port's revision: a concurrent change (412) is retried with the
// port read again. Reports whether it changed anything.
func (o *op) setPair(ctx context.Context, nic ports.Port, pair ports.AddressPair, group string, with bool) (bool, error) {
	pairs := slices.DeleteFunc(slices.Clone(nic.AllowedAddressPairs), func(p ports.AddressPair) bool { return p == pair })
	groups := slices.DeleteFunc(slices.Clone(nic.SecurityGroups), func(g string) bool { return g == group })
	if with {
		pairs, groups = append(pairs, pair), append(groups, group)
	}
	if len(pairs) == len(nic.AllowedAddressPairs) && len(groups) == len(nic.SecurityGroups) {
		return false, nil
	}
	rev := nic.RevisionNumber
	err := o.call(ctx, func(ctx context.Context) error {
		return ports.Update(ctx, o.sc, nic.ID, ports.UpdateOpts{AllowedAddressPairs: &pairs, SecurityGroups: &groups, RevisionNumber: &rev}).Err
	})
	if isStatus(err, 412) {
		return false, cloud.Transient(nil, "port %s changed while its address pairs were updated (retrying)", nic.ID)
	}
	if _, body := statusOf(err); isStatus(err, 409) && strings.Contains(string(body), "PortSecurity") {
		return false, cloud.Terminalf(cloud.ReasonInvalidConfiguration, o.p.cfg.SlowRetry,
			"port %s has port security disabled, so it takes no address pairs or security groups: the port binding none is for such nodes", nic.ID)
	}
	if err != nil {
		return false, o.fail(err, "updating the address pairs of port %s", nic.ID)
	}
	return true, nil
}

// bindPair makes the node's NIC carry the gateway's port (BindingAddressPairs): its address
// pair and security group go on the NIC first, then off every other port of the network.
func (o *op) bindPair(ctx context.Context, port ports.Port, node cloud.Node) (bool, string, error) {
	server, err := serverOf(node)
	if err != nil {
		return false, "", err
	}
	pair, err := pairOf(port)
	if err != nil {
		return false, "", err
	}
	if len(port.SecurityGroups) == 0 {
		return false, "", cloud.Transient(nil, "port %s has no security group yet", port.ID)
	}
	group := port.SecurityGroups[0]
	nics, err := o.networkPorts(ctx, ports.ListOpts{DeviceID: server})
	if err != nil {
		return false, "", err
	}
	if len(nics) == 0 {
		return false, "", cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "node %s (server %s) has no port on network %s", node.Name, server, o.p.cfg.NetworkID)
	}
	nic := nics[0]
	changed, err := o.setPair(ctx, nic, pair, group, true)
	if err != nil {
		return false, "", err
	}
	moved, err := o.unpair(ctx, pair, group, nic.ID)
	if err != nil {
		return false, "", err
	}
	where := fmt.Sprintf("port %s (%s, %s) is an allowed address pair of node %s's port %s, with security group %s", port.ID, pair.IPAddress, pair.MACAddress, node.Name, nic.ID, group)
	if changed || moved {
		log.FromContext(ctx).Info("bound the port to the node's NIC as an address pair", "gateway", o.req.String(), "port", port.ID, "node", node.Name, "nic", nic.ID)
	}
	return changed || moved, where, nil
}

// unpair takes the pair (and the gateway's security group) off every port of the network but
// keep ("" for all).
func (o *op) unpair(ctx context.Context, pair ports.AddressPair, group, keep string) (bool, error) {
	all, err := o.networkPorts(ctx, ports.ListOpts{})
	if err != nil {
		return false, err
	}
	changed := false
	for _, other := range all {
		if other.ID == keep || !slices.Contains(other.AllowedAddressPairs, pair) {
			continue
		}
		did, err := o.setPair(ctx, other, pair, group, false)
		if err != nil {
			return changed, err
		}
		if did {
			changed = true
			log.FromContext(ctx).Info("removed the port's address pair from another port", "gateway", o.req.String(), "from", other.ID)
		}
	}
	return changed, nil
}
