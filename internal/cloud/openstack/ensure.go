package openstack

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/attributestags"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/external"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/groups"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/security/rules"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/networks"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/subnets"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Neutron resource types in tag URLs.
const (
	resGroups = "security-groups"
	resPorts  = "ports"
	resFIPs   = "floatingips"
)

// op is one Ensure or Delete of one gateway.
type op struct {
	p   *Provider
	sc  *gophercloud.ServiceClient
	req cloud.Request

	name     string   // NamePrefix + UID
	tagGW    string   // TagGatewayPrefix + UID
	ourTags  []string // tagGW and the owner tag
	allOwned []string // ourTags and TagPinned: what Delete removes from a pinned floating IP
	// keepAddress (HandOver): no floating IP is released, every one is only disassociated and
	// untagged, for another gateway to adopt.
	keepAddress bool
}

func (p *Provider) op(sc *gophercloud.ServiceClient, req cloud.Request) *op {
	owner := TagOwnerPrefix + req.Namespace + "/" + req.Name
	if len(owner) > maxTag {
		owner = owner[:maxTag]
	}
	o := &op{p: p, sc: sc, req: req, name: NamePrefix + string(req.UID), tagGW: TagGatewayPrefix + string(req.UID)}
	o.ourTags = []string{o.tagGW, owner}
	o.allOwned = append(slices.Clone(o.ourTags), TagPinned)
	return o
}

// call runs one API call with the per-call timeout.
func (o *op) call(ctx context.Context, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, o.p.cfg.CallTimeout)
	defer cancel()
	return f(cctx)
}

func (o *op) fail(err error, format string, args ...any) *cloud.Error {
	return o.p.classify(err, fmt.Sprintf(format, args...))
}

// network is a Neutron network with its router:external flag.
type network struct {
	networks.Network
	external.NetworkExternalExt
}

// --- Ensure ---

func (o *op) ensure(ctx context.Context) (cloud.Result, error) {
	req := o.req
	// What the address comes from is checked before anything is created.
	var extNet string
	var pinned *floatingips.FloatingIP
	var err error
	if req.Endpoint.Kind == model.EndpointFloatingIPPool {
		if extNet, err = o.externalNetwork(ctx, req.Endpoint.FloatingIPPool); err != nil {
			return cloud.Result{}, err
		}
	} else {
		if pinned, err = o.pinnedFIP(ctx, req.Endpoint.FloatingIP.String()); err != nil {
			return cloud.Result{}, err
		}
	}

	groupList, err := o.listGroups(ctx)
	if err != nil {
		return cloud.Result{}, err
	}
	portList, err := o.listPorts(ctx)
	if err != nil {
		return cloud.Result{}, err
	}
	if pinned != nil && pinned.PortID != "" && !slices.ContainsFunc(portList, func(p ports.Port) bool { return p.ID == pinned.PortID }) {
		return cloud.Result{}, cloud.Terminalf(cloud.ReasonConflict, o.p.cfg.CutoverRetry,
			"floating IP %s is associated with port %s, which is not this gateway's: disassociate it (e.g. from the VM being migrated) first; checked again every few seconds",
			pinned.FloatingIP, pinned.PortID)
	}

	sg, err := o.ensureGroup(ctx, groupList)
	if err != nil {
		return cloud.Result{}, err
	}
	port, err := o.ensurePort(ctx, portList, sg.ID)
	if err != nil {
		return cloud.Result{}, err
	}
	vlan, err := o.ensureVLAN(ctx, port)
	if err != nil {
		return cloud.Result{}, err
	}
	fip, err := o.ensureFIP(ctx, extNet, pinned, port)
	if err != nil {
		return cloud.Result{}, err
	}
	// Duplicates left by lost create responses go once the keepers are in place.
	for _, extra := range portList {
		if extra.ID != port.ID {
			if err := o.deletePort(ctx, extra); err != nil {
				return cloud.Result{}, err
			}
		}
	}
	for _, extra := range groupList {
		if extra.ID != sg.ID {
			if err := o.deleteGroup(ctx, extra.ID); err != nil {
				return cloud.Result{}, err
			}
		}
	}
	att, err := o.attachment(ctx, port, vlan)
	if err != nil {
		return cloud.Result{}, err
	}
	how := "allocated from " + req.Endpoint.FloatingIPPool
	if pinned != nil {
		how = "pinned"
	}
	return cloud.Result{
		PublicAddress: fip.FloatingIP,
		Ready:         true,
		Reason:        cloud.ReasonReady,
		Message:       fmt.Sprintf("floating IP %s (%s) on port %s (%s)", fip.FloatingIP, how, port.ID, att.FixedIP),
		Pod:           cloud.PodNetwork{NetworkAttachment: att},
	}, nil
}

