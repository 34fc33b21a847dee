package openstack

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/trunks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
)

// Port bindings (Config.PortBinding) and what the trunk binding puts in the cloud.
const (
	// BindingTrunk: the gateway's port is a VLAN subport of the trunk whose parent is the
	// NIC of the node the pod runs on (as Kuryr's nested mode binds pod ports). The cloud
	// applies the port's own port security and security group to the pod's frames.
	BindingTrunk = "trunk"
	// BindingAddressPairs: the gateway port's address and MAC are an allowed address pair of
	// the NIC of the node the pod runs on (moved when the pod moves), and the gateway's
	// security group is added to that NIC: the cloud checks the pod's frames, sent through a
	// macvlan on the node's NIC, against the node's port. For clouds or nodes without trunks
	// (or kernels without 802.1Q VLANs).
	BindingAddressPairs = "address-pairs"
	// BindingNone: nothing is bound; the pod sends as the port through the node's NIC, which
	// only a network without port security on the nodes' ports delivers.
	BindingNone = "none"
	// SubportOwner is the device_owner Neutron gives a trunk's subport (its device_id is the
	// trunk's ID).
	SubportOwner = "trunk:subport"
	// TagVLANPrefix + the segmentation ID is the tag recording a gateway port's VLAN: chosen
	// once, kept for the port's life (its NetworkAttachmentDefinition names it).
	TagVLANPrefix = "bnerd-vpn-vlan="
	// MinVLAN and MaxVLAN bound the segmentation IDs gateway ports are given.
	MinVLAN = 100
	MaxVLAN = 4094
)

// vlanOf is the VLAN a port's tags record, 0 when none.
func vlanOf(tags []string) int {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, TagVLANPrefix); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 4094 {
				return n
			}
		}
	}
	return 0
}

// freeVLAN is the lowest VLAN in MinVLAN..MaxVLAN not in used, 0 when all are.
func freeVLAN(used map[int]bool) int {
	for v := MinVLAN; v <= MaxVLAN; v++ {
		if !used[v] {
			return v
		}
	}
	return 0
}

// ensureVLAN gives the port its segmentation ID (BindingTrunk only; 0 otherwise): the one its
// tag records, or else the lowest no other port of the network records. Every gateway port
// gets its own, so any two can share a node's trunk.
func (o *op) ensureVLAN(ctx context.Context, port *ports.Port) (int, error) {
	if o.p.cfg.PortBinding != BindingTrunk {
		return 0, nil
	}
	if v := vlanOf(port.Tags); v != 0 {
		return v, nil
	}
	o.p.vlanMu.Lock()
	defer o.p.vlanMu.Unlock()
	all, err := o.networkPorts(ctx, ports.ListOpts{})
	if err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, p := range all {
		if p.ID != port.ID {
			used[vlanOf(p.Tags)] = true
		}
	}
	v := freeVLAN(used)
	if v == 0 {
		return 0, cloud.Terminalf(cloud.ReasonConflict, o.p.cfg.SlowRetry, "no VLAN left in %d..%d for port %s: every one is another gateway's", MinVLAN, MaxVLAN, port.ID)
	}
	// port.Tags may predate ensurePort's tagging: the gateway's tags are kept with the VLAN's
	want := append(slices.Clone(o.ourTags), TagVLANPrefix+strconv.Itoa(v))
	if err := o.tag(ctx, resPorts, port.ID, port.Tags, want); err != nil {
		return 0, err
	}
	for _, t := range want {
		if !slices.Contains(port.Tags, t) {
			port.Tags = append(port.Tags, t)
		}
	}
	log.FromContext(ctx).Info("chose the port's VLAN", "gateway", o.req.String(), "port", port.ID, "vlan", v)
	return v, nil
}

// serverOf is the Nova server ID in a node's providerID ("openstack:///<id>" or
// "openstack://<region>/<id>").
func serverOf(node cloud.Node) (string, error) {
	rest, ok := strings.CutPrefix(node.ProviderID, "openstack://")
	id := rest[strings.LastIndex(rest, "/")+1:]
	if !ok || id == "" {
		return "", cloud.Terminalf(cloud.ReasonNotFound, 0,
			"node %s has no OpenStack server ID in spec.providerID (%q): the gateway's port is bound to the trunk of the node's server, found by that ID", node.Name, node.ProviderID)
	}
	return id, nil
}

// nodeTrunk finds the trunk whose parent is a port of the node's server on the gateways'
// network.
func (o *op) nodeTrunk(ctx context.Context, node cloud.Node) (*trunks.Trunk, error) {
	server, err := serverOf(node)
	if err != nil {
		return nil, err
	}
	nics, err := o.networkPorts(ctx, ports.ListOpts{DeviceID: server})
	if err != nil {
		return nil, err
	}
	if len(nics) == 0 {
		return nil, cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "node %s (server %s) has no port on network %s", node.Name, server, o.p.cfg.NetworkID)
	}
	var ids []string
	for _, nic := range nics {
		ids = append(ids, nic.ID)
		var list []trunks.Trunk
		err := o.call(ctx, func(ctx context.Context) error {
			pages, err := trunks.List(o.sc, trunks.ListOpts{PortID: nic.ID}).AllPages(ctx)
			if err != nil {
				return err
			}
			list, err = trunks.ExtractTrunks(pages)
			return err
		})
		if isStatus(err, 404) {
			return nil, cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "the cloud has no trunk extension (listing trunks: HTTP 404): the trunk port binding needs it")
		}
		if err != nil {
			return nil, o.fail(err, "listing the trunk of port %s (node %s)", nic.ID, node.Name)
		}
		if len(list) > 0 {
			return &list[0], nil
		}
	}
	return nil, cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry,
		"node %s: its port %s on network %s is no trunk's parent: boot the node's server with a trunk port there", node.Name, strings.Join(ids, ", "), o.p.cfg.NetworkID)
}

