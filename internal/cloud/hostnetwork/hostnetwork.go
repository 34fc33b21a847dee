// Package hostnetwork is the endpoint provider that runs the gateway pod in a node's network
// namespace, pinned to that node: the public address is the configured one, or the node's
// ExternalIP, or its InternalIP. A node holds one host-network gateway: its agent owns the
// node's nftables table (ip bnerd_vpn), its tunnel device and ports (UDP 500/4500 for IPsec
// with charon's routing table 220, its WireGuard device and listen port), so a second one
// would overwrite the first's firewall. VPNGateways and legacy IPsecGateways count alike
// (except a released, migrated-to one). The older gateway (creation time, then
// namespace/name) keeps the node, the younger gets Conflict naming it. Nothing is created,
// so Delete does nothing.
package hostnetwork

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/legacy"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// DefaultRecheck is Config.Recheck when zero.
const DefaultRecheck = time.Minute

// Config configures the provider.
type Config struct {
	// Recheck is the RetryAfter of NotFound and Conflict (a node may join, the older gateway
	// may go); DefaultRecheck when zero.
	Recheck time.Duration
	// NodeIndex, when set, is a field index of VPNGateways by their host-network node name
	// (IndexNodeName), so a conflict check lists only the gateways on the same node instead
	// of every gateway in the cluster.
	NodeIndex string
	// NamespacePermitted, when set, says whether gateways of a namespace may run on a node's
	// network at all (the admin's selector): a gateway that may not run holds no node, so a
	// tenant without the right cannot block a node for everyone.
	NamespacePermitted func(ctx context.Context, namespace string) (bool, error)
}

// NodeName is the value IndexNodeName-style indexes hold for a gateway: its host-network
// node, or nothing.
func NodeName(gw *vpnv1.VPNGateway) []string {
	if hn := gw.Spec.Endpoint.HostNetwork; hn != nil {
		return specNodes(hn)
	}
	return nil
}

// specNodes are the nodes a host-network endpoint may run on: its nodes (a gateway with a
// standby), or its node.
func specNodes(hn *vpnv1.HostNetworkEndpoint) []string {
	if len(hn.Nodes) > 0 {
		return hn.Nodes
	}
	return []string{hn.NodeName}
}

// modelNodes is specNodes of the model's endpoint.
func modelNodes(ep model.Endpoint) []string {
	if len(ep.NodeNames) > 0 {
		return ep.NodeNames
	}
	if ep.NodeName == "" {
		return nil
	}
	return []string{ep.NodeName}
}

// Provider is the host network endpoint provider.
type Provider struct {
	r   client.Reader
	cfg Config
}

var _ cloud.Provider = (*Provider)(nil)

// New builds a provider reading Nodes and VPNGateways through r.
func New(r client.Reader, cfg Config) *Provider {
	if cfg.Recheck <= 0 {
		cfg.Recheck = DefaultRecheck
	}
	return &Provider{r: r, cfg: cfg}
}

// Ensure implements cloud.Provider.
func (p *Provider) Ensure(ctx context.Context, req cloud.Request) (cloud.Result, error) {
	if err := req.Validate(); err != nil {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "%v", err)), nil
	}
	ep := req.Endpoint
	if ep.Kind != model.EndpointHostNetwork || len(modelNodes(ep)) == 0 {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s: the host network provider needs a hostNetwork endpoint with a node name", req)), nil
	}
	if len(ep.NodeNames) > 0 {
		return p.ensureNodes(ctx, req)
	}

	node := &corev1.Node{}
	err := p.r.Get(ctx, types.NamespacedName{Name: ep.NodeName}, node)
	if apierrors.IsNotFound(err) {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonNotFound, p.cfg.Recheck, "node %q does not exist", ep.NodeName)), nil
	}
	if err != nil {
		return cloud.Settle(apiError(err, fmt.Sprintf("reading node %q", ep.NodeName)))
	}
	addr, how := "", ""
	if ep.HostAddress.IsValid() {
		addr, how = ep.HostAddress.String(), "configured address"
	} else {
		addr, how = nodeAddress(node)
	}
	if addr == "" {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonNotFound, p.cfg.Recheck,
			"node %q reports no ExternalIP or InternalIP; set spec.endpoint.hostNetwork.address", ep.NodeName)), nil
	}

	if e, err := p.conflict(ctx, req, ep.NodeName); err != nil {
		return cloud.Settle(err)
	} else if e != nil {
		return cloud.Failed(e), nil
	}
	return cloud.Result{
		PublicAddress: addr, Ready: true, Reason: cloud.ReasonReady,
		Message: fmt.Sprintf("host network on node %s, %s %s", ep.NodeName, how, addr),
		Pod:     cloud.PodNetwork{HostNetwork: true, NodeName: ep.NodeName},
	}, nil
}