// externalNetwork resolves the pool (ID or name) to an external network's ID.
func (o *op) externalNetwork(ctx context.Context, pool string) (string, error) {
	var n network
	err := o.call(ctx, func(ctx context.Context) error { return networks.Get(ctx, o.sc, pool).ExtractInto(&n) })
	if isStatus(err, 404) {
		var list []network
		err = o.call(ctx, func(ctx context.Context) error {
			pages, err := networks.List(o.sc, networks.ListOpts{Name: pool}).AllPages(ctx)
			if err != nil {
				return err
			}
			return networks.ExtractNetworksInto(pages, &list)
		})
		if err != nil {
			return "", o.fail(err, "looking up external network %q", pool)
		}
		list = slices.DeleteFunc(list, func(n network) bool { return !n.External })
		switch len(list) {
		case 0:
			return "", cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "floatingIPPool %q: no external network with that ID or name", pool)
		case 1:
			return list[0].ID, nil
		default:
			return "", cloud.Terminalf(cloud.ReasonConflict, o.p.cfg.SlowRetry, "floatingIPPool %q: %d external networks have that name; use the network's ID", pool, len(list))
		}
	}
	if err != nil {
		return "", o.fail(err, "looking up external network %q", pool)
	}
	if !n.External {
		return "", cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "floatingIPPool %q: network %s is not an external network", pool, n.ID)
	}
	return n.ID, nil
}

// pinnedFIP finds the floating IP to adopt; it must exist and belong to no other gateway.
func (o *op) pinnedFIP(ctx context.Context, addr string) (*floatingips.FloatingIP, error) {
	list, err := o.listFIPs(ctx, floatingips.ListOpts{FloatingIP: addr})
	if err != nil {
		return nil, o.fail(err, "looking up floating IP %s", addr)
	}
	if len(list) == 0 {
		return nil, cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "floating IP %s does not exist in the project", addr)
	}
	f := list[0]
	for _, t := range f.Tags {
		if strings.HasPrefix(t, TagGatewayPrefix) && t != o.tagGW {
			// a cutover (a migrated gateway hands it over any moment): rechecked in seconds
			return nil, cloud.Terminalf(cloud.ReasonConflict, o.p.cfg.CutoverRetry,
				"floating IP %s belongs to another gateway (tag %q)", addr, t)
		}
	}
	return &f, nil
}

// --- listing ---

func (o *op) listFIPs(ctx context.Context, opts floatingips.ListOpts) ([]floatingips.FloatingIP, error) {
	var out []floatingips.FloatingIP
	err := o.call(ctx, func(ctx context.Context) error {
		pages, err := floatingips.List(o.sc, opts).AllPages(ctx)
		if err != nil {
			return err
		}
		out, err = floatingips.ExtractFloatingIPs(pages)
		return err
	})
	return out, err
}

// listGroups finds the gateway's security groups by tag and by name (one created but not yet
// tagged when the operator crashed, or a duplicate whose create response was lost), the one
// to keep first.
func (o *op) listGroups(ctx context.Context) ([]groups.SecGroup, error) {
	get := func(opts groups.ListOpts) ([]groups.SecGroup, error) {
		var out []groups.SecGroup
		err := o.call(ctx, func(ctx context.Context) error {
			pages, err := groups.List(o.sc, opts).AllPages(ctx)
			if err != nil {
				return err
			}
			out, err = groups.ExtractGroups(pages)
			return err
		})
		return out, err
	}
	list, err := get(groups.ListOpts{Tags: o.tagGW})
	if err != nil {
		return nil, o.fail(err, "listing security groups")
	}
	byName, err := get(groups.ListOpts{Name: o.name})
	if err != nil {
		return nil, o.fail(err, "listing security groups")
	}
	list = unionBy(list, byName, func(g groups.SecGroup) string { return g.ID })
	sort.SliceStable(list, func(i, j int) bool {
		return o.before(list[i].Tags, list[i].CreatedAt, list[i].ID, list[j].Tags, list[j].CreatedAt, list[j].ID)
	})
	return list, nil
}