// unbind takes the port off the trunk it is a subport of, if any.
func (o *op) unbind(ctx context.Context, port ports.Port) error {
	if port.DeviceOwner != SubportOwner || port.DeviceID == "" {
		return nil
	}
	opts := trunks.RemoveSubportsOpts{Subports: []trunks.RemoveSubport{{PortID: port.ID}}}
	err := o.call(ctx, func(ctx context.Context) error { return trunks.RemoveSubports(ctx, o.sc, port.DeviceID, opts).Err })
	if isStatus(err, 404) { // the trunk, or the subport on it, is gone already
		return nil
	}
	if err != nil {
		return o.fail(err, "removing port %s from trunk %s", port.ID, port.DeviceID)
	}
	log.FromContext(ctx).Info("removed the port from its trunk", "gateway", o.req.String(), "port", port.ID, "trunk", port.DeviceID)
	return nil
}

// BindUplink implements cloud.UplinkBinder: with BindingTrunk, the gateway's port becomes the
// subport (its VLAN) of the trunk of the node's server, taken off any other trunk first, so
// no other node's NIC carries it any more; with BindingAddressPairs, the node's NIC gets the
// port's address pair (and the gateway's security group), every other NIC loses it. Nothing
// to do with BindingNone.
func (p *Provider) BindUplink(ctx context.Context, req cloud.Request, node cloud.Node) (bool, string, error) {
	if p.cfg.PortBinding == BindingNone {
		return false, "", nil
	}
	sc, err := p.network(ctx)
	if err != nil {
		return false, "", err
	}
	o := p.op(sc, req)
	list, err := o.listPorts(ctx)
	if err != nil {
		return false, "", err
	}
	if len(list) == 0 {
		return false, "", cloud.Transient(nil, "gateway %s has no port yet (its endpoint is being provisioned)", req)
	}
	if p.cfg.PortBinding == BindingAddressPairs {
		return o.bindPair(ctx, list[0], node)
	}
	return o.bindTrunk(ctx, list[0], node)
}

// bindTrunk makes port the subport of the node's trunk (BindingTrunk).
func (o *op) bindTrunk(ctx context.Context, port ports.Port, node cloud.Node) (bool, string, error) {
	vlan := vlanOf(port.Tags)
	if vlan == 0 {
		return false, "", cloud.Transient(nil, "port %s has no VLAN yet (its endpoint is being provisioned)", port.ID)
	}
	trunk, err := o.nodeTrunk(ctx, node)
	if err != nil {
		return false, "", err
	}
	where := fmt.Sprintf("port %s is VLAN %d on trunk %s of node %s (its port %s)", port.ID, vlan, trunk.ID, node.Name, trunk.PortID)
	if port.DeviceOwner == SubportOwner && port.DeviceID == trunk.ID &&
		slices.ContainsFunc(trunk.Subports, func(s trunks.Subport) bool { return s.PortID == port.ID && s.SegmentationID == vlan }) {
		return false, where, nil
	}
	if err := o.unbind(ctx, port); err != nil {
		return false, "", err
	}
	opts := trunks.AddSubportsOpts{Subports: []trunks.Subport{{PortID: port.ID, SegmentationType: "vlan", SegmentationID: vlan}}}
	err = o.call(ctx, func(ctx context.Context) error { return trunks.AddSubports(ctx, o.sc, trunk.ID, opts).Err })
	if isStatus(err, 409) {
		if _, body := statusOf(err); strings.Contains(string(body), "DuplicateSubPort") {
			return false, "", cloud.Terminalf(cloud.ReasonConflict, o.p.cfg.SlowRetry,
				"VLAN %d of port %s is taken on trunk %s of node %s by another subport", vlan, port.ID, trunk.ID, node.Name)
		}
	}
	if err != nil {
		return false, "", o.fail(err, "adding port %s to trunk %s of node %s", port.ID, trunk.ID, node.Name)
	}
	log.FromContext(ctx).Info("bound the port to the node's trunk", "gateway", o.req.String(), "port", port.ID, "vlan", vlan, "trunk", trunk.ID, "node", node.Name)
	return true, where, nil
}

// ResyncPeriod is how often a ready endpoint (and a bound uplink) is checked against the
// cloud again (Config.CacheTTL); 0 when never.
func (p *Provider) ResyncPeriod() time.Duration { return max(p.cfg.CacheTTL, 0) }

var _ cloud.UplinkBinder = (*Provider)(nil)