// ensureNodes is Ensure for a gateway with a standby on several nodes: the public address is
// the VIP the spec names (the active pod's agent holds it on its node); two of the nodes must
// exist, and none may run an older host-network gateway.
func (p *Provider) ensureNodes(ctx context.Context, req cloud.Request) (cloud.Result, error) {
	ep := req.Endpoint
	if !ep.HostAddress.Is4() {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0,
			"gateway %s: a host-network gateway on nodes %s needs spec.endpoint.hostNetwork.address, the VIP", req, strings.Join(ep.NodeNames, ", "))), nil
	}
	var missing []string
	for _, name := range ep.NodeNames {
		err := p.r.Get(ctx, types.NamespacedName{Name: name}, &corev1.Node{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, name)
		case err != nil:
			return cloud.Settle(apiError(err, fmt.Sprintf("reading node %q", name)))
		}
	}
	if len(ep.NodeNames)-len(missing) < 2 {
		return cloud.Failed(cloud.Terminalf(cloud.ReasonNotFound, p.cfg.Recheck,
			"nodes %s do not exist: a gateway with a standby needs two of its nodes", strings.Join(missing, ", "))), nil
	}
	for _, name := range ep.NodeNames {
		if e, err := p.conflict(ctx, req, name); err != nil {
			return cloud.Settle(err)
		} else if e != nil {
			return cloud.Failed(e), nil
		}
	}
	addr := ep.HostAddress.String()
	return cloud.Result{
		PublicAddress: addr, Ready: true, Reason: cloud.ReasonReady,
		Message: fmt.Sprintf("host network on nodes %s, VIP %s on the active pod's node", strings.Join(ep.NodeNames, ", "), addr),
		Pod:     cloud.PodNetwork{HostNetwork: true},
	}, nil
}

// Delete implements cloud.Provider: nothing was created.
func (p *Provider) Delete(context.Context, cloud.Request) error { return nil }

// nodeAddress is the node's first ExternalIP, else its first InternalIP (IPv4 before IPv6
// within each).
func nodeAddress(node *corev1.Node) (string, string) {
	for _, want := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		var found []netip.Addr
		for _, a := range node.Status.Addresses {
			if a.Type != want {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				found = append(found, ip)
			}
		}
		slices.SortStableFunc(found, func(a, b netip.Addr) int {
			switch {
			case a.Is4() && !b.Is4():
				return -1
			case b.Is4() && !a.Is4():
				return 1
			}
			return 0
		})
		if len(found) > 0 {
			return found[0].String(), "node " + string(want)
		}
	}
	return "", ""
}