// listPorts finds the gateway's ports like listGroups.
func (o *op) listPorts(ctx context.Context) ([]ports.Port, error) {
	get := func(opts ports.ListOpts) ([]ports.Port, error) {
		var out []ports.Port
		err := o.call(ctx, func(ctx context.Context) error {
			pages, err := ports.List(o.sc, opts).AllPages(ctx)
			if err != nil {
				return err
			}
			out, err = ports.ExtractPorts(pages)
			return err
		})
		return out, err
	}
	list, err := get(ports.ListOpts{Tags: o.tagGW})
	if err != nil {
		return nil, o.fail(err, "listing ports")
	}
	byName, err := get(ports.ListOpts{Name: o.name})
	if err != nil {
		return nil, o.fail(err, "listing ports")
	}
	list = unionBy(list, byName, func(p ports.Port) string { return p.ID })
	sort.SliceStable(list, func(i, j int) bool {
		return o.before(list[i].Tags, list[i].CreatedAt, list[i].ID, list[j].Tags, list[j].CreatedAt, list[j].ID)
	})
	return list, nil
}

// ourFIPs finds the floating IPs tagged for the gateway and those described as allocated for
// it (tagging may not have happened yet).
func (o *op) ourFIPs(ctx context.Context) ([]floatingips.FloatingIP, error) {
	list, err := o.listFIPs(ctx, floatingips.ListOpts{Tags: o.tagGW})
	if err != nil {
		return nil, o.fail(err, "listing floating IPs")
	}
	byDesc, err := o.listFIPs(ctx, floatingips.ListOpts{Description: o.name})
	if err != nil {
		return nil, o.fail(err, "listing floating IPs")
	}
	list = unionBy(list, byDesc, func(f floatingips.FloatingIP) string { return f.ID })
	sort.SliceStable(list, func(i, j int) bool {
		return o.before(list[i].Tags, list[i].CreatedAt, list[i].ID, list[j].Tags, list[j].CreatedAt, list[j].ID)
	})
	return list, nil
}

// before orders duplicates so the first is the one to keep: tagged (it went through a whole
// Ensure; an untagged twin is a create whose answer was lost) before untagged, then oldest,
// then by ID — the same order on every call.
func (o *op) before(tags1 []string, at1 time.Time, id1 string, tags2 []string, at2 time.Time, id2 string) bool {
	if t1, t2 := slices.Contains(tags1, o.tagGW), slices.Contains(tags2, o.tagGW); t1 != t2 {
		return t1
	}
	if !at1.Equal(at2) {
		return at1.Before(at2)
	}
	return id1 < id2
}

func unionBy[T any](a, b []T, id func(T) string) []T {
	out := slices.Clone(a)
	for _, x := range b {
		if !slices.ContainsFunc(out, func(y T) bool { return id(y) == id(x) }) {
			out = append(out, x)
		}
	}
	return out
}

// --- tags ---

// tag makes sure the resource carries want (keeping its other tags); have is what it has.
func (o *op) tag(ctx context.Context, resource, id string, have, want []string) error {
	merged := slices.Clone(have)
	for _, t := range want {
		if !slices.Contains(merged, t) {
			merged = append(merged, t)
		}
	}
	if len(merged) == len(have) {
		return nil
	}
	return o.replaceTags(ctx, resource, id, merged)
}

// untag removes drop from the resource's tags.
func (o *op) untag(ctx context.Context, resource, id string, have, drop []string) error {
	kept := slices.DeleteFunc(slices.Clone(have), func(t string) bool { return slices.Contains(drop, t) })
	if len(kept) == len(have) {
		return nil
	}
	return o.replaceTags(ctx, resource, id, kept)
}

