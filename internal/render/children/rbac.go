package children

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Verbs the gateway agent is granted.
var (
	readVerbs         = []string{"get", "list", "watch"}
	statusWriteVerbs  = []string{"patch", "update"}
	eventsCreateVerbs = []string{"create", "patch"}
)

// SecretNames are the Secrets the gateway agent reads: the PSK (IPsec) or preshared key
// (WireGuard) of every peer with a tunnel and the WireGuard device's private key; deduplicated
// and sorted. Dark (unauthorized) peers with a tunnel are included: they still establish it. A
// peer without a tunnel (a duplicate identity, refused credentials) needs none of its Secrets.
func SecretNames(gw *model.Gateway) []string {
	var names []string
	if gw.WireGuard != nil && gw.WireGuard.PrivateKey.Name != "" {
		names = append(names, gw.WireGuard.PrivateKey.Name)
	}
	for _, p := range gw.Peers {
		if !p.HasTunnel() {
			continue
		}
		if p.IPsec != nil && p.IPsec.PSK.Name != "" {
			names = append(names, p.IPsec.PSK.Name)
		}
		if p.WireGuard != nil && p.WireGuard.PresharedKey != nil && p.WireGuard.PresharedKey.Name != "" {
			names = append(names, p.WireGuard.PresharedKey.Name)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// peerNames are the gateway's peers' names, sorted and deduplicated.
func peerNames(gw *model.Gateway) []string {
	names := make([]string, 0, len(gw.Peers))
	for _, p := range gw.Peers {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// renderRole grants the gateway agent exactly what it needs and nothing else:
//   - read its own ConfigMap,
//   - read the Secrets its peers reference (by name; the rule is left out when there are none,
//     because a rule without resourceNames would grant every Secret in the namespace),
//   - read its own VPNGateway and its VPNPeers (by name; left out when there are no peers),
//   - write its peers' status (by name; left out when there are no peers),
//   - for a legacy IPsecGateway instead: read it and write its status (the tunnels' state),
//   - with a standby: read and write the gateway's Lease (by name; standbyLeaseRule),
//   - record events.
//
// list and watch with resourceNames only authorize requests scoped to one object
// (fieldSelector metadata.name=<name>); the agent watches each object that way.
func renderRole(gw *model.Gateway, owner metav1.OwnerReference) *rbacv1ac.RoleApplyConfiguration {
	group := vpnv1.GroupVersion.Group
	rules := []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().
			WithAPIGroups("").
			WithResources("configmaps").
			WithResourceNames(configMapNameOf(gw)).
			WithVerbs(readVerbs...),
	}
	if secrets := SecretNames(gw); len(secrets) > 0 {
		rules = append(rules, rbacv1ac.PolicyRule().
			WithAPIGroups("").
			WithResources("secrets").
			WithResourceNames(secrets...).
			WithVerbs(readVerbs...))
	}
	if gw.Kind == model.KindIPsecGateway {
		// A legacy gateway: its tunnels are its peers, reported in its own status; there are
		// no VPNPeers to read or write.
		rules = append(rules,
			rbacv1ac.PolicyRule().
				WithAPIGroups(ipsecv1.GroupVersion.Group).
				WithResources("ipsecgateways").
				WithResourceNames(gw.Name).
				WithVerbs(readVerbs...),
			rbacv1ac.PolicyRule().
				WithAPIGroups(ipsecv1.GroupVersion.Group).
				WithResources("ipsecgateways/status").
				WithResourceNames(gw.Name).
				WithVerbs(statusWriteVerbs...))
	} else {
		rules = append(rules, rbacv1ac.PolicyRule().
			WithAPIGroups(group).
			WithResources("vpngateways").
			WithResourceNames(gw.Name).
			WithVerbs(readVerbs...))
	}
	if peers := peerNames(gw); len(peers) > 0 && gw.Kind != model.KindIPsecGateway {
		rules = append(rules,
			rbacv1ac.PolicyRule().
				WithAPIGroups(group).
				WithResources("vpnpeers").
				WithResourceNames(peers...).
				WithVerbs(readVerbs...),
			rbacv1ac.PolicyRule().
				WithAPIGroups(group).
				WithResources("vpnpeers/status").
				WithResourceNames(peers...).
				WithVerbs(statusWriteVerbs...),
		)
	}
	if gw.Standby {
		rules = append(rules, standbyLeaseRule(gw))
	}
	// Event names are generated, so this is the one rule without resourceNames.
	rules = append(rules, rbacv1ac.PolicyRule().
		WithAPIGroups("").
		WithResources("events").
		WithVerbs(eventsCreateVerbs...))

	return rbacv1ac.Role(nameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithRules(rules...)
}

func renderRoleBinding(gw *model.Gateway, owner metav1.OwnerReference) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(nameOf(gw), gw.Namespace).
		WithLabels(labelsOf(gw)).
		WithOwnerReferences(ownerRef(owner)).
		WithRoleRef(rbacv1ac.RoleRef().
			WithAPIGroup("rbac.authorization.k8s.io").
			WithKind("Role").
			WithName(nameOf(gw))).
		WithSubjects(rbacv1ac.Subject().
			WithKind("ServiceAccount").
			WithName(nameOf(gw)).
			WithNamespace(gw.Namespace))
}