// conflict finds the oldest other host-network gateway that may run on node, if it is older
// than the requesting one.
func (p *Provider) conflict(ctx context.Context, req cloud.Request, node string) (*cloud.Error, error) {
	var list vpnv1.VPNGatewayList
	var opts []client.ListOption
	if p.cfg.NodeIndex != "" {
		opts = append(opts, client.MatchingFields{p.cfg.NodeIndex: node})
	}
	if err := p.r.List(ctx, &list, opts...); err != nil {
		return nil, apiError(err, "listing VPNGateways")
	}
	// Legacy IPsecGateways hold nodes too (translated: the same spec); one released by a
	// migration (ipsec AnnotationMigratedTo) holds nothing, its pod is being removed.
	var legacyList ipsecv1.IPsecGatewayList
	if err := p.r.List(ctx, &legacyList, opts...); err != nil {
		return nil, apiError(err, "listing IPsecGateways")
	}
	legacyKeys := map[types.UID]bool{}
	for i := range legacyList.Items {
		g := &legacyList.Items[i]
		if _, released := g.Annotations[ipsecv1.AnnotationMigratedTo]; released {
			continue
		}
		gw, _ := legacy.Translate(g)
		gw.DeletionTimestamp = g.DeletionTimestamp
		list.Items = append(list.Items, *gw)
		legacyKeys[g.UID] = true
	}
	kindOf := func(gw *vpnv1.VPNGateway) string {
		if legacyKeys[gw.UID] {
			return "IPsecGateway "
		}
		return ""
	}
	// Age order: creation time, then namespace/name, then kind — a legacy gateway before a
	// VPNGateway of the same name created in the same second (the one being migrated keeps
	// its node until it is released).
	type age struct {
		created time.Time
		key     string
		rank    int
	}
	ageOf := func(gw *vpnv1.VPNGateway) age {
		a := age{gw.CreationTimestamp.Time, gw.Namespace + "/" + gw.Name, 1}
		if legacyKeys[gw.UID] {
			a.rank = 0
		}
		return a
	}
	before := func(a, b age) bool {
		switch {
		case !a.created.Equal(b.created):
			return a.created.Before(b.created)
		case a.key != b.key:
			return a.key < b.key
		}
		return a.rank < b.rank
	}
	// Our own age: from the list, or the youngest possible if the reader has not seen us yet.
	self := age{time.Now().Add(time.Hour), req.Namespace + "/" + req.Name, 1}
	if req.Kind == model.KindIPsecGateway {
		self.rank = 0
	}
	for i := range list.Items {
		if list.Items[i].UID == req.UID {
			self.created = list.Items[i].CreationTimestamp.Time
		}
	}
	permitted := map[string]bool{}
	mayRun := func(namespace string) (bool, error) {
		if p.cfg.NamespacePermitted == nil {
			return true, nil
		}
		if ok, seen := permitted[namespace]; seen {
			return ok, nil
		}
		ok, err := p.cfg.NamespacePermitted(ctx, namespace)
		if err != nil {
			return false, err
		}
		permitted[namespace] = ok
		return ok, nil
	}
	var winner *vpnv1.VPNGateway
	for i := range list.Items {
		gw := &list.Items[i]
		hn := gw.Spec.Endpoint.HostNetwork
		if gw.UID == req.UID || hn == nil || !slices.Contains(specNodes(hn), node) {
			continue
		}
		if !before(ageOf(gw), self) {
			continue
		}
		if ok, err := mayRun(gw.Namespace); err != nil {
			return nil, apiError(err, "reading namespace "+gw.Namespace)
		} else if !ok {
			continue
		}
		if winner == nil || before(ageOf(gw), ageOf(winner)) {
			winner = gw
		}
	}
	if winner == nil {
		return nil, nil
	}
	note := ""
	if winner.DeletionTimestamp != nil {
		note = " (it is being deleted)"
	}
	return cloud.Terminalf(cloud.ReasonConflict, p.cfg.Recheck,
		"node %s already runs the older host-network gateway %s%s/%s%s (%s, %s); a node holds one host-network gateway: its firewall table and tunnel device are the node's",
		node, kindOf(winner), winner.Namespace, winner.Name, note, winner.Spec.Protocol, describePorts(gatewayPorts(winner))), nil
}

// gatewayPorts are the UDP ports a gateway binds on its node.
func gatewayPorts(gw *vpnv1.VPNGateway) []cloud.Port {
	var wg uint16
	if gw.Spec.WireGuard != nil && gw.Spec.WireGuard.ListenPort > 0 && gw.Spec.WireGuard.ListenPort <= 65535 {
		wg = uint16(gw.Spec.WireGuard.ListenPort)
	}
	return cloud.TunnelPorts(model.Protocol(gw.Spec.Protocol), wg)
}

func describePorts(ports []cloud.Port) string {
	var out []string
	for _, port := range ports {
		out = append(out, fmt.Sprintf("%s/%d", strings.ToUpper(port.Protocol), port.Port))
	}
	return strings.Join(out, ", ")
}

func apiError(err error, what string) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return cloud.Terminalf(cloud.ReasonAuthFailed, time.Minute, "%s: the operator is not allowed to: %v", what, err)
	}
	return cloud.Transient(err, "%s: %v", what, err)
}