func (o *op) replaceTags(ctx context.Context, resource, id string, tags []string) error {
	if tags == nil {
		tags = []string{}
	}
	err := o.call(ctx, func(ctx context.Context) error {
		return attributestags.ReplaceAll(ctx, o.sc, resource, id, attributestags.ReplaceAllOpts{Tags: tags}).Err
	})
	if err != nil {
		return o.fail(err, "tagging %s %s", strings.TrimSuffix(resource, "s"), id)
	}
	return nil
}

// --- security group ---

// ruleKey identifies an ingress rule by what it admits.
type ruleKey struct {
	etherType, protocol string
	min, max            int
	remote              string
}

func keyOf(r rules.SecGroupRule) (ruleKey, bool) {
	if r.Direction != "ingress" || r.RemoteGroupID != "" || r.RemoteAddressGroupID != "" {
		return ruleKey{}, false
	}
	proto := strings.ToLower(r.Protocol)
	switch proto {
	case "50":
		proto = "esp"
	case "17":
		proto = "udp"
	}
	remote := r.RemoteIPPrefix
	if remote == "" {
		remote = map[string]string{"IPv4": "0.0.0.0/0", "IPv6": "::/0"}[r.EtherType]
	} else if p, err := netip.ParsePrefix(remote); err == nil {
		remote = p.Masked().String()
	}
	return ruleKey{etherType: r.EtherType, protocol: proto, min: r.PortRangeMin, max: r.PortRangeMax, remote: remote}, true
}

