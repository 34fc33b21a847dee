package gateways

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Gateway is what the API server holds about one VPNGateway, and what its agent says.
type Gateway struct {
	VPNGateway *vpnv1.VPNGateway
	// Peers are the gateway's VPNPeers, sorted by name.
	Peers []vpnv1.VPNPeer
	// Decisions are model.Authorize's, computed here from the gateway and its peers.
	Decisions map[string]model.Decision
	// Pod is the gateway's pod (LoadAgent); NoPod says why there is none to ask.
	Pod   *corev1.Pod
	NoPod string
	// Metrics is the agent's view (nil: not read); MetricsErr says why it could not be read.
	Metrics    *AgentMetrics
	MetricsErr string
}

// Load reads the gateways asked for (one by name, or all of a namespace, or all when all is
// set) and every peer of theirs, sorted by namespace and name. Secrets are never read.
func Load(ctx context.Context, c client.Client, namespace, name string, all bool) ([]*Gateway, error) {
	var gws []vpnv1.VPNGateway
	switch {
	case name != "":
		var gw vpnv1.VPNGateway
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &gw); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("VPNGateway %s/%s not found", namespace, name)
			}
			return nil, err
		}
		gws = []vpnv1.VPNGateway{gw}
	default:
		var list vpnv1.VPNGatewayList
		opts := []client.ListOption{}
		if !all {
			opts = append(opts, client.InNamespace(namespace))
		}
		if err := c.List(ctx, &list, opts...); err != nil {
			return nil, err
		}
		gws = list.Items
	}
	sort.Slice(gws, func(i, j int) bool {
		if gws[i].Namespace != gws[j].Namespace {
			return gws[i].Namespace < gws[j].Namespace
		}
		return gws[i].Name < gws[j].Name
	})
	peersByNS := map[string][]vpnv1.VPNPeer{}
	var out []*Gateway
	for i := range gws {
		gw := &gws[i]
		ps, seen := peersByNS[gw.Namespace]
		if !seen {
			var list vpnv1.VPNPeerList
			if err := c.List(ctx, &list, client.InNamespace(gw.Namespace)); err != nil {
				return nil, err
			}
			ps = list.Items
			peersByNS[gw.Namespace] = ps
		}
		d := &Gateway{VPNGateway: gw}
		for _, p := range ps {
			if p.Spec.GatewayRef == gw.Name {
				d.Peers = append(d.Peers, p)
			}
		}
		sort.Slice(d.Peers, func(i, j int) bool { return d.Peers[i].Name < d.Peers[j].Name })
		d.Decisions = decide(gw, d.Peers)
		out = append(out, d)
	}
	return out, nil
}

// VPNGatewayExists reports whether the namespace has a VPNGateway of that name (an error
// reading it counts as yes: Load then says what went wrong).
func VPNGatewayExists(ctx context.Context, c client.Client, namespace, name string) bool {
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &vpnv1.VPNGateway{})
	return !apierrors.IsNotFound(err)
}

// LoadLegacy reads the IPsecGateways asked for (one by name, all of a namespace, or all),
// sorted by namespace and name. A name that is not an IPsecGateway gives none.
func LoadLegacy(ctx context.Context, c client.Client, namespace, name string, all bool) ([]ipsecv1.IPsecGateway, error) {
	if name != "" {
		var g ipsecv1.IPsecGateway
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &g); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
		return []ipsecv1.IPsecGateway{g}, nil
	}
	var list ipsecv1.IPsecGatewayList
	var opts []client.ListOption
	if !all {
		opts = append(opts, client.InNamespace(namespace))
	}
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, err
	}
	sort.Slice(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	return list.Items, nil
}

// decide runs the operator's authorization (internal/model) over the gateway and its peers,
// with the scope built as the operator's PeerScope builds it from the gateway's status. The
// operator's own configuration (the cluster's ranges) and the Secrets' types are not known
// here: where they make a peer dark, the peer's Authorized condition says so.
func decide(gw *vpnv1.VPNGateway, peers []vpnv1.VPNPeer) map[string]model.Decision {
	var live []vpnv1.VPNPeer
	for _, p := range peers {
		if p.DeletionTimestamp.IsZero() {
			live = append(live, p)
		}
	}
	scope := model.Scope{LocalID: model.GatewayLocalID(gw, gw.Status.PublicAddress)}
	if c, err := netip.ParsePrefix(gw.Status.ServiceCIDR); err == nil {
		scope.ServiceCIDR = c
	}
	d, _ := model.Authorize(gw, live, scope)
	return d
}

// grants are the exposures and reverse exposures a decision gives a peer (as model.Build
// fills them: everything under DefaultAllow, the peer's block when Authorized).
func grants(gw *vpnv1.VPNGateway, p *vpnv1.VPNPeer, d model.Decision) (exp, rev []string) {
	if !d.Authorized {
		return nil, nil
	}
	if d.Reason == model.ReasonDefaultAllow {
		for _, e := range gw.Spec.Exposures {
			exp = appendNew(exp, e.Name)
		}
		for _, r := range gw.Spec.ReverseExposures {
			rev = appendNew(rev, r.Name)
		}
	} else if a := p.Spec.Authorization; a != nil {
		for _, e := range a.Exposures {
			exp = appendNew(exp, e)
		}
		for _, r := range a.ReverseExposures {
			rev = appendNew(rev, r)
		}
	}
	slices.Sort(exp)
	slices.Sort(rev)
	return exp, rev
}

func appendNew(l []string, s string) []string {
	if slices.Contains(l, s) {
		return l
	}
	return append(l, s)
}

// effectiveAuthorized: the operator's Authorized condition when it reported one, else the
// model's decision; the model's grants count only where the operator does not deny them.
func (d *Gateway) effectiveAuthorized(p *vpnv1.VPNPeer) bool {
	dec := d.Decisions[p.Name]
	if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionAuthorized); c != nil && c.Status != metav1.ConditionTrue {
		return false
	}
	return dec.Authorized
}

// Reaches are the exposures the peer may reach, by name (sorted), and its reverse exposures.
func (d *Gateway) Reaches(p *vpnv1.VPNPeer) (exp, rev []string) {
	if !d.effectiveAuthorized(p) {
		return nil, nil
	}
	return grants(d.VPNGateway, p, d.Decisions[p.Name])
}

// LoadAgent finds the gateway's pod and, when metrics is set, reads its agent's metrics
// through a (nil: no access, said in MetricsErr).
func (d *Gateway) LoadAgent(ctx context.Context, c client.Client, a AgentAccess, metrics bool) {
	d.Pod, d.NoPod = Pod(ctx, c, d.VPNGateway)
	if !metrics {
		return
	}
	if d.Pod == nil {
		d.MetricsErr = d.NoPod
		return
	}
	if a == nil {
		d.MetricsErr = "no access to the API server's pod proxy"
		return
	}
	m, err := ReadMetrics(ctx, a, d.VPNGateway, d.Pod)
	if err != nil {
		d.MetricsErr = "not reachable through the API server's pod proxy: " + ShortError(err)
		return
	}
	d.Metrics = m
}

// ShortError is an error on one line, at most 200 characters.
func ShortError(err error) string {
	s := err.Error()
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// PSKRef is the Secret key a peer's tunnel uses, if any.
func PSKRef(p *vpnv1.VPNPeer) *vpnv1.SecretKeyRef {
	switch {
	case p.Spec.IPsec != nil:
		return &p.Spec.IPsec.PSKSecretRef
	case p.Spec.WireGuard != nil:
		return p.Spec.WireGuard.PresharedKeySecretRef
	}
	return nil
}
