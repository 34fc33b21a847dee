// Package migrate is kubectl vpn migrate: the VPNGateway and VPNPeers a legacy IPsecGateway
// becomes without a change on the client's side (NewPlan, pure), and the cutover that applies
// them, hands the endpoint over, waits for the tunnels and removes the legacy object (Run).
package migrate

import (
	"fmt"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/legacy"
)

// AnnotationMigratedFrom on the new VPNGateway and VPNPeers names the IPsecGateway (same
// namespace) they were migrated from: for people and for a rollback, read by nothing else.
const AnnotationMigratedFrom = "vpn.bnerd.net/migrated-from"

// Names are the names the migration gives the new objects.
type Names struct {
	// Gateway is the new VPNGateway's name (default: the IPsecGateway's).
	Gateway string
	// PeerPrefix is put before each tunnel's name to name its VPNPeer.
	PeerPrefix string
}

// Plan is what `kubectl vpn migrate` applies for one IPsecGateway.
type Plan struct {
	Gateway *vpnv1.VPNGateway
	Peers   []vpnv1.VPNPeer
	// Warnings are what the user should know but does not stop the migration.
	Warnings []string
	// prefix is the --peer-prefix the plan was made with.
	prefix string
}

// Refused lists every reason an IPsecGateway cannot be carried over exactly, each
// naming the field.
type Refused struct {
	Legacy  string
	Reasons []string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("IPsecGateway %s cannot be migrated without a change on the client's side:\n  - %s",
		e.Legacy, strings.Join(e.Reasons, "\n  - "))
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NewPlan is the VPNGateway and VPNPeers (one per tunnel, in tunnel order) that the
// client cannot tell apart from the IPsecGateway: internal/legacy.Translate (the translation
// the operator itself serves the legacy object through, so grants are exactly the legacy
// CR's: one tunnel gets no authorization block, DefaultAllow; several get blocks granting
// every exposure and the reverse exposures inside their own subnets), with everything the
// operator assigned at run time pinned in spec:
//   - the public address: a floating IP allocated from a pool becomes spec.endpoint.floatingIP,
//     a host-network gateway's node address becomes spec.endpoint.hostNetwork.address; a
//     LoadBalancer Service's address cannot be pinned and is refused;
//   - our IKE identity (the legacy gateway's is its public address) becomes spec.ipsec.localID;
//   - the service CIDR and every virtual IP, from the legacy status when spec left them empty.
//
// Pure: g is what the API server returned for the IPsecGateway.
func NewPlan(g *ipsecv1.IPsecGateway, names Names) (*Plan, error) {
	legacyName := g.Namespace + "/" + g.Name
	var refused []string
	refuse := func(format string, args ...any) { refused = append(refused, fmt.Sprintf(format, args...)) }
	var warnings []string

	target := names.Gateway
	if target == "" {
		target = g.Name
	}
	if len(target) > 40 || !dnsLabel.MatchString(target) {
		refuse("--gateway %q: a VPNGateway's name is a DNS label of at most 40 characters", target)
	}
	if g.DeletionTimestamp != nil {
		refuse("metadata.deletionTimestamp: the IPsecGateway is being deleted")
	}
	if to, ok := g.Annotations[ipsecv1.AnnotationMigratedTo]; ok && to != target {
		refuse("metadata.annotations[%s]: already handed over to VPNGateway %q, not %q", ipsecv1.AnnotationMigratedTo, to, target)
	}
	if g.Status.ObservedGeneration < g.Generation {
		refuse("status.observedGeneration: the status describes generation %d, the spec is at generation %d; wait until the operator has reconciled it (the service CIDR, virtual IPs and public address are read from the status)",
			g.Status.ObservedGeneration, g.Generation)
	}

	// the public address
	public := g.Status.PublicAddress
	ep := *g.Spec.Endpoint.DeepCopy()
	switch {
	case ep.FloatingIP != "":
		if public != "" && public != ep.FloatingIP {
			refuse("status.publicAddress %s is not spec.endpoint.floatingIP %s: the legacy gateway does not hold its pinned address", public, ep.FloatingIP)
		}
		public = ep.FloatingIP
	case ep.FloatingIPPool != "":
		if public == "" {
			refuse("status.publicAddress is empty: the floating IP allocated from spec.endpoint.floatingIPPool %q is not known yet, so it cannot be pinned", ep.FloatingIPPool)
			break
		}
		ep = vpnv1.Endpoint{FloatingIP: public}
		warnings = append(warnings, fmt.Sprintf("the floating IP %s was allocated from pool %q by the legacy gateway; the new gateway adopts it (spec.endpoint.floatingIP) and, like every adopted floating IP, never releases it: release it by hand when the gateway is retired", public, g.Spec.Endpoint.FloatingIPPool))
	case ep.HostNetwork != nil:
		switch {
		case ep.HostNetwork.Address != "":
			if public != "" && public != ep.HostNetwork.Address {
				refuse("status.publicAddress %s is not spec.endpoint.hostNetwork.address %s", public, ep.HostNetwork.Address)
			}
			public = ep.HostNetwork.Address
		case public == "":
			refuse("status.publicAddress is empty: the address of node %q the legacy gateway uses is not known yet, so it cannot be pinned (spec.endpoint.hostNetwork.address)", ep.HostNetwork.NodeName)
		default:
			ep.HostNetwork.Address = public
		}
	case ep.LoadBalancer != nil:
		refuse("spec.endpoint.loadBalancer: a LoadBalancer Service's address cannot be pinned: the new gateway's Service would get another address and the client would have to change its remote gateway (move the client by hand, or to a floatingIP endpoint first)")
	default:
		refuse("spec.endpoint: no endpoint kind this command can pin")
	}

	// the service CIDR
	serviceCIDR := g.Spec.ServiceCIDR
	switch {
	case serviceCIDR == "" && g.Status.ServiceCIDR == "":
		refuse("spec.serviceCIDR is empty and status.serviceCIDR is not allocated yet: the client's remote network is not known")
	case serviceCIDR == "":
		serviceCIDR = g.Status.ServiceCIDR
	case g.Status.ServiceCIDR != "" && g.Status.ServiceCIDR != serviceCIDR:
		refuse("status.serviceCIDR %s is not spec.serviceCIDR %s: the client's remote network is ambiguous", g.Status.ServiceCIDR, serviceCIDR)
	}

	gw, tunnels := legacy.Translate(g)
	gw.TypeMeta = metav1.TypeMeta{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway"}
	gw.ObjectMeta = metav1.ObjectMeta{Namespace: g.Namespace, Name: target, Annotations: map[string]string{AnnotationMigratedFrom: g.Name}}
	gw.Status = vpnv1.VPNGatewayStatus{}
	gw.Spec.Endpoint = ep
	gw.Spec.ServiceCIDR = serviceCIDR
	if gw.Spec.IPsec == nil {
		gw.Spec.IPsec = &vpnv1.IPsecGatewaySettings{}
	}
	gw.Spec.IPsec.LocalID = public

	// the virtual IPs clients connect to (and the reverse exposures' sources)
	for i := range gw.Spec.Exposures {
		e := &gw.Spec.Exposures[i]
		vip, err := pinVirtualIP("exposures", e.Name, e.VirtualIP, g.Status.Exposures)
		if err != "" {
			refuse("%s", err)
		}
		e.VirtualIP = vip
	}
	for i := range gw.Spec.ReverseExposures {
		r := &gw.Spec.ReverseExposures[i]
		vip, err := pinVirtualIP("reverseExposures", r.Name, r.VirtualIP, g.Status.ReverseExposures)
		if err != "" {
			refuse("%s", err)
		}
		r.VirtualIP = vip
	}

	peers := make([]vpnv1.VPNPeer, 0, len(tunnels))
	for i := range tunnels {
		p := tunnels[i]
		name := names.PeerPrefix + p.Name
		if len(name) > 63 || !dnsLabel.MatchString(name) {
			refuse("spec.tunnels[%q]: the VPNPeer name %q is not a DNS label of at most 63 characters (--peer-prefix)", p.Name, name)
		}
		p.TypeMeta = metav1.TypeMeta{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNPeer"}
		p.ObjectMeta = metav1.ObjectMeta{Namespace: g.Namespace, Name: name, Annotations: map[string]string{AnnotationMigratedFrom: g.Name}}
		p.Spec.GatewayRef = target
		p.Status = vpnv1.VPNPeerStatus{}
		peers = append(peers, p)
	}

	// what the client or the cluster will notice besides the handover itself
	tunnelState := map[string]string{}
	for _, t := range g.Status.Tunnels {
		tunnelState[t.Name] = t.State
	}
	for _, t := range g.Spec.Tunnels {
		if s := tunnelState[t.Name]; s != "Established" {
			if s == "" {
				s = "not reported"
			}
			warnings = append(warnings, fmt.Sprintf("tunnel %s is not Established on the legacy gateway (%s): --apply waits for its VPNPeer to be Connected", t.Name, s))
		}
	}
	if len(tunnels) > 1 && len(g.Spec.Exposures) == 0 && len(g.Spec.ReverseExposures) == 0 {
		warnings = append(warnings, "the legacy gateway exposes nothing: its tunnels' VPNPeers get authorization blocks that grant nothing (Authorized=False, NoGrants), as the legacy tunnels reached nothing")
	}

	if len(refused) > 0 {
		return nil, &Refused{Legacy: legacyName, Reasons: refused}
	}
	return &Plan{Gateway: gw, Peers: peers, Warnings: warnings, prefix: names.PeerPrefix}, nil
}

// pinVirtualIP is an exposure's virtual IP: spec's, else the one the operator assigned
// (status); a refusal naming the field when neither is known or they differ.
func pinVirtualIP(list, name, spec string, status []vpnv1.ExposureStatus) (string, string) {
	assigned := ""
	for _, s := range status {
		if s.Name == name {
			assigned = s.VirtualIP
		}
	}
	switch {
	case spec == "" && assigned == "":
		return "", fmt.Sprintf("status.%s[%q].virtualIP is not assigned yet (spec.%s[%q].virtualIP is empty): the address clients connect to is not known", list, name, list, name)
	case spec == "":
		return assigned, ""
	case assigned != "" && assigned != spec:
		return "", fmt.Sprintf("status.%s[%q].virtualIP %s is not spec.%s[%q].virtualIP %s: the address clients connect to is ambiguous", list, name, assigned, list, name, spec)
	}
	return spec, ""
}