// wantRules are the ingress rules the gateway's group must hold, in a stable order.
func (o *op) wantRules() []ruleKey {
	sources := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	if len(o.req.PeerAddresses) > 0 {
		sources = nil
		for _, a := range o.req.PeerAddresses {
			a = a.Unmap()
			p := netip.PrefixFrom(a, a.BitLen())
			if !slices.Contains(sources, p) {
				sources = append(sources, p)
			}
		}
		slices.SortFunc(sources, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	}
	var out []ruleKey
	for _, src := range sources {
		et := "IPv4"
		if src.Addr().Is6() {
			et = "IPv6"
		}
		for _, port := range cloud.TunnelPorts(o.req.Protocol, o.req.WireGuardPort) {
			out = append(out, ruleKey{etherType: et, protocol: port.Protocol, min: int(port.Port), max: int(port.Port), remote: src.String()})
		}
		if o.req.Protocol == model.ProtocolIPsec {
			out = append(out, ruleKey{etherType: et, protocol: "esp", remote: src.String()})
		}
	}
	return out
}

func (o *op) ensureGroup(ctx context.Context, list []groups.SecGroup) (*groups.SecGroup, error) {
	var sg *groups.SecGroup
	if len(list) > 0 {
		sg = &list[0]
	} else {
		var created *groups.SecGroup
		err := o.call(ctx, func(ctx context.Context) error {
			var err error
			created, err = groups.Create(ctx, o.sc, groups.CreateOpts{
				Name:        o.name,
				Description: fmt.Sprintf("bnerd-vpn gateway %s: tunnel ports only", o.req),
			}).Extract()
			return err
		})
		if err != nil {
			return nil, o.fail(err, "creating security group %s", o.name)
		}
		log.FromContext(ctx).Info("created security group", "gateway", o.req.String(), "securityGroup", created.ID)
		sg = created
	}
	if err := o.tag(ctx, resGroups, sg.ID, sg.Tags, o.ourTags); err != nil {
		return nil, err
	}

	want := o.wantRules()
	have := map[ruleKey]bool{}
	var extra []string
	for _, r := range sg.Rules {
		k, ok := keyOf(r)
		if r.Direction != "ingress" {
			continue
		}
		if !ok || !slices.Contains(want, k) || have[k] {
			extra = append(extra, r.ID)
			continue
		}
		have[k] = true
	}
	var create []rules.CreateOpts
	for _, k := range want {
		if have[k] {
			continue
		}
		c := rules.CreateOpts{
			Direction: rules.DirIngress, EtherType: rules.RuleEtherType(k.etherType), SecGroupID: sg.ID,
			Protocol: rules.RuleProtocol(k.protocol), RemoteIPPrefix: k.remote,
			Description: "bnerd-vpn " + k.protocol,
		}
		if k.min != 0 {
			c.PortRangeMin, c.PortRangeMax = k.min, k.max
			c.Description += " " + strconv.Itoa(k.min)
		}
		create = append(create, c)
	}
	if len(create) > 0 {
		err := o.call(ctx, func(ctx context.Context) error { return rules.CreateBulk(ctx, o.sc, create).Err })
		if err != nil {
			return nil, o.fail(err, "adding %d rules to security group %s", len(create), sg.ID)
		}
	}
	for _, id := range extra {
		err := o.call(ctx, func(ctx context.Context) error { return rules.Delete(ctx, o.sc, id).ExtractErr() })
		if err != nil && !isStatus(err, 404) {
			return nil, o.fail(err, "removing rule %s from security group %s", id, sg.ID)
		}
	}
	return sg, nil
}

// --- port ---

func (o *op) ensurePort(ctx context.Context, list []ports.Port, groupID string) (*ports.Port, error) {
	var port *ports.Port
	for i := range list {
		p := &list[i]
		if p.NetworkID != o.p.cfg.NetworkID {
			continue
		}
		if o.p.cfg.SubnetID != "" && !slices.ContainsFunc(p.FixedIPs, func(ip ports.IP) bool { return ip.SubnetID == o.p.cfg.SubnetID }) {
			continue
		}
		port = p
		break
	}
	if port == nil {
		opts := ports.CreateOpts{
			NetworkID:      o.p.cfg.NetworkID,
			Name:           o.name,
			Description:    fmt.Sprintf("bnerd-vpn gateway %s", o.req),
			SecurityGroups: &[]string{groupID},
		}
		if o.p.cfg.SubnetID != "" {
			opts.FixedIPs = []ports.IP{{SubnetID: o.p.cfg.SubnetID}}
		}
		var created *ports.Port
		err := o.call(ctx, func(ctx context.Context) error {
			var err error
			created, err = ports.Create(ctx, o.sc, opts).Extract()
			return err
		})
		if isStatus(err, 404) {
			return nil, cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "creating port: network %s (or subnet %q) does not exist", o.p.cfg.NetworkID, o.p.cfg.SubnetID)
		}
		if err != nil {
			return nil, o.fail(err, "creating port on network %s", o.p.cfg.NetworkID)
		}
		log.FromContext(ctx).Info("created port", "gateway", o.req.String(), "port", created.ID)
		port = created
	}
	if err := o.tag(ctx, resPorts, port.ID, port.Tags, o.ourTags); err != nil {
		return nil, err
	}
	if len(port.SecurityGroups) != 1 || port.SecurityGroups[0] != groupID {
		var updated *ports.Port
		err := o.call(ctx, func(ctx context.Context) error {
			var err error
			updated, err = ports.Update(ctx, o.sc, port.ID, ports.UpdateOpts{SecurityGroups: &[]string{groupID}}).Extract()
			return err
		})
		if err != nil {
			return nil, o.fail(err, "setting the security group of port %s", port.ID)
		}
		port = updated
	}
	if len(port.FixedIPs) == 0 {
		return nil, cloud.Transient(nil, "port %s has no fixed IP yet (retrying)", port.ID)
	}
	return port, nil
}

// --- floating IP ---

// allocatedByUs: only a floating IP the operator provably allocated for this gateway is
// ever released — described with the gateway's name, and not pinned.
func (o *op) allocatedByUs(f floatingips.FloatingIP) bool {
	return f.Description == o.name && !slices.Contains(f.Tags, TagPinned)
}

func (o *op) ensureFIP(ctx context.Context, extNet string, pinned *floatingips.FloatingIP, port *ports.Port) (*floatingips.FloatingIP, error) {
	list, err := o.ourFIPs(ctx)
	if err != nil {
		return nil, err
	}
	var keep *floatingips.FloatingIP
	if pinned != nil {
		keep = pinned
	} else {
		// Prefer the one already on the port, then the oldest.
		for i := range list {
			f := &list[i]
			if !o.allocatedByUs(*f) || f.FloatingNetworkID != extNet {
				continue
			}
			if keep == nil || (f.PortID == port.ID && keep.PortID != port.ID) {
				keep = f
			}
		}
	}
	// Everything else of ours goes first, so the port is free for the keeper: allocated
	// duplicates (or from an earlier pool) are released, an earlier pinned address unpinned.
	for _, f := range list {
		if keep != nil && f.ID == keep.ID {
			continue
		}
		if err := o.releaseOrUnpin(ctx, f, []string{port.ID}); err != nil {
			return nil, err
		}
	}
	if keep == nil {
		var created *floatingips.FloatingIP
		err := o.call(ctx, func(ctx context.Context) error {
			var err error
			created, err = floatingips.Create(ctx, o.sc, floatingips.CreateOpts{
				FloatingNetworkID: extNet, PortID: port.ID, Description: o.name,
			}).Extract()
			return err
		})
		if isStatus(err, 404) {
			return nil, cloud.Terminalf(cloud.ReasonNotFound, o.p.cfg.SlowRetry, "allocating a floating IP: external network %s not found", extNet)
		}
		if err != nil {
			return nil, o.fail(err, "allocating a floating IP on external network %s", extNet)
		}
		log.FromContext(ctx).Info("allocated floating IP", "gateway", o.req.String(), "floatingIP", created.FloatingIP, "id", created.ID)
		keep = created
	}
	want := o.ourTags
	if pinned != nil {
		want = o.allOwned
	}
	if err := o.tag(ctx, resFIPs, keep.ID, keep.Tags, want); err != nil {
		return nil, err
	}
	if keep.PortID != port.ID {
		var updated *floatingips.FloatingIP
		err := o.call(ctx, func(ctx context.Context) error {
			var err error
			updated, err = floatingips.Update(ctx, o.sc, keep.ID, floatingips.UpdateOpts{PortID: &port.ID}).Extract()
			return err
		})
		if isStatus(err, 409) && !isQuota(err) {
			return nil, cloud.Terminalf(cloud.ReasonConflict, o.p.cfg.CutoverRetry, "associating floating IP %s with port %s: %s", keep.FloatingIP, port.ID, o.fail(err, "associating").Message)
		}
		if err != nil {
			return nil, o.fail(err, "associating floating IP %s with port %s", keep.FloatingIP, port.ID)
		}
		log.FromContext(ctx).Info("associated floating IP", "gateway", o.req.String(), "floatingIP", keep.FloatingIP, "port", port.ID)
		keep = updated
	}
	return keep, nil
}

// releaseOrUnpin releases a floating IP the operator allocated for the gateway; any other
// (pinned) one is disassociated if it sits on one of ourPorts, and loses the operator's tags.
func (o *op) releaseOrUnpin(ctx context.Context, f floatingips.FloatingIP, ourPorts []string) error {
	if o.allocatedByUs(f) && !o.keepAddress {
		err := o.call(ctx, func(ctx context.Context) error { return floatingips.Delete(ctx, o.sc, f.ID).ExtractErr() })
		if err != nil && !isStatus(err, 404) {
			return o.fail(err, "releasing floating IP %s", f.FloatingIP)
		}
		log.FromContext(ctx).Info("released floating IP", "gateway", o.req.String(), "floatingIP", f.FloatingIP, "id", f.ID)
		return nil
	}
	if f.PortID != "" && slices.Contains(ourPorts, f.PortID) {
		empty := ""
		err := o.call(ctx, func(ctx context.Context) error {
			return floatingips.Update(ctx, o.sc, f.ID, floatingips.UpdateOpts{PortID: &empty}).Err
		})
		if isStatus(err, 404) {
			return nil
		}
		if err != nil {
			return o.fail(err, "disassociating pinned floating IP %s", f.FloatingIP)
		}
		log.FromContext(ctx).Info("disassociated pinned floating IP (kept allocated)", "gateway", o.req.String(), "floatingIP", f.FloatingIP)
	}
	err := o.untag(ctx, resFIPs, f.ID, f.Tags, o.allOwned)
	if isStatus(err, 404) {
		return nil
	}
	return err
}

// --- network attachment ---

func (o *op) attachment(ctx context.Context, port *ports.Port, vlan int) (*cloud.NetworkAttachment, error) {
	ip := port.FixedIPs[0]
	if o.p.cfg.SubnetID != "" {
		for _, x := range port.FixedIPs {
			if x.SubnetID == o.p.cfg.SubnetID {
				ip = x
				break
			}
		}
	}
	var sub *subnets.Subnet
	err := o.call(ctx, func(ctx context.Context) error {
		var err error
		sub, err = subnets.Get(ctx, o.sc, ip.SubnetID).Extract()
		return err
	})
	if err != nil {
		return nil, o.fail(err, "reading subnet %s of port %s", ip.SubnetID, port.ID)
	}
	return o.p.renderAttachment(o.req, port.ID, port.MACAddress, ip.IPAddress, vlan, sub)
}

// --- Delete ---

func (o *op) delete(ctx context.Context) error {
	groupList, err := o.listGroups(ctx)
	if err != nil {
		return err
	}
	portList, err := o.listPorts(ctx)
	if err != nil {
		return err
	}
	var portIDs []string
	for _, p := range portList {
		portIDs = append(portIDs, p.ID)
	}
	fips, err := o.ourFIPs(ctx)
	if err != nil {
		return err
	}
	if o.req.Endpoint.Kind == model.EndpointFloatingIP && o.req.Endpoint.FloatingIP.IsValid() {
		// The pinned address, in case it was associated but never tagged.
		byAddr, err := o.listFIPs(ctx, floatingips.ListOpts{FloatingIP: o.req.Endpoint.FloatingIP.String()})
		if err != nil {
			return o.fail(err, "looking up floating IP %s", o.req.Endpoint.FloatingIP)
		}
		for _, f := range byAddr {
			if f.PortID != "" && slices.Contains(portIDs, f.PortID) {
				fips = unionBy(fips, []floatingips.FloatingIP{f}, func(f floatingips.FloatingIP) string { return f.ID })
			}
		}
	}
	for _, f := range fips {
		if err := o.releaseOrUnpin(ctx, f, portIDs); err != nil {
			return err
		}
	}
	for _, p := range portList {
		if err := o.deletePort(ctx, p); err != nil {
			return err
		}
	}
	for _, g := range groupList {
		if err := o.deleteGroup(ctx, g.ID); err != nil {
			return err
		}
	}
	return nil
}

// deletePort deletes a port of the gateway, taking it off its trunk first (Neutron refuses
// to delete a subport) and its address pair off any NIC.
func (o *op) deletePort(ctx context.Context, port ports.Port) error {
	if err := o.unbind(ctx, port); err != nil {
		return err
	}
	if o.p.cfg.PortBinding == BindingAddressPairs && len(port.SecurityGroups) > 0 {
		if pair, err := pairOf(port); err == nil {
			if _, err := o.unpair(ctx, pair, port.SecurityGroups[0], ""); err != nil {
				return err
			}
		}
	}
	id := port.ID
	err := o.call(ctx, func(ctx context.Context) error { return ports.Delete(ctx, o.sc, id).ExtractErr() })
	if err != nil && !isStatus(err, 404) {
		return o.fail(err, "deleting port %s", id)
	}
	if err == nil {
		log.FromContext(ctx).Info("deleted port", "gateway", o.req.String(), "port", id)
	}
	return nil
}

func (o *op) deleteGroup(ctx context.Context, id string) error {
	err := o.call(ctx, func(ctx context.Context) error { return groups.Delete(ctx, o.sc, id).ExtractErr() })
	if err != nil && !isStatus(err, 404) {
		// 409: still in use by a port being deleted; retried.
		return o.fail(err, "deleting security group %s", id)
	}
	if err == nil {
		log.FromContext(ctx).Info("deleted security group", "gateway", o.req.String(), "securityGroup", id)
	}
	return nil
}
