package children

import (
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

func legacyOwner(gw *model.Gateway) metav1.OwnerReference {
	o := ownerOf(gw)
	o.APIVersion, o.Kind = "ipsec.bnerd.net/v1alpha1", model.KindIPsecGateway
	return o
}

// A legacy IPsecGateway's children are those of the unified gateway it translates to, named so
// that they never collide with a VPNGateway's (of the same name or any other), owned by the
// IPsecGateway, selecting only its own pod, with a Role for its own status and no VPNPeers.
func TestLegacyChildren(t *testing.T) {
	unified := ipsecHostNetworkTwoPeers()
	legacy := ipsecHostNetworkTwoPeers()
	legacy.Kind = model.KindIPsecGateway
	u := mustRender(t, unified, Options{AgentImage: "a", StrongSwanImage: "s"})
	l, err := Render(legacy, legacyOwner(legacy), Options{AgentImage: "a", StrongSwanImage: "s"})
	if err != nil {
		t.Fatal(err)
	}
	name := legacy.Name + "-ipsecgw"
	for _, obj := range l.Objects() {
		kind, meta := objectMeta(t, obj)
		if strings.HasPrefix(meta.Name, legacy.Name+"-gateway") || strings.HasSuffix(meta.Name, "-gateway") || strings.HasSuffix(meta.Name, "-gateway-config") {
			t.Errorf("%s %s: a VPNGateway's child name", kind, meta.Name)
		}
		if len(meta.OwnerReferences) != 1 || meta.OwnerReferences[0].Kind != model.KindIPsecGateway || meta.OwnerReferences[0].UID != legacy.UID {
			t.Errorf("%s %s owned by %+v", kind, meta.Name, meta.OwnerReferences)
		}
		if meta.Labels[LabelGateway] != "" || meta.Labels[LabelIPsecGateway] != legacy.Name {
			t.Errorf("%s %s labels %v", kind, meta.Name, meta.Labels)
		}
	}
	if *l.Deployment.Name != name || *l.ConfigMap.Name != name+"-config" || *l.Role.Name != name || *l.NetworkPolicy.Name != name {
		t.Errorf("names: deployment %s, configmap %s, role %s, policy %s", *l.Deployment.Name, *l.ConfigMap.Name, *l.Role.Name, *l.NetworkPolicy.Name)
	}
	// Neither kind's selector matches the other's pod.
	uPod := labels.Set(u.Deployment.Spec.Template.Labels)
	lPod := labels.Set(l.Deployment.Spec.Template.Labels)
	uSel := labels.SelectorFromSet(u.Deployment.Spec.Selector.MatchLabels)
	lSel := labels.SelectorFromSet(l.Deployment.Spec.Selector.MatchLabels)
	if uSel.Matches(lPod) || lSel.Matches(uPod) || !uSel.Matches(uPod) || !lSel.Matches(lPod) {
		t.Errorf("selectors overlap: unified %v / pod %v, legacy %v / pod %v", uSel, uPod, lSel, lPod)
	}
	// Nor does a VPNGateway named like the legacy children's base.
	other := ipsecHostNetworkTwoPeers()
	other.Name = name
	o := mustRender(t, other, Options{AgentImage: "a", StrongSwanImage: "s"})
	if labels.SelectorFromSet(o.Deployment.Spec.Selector.MatchLabels).Matches(lPod) || lSel.Matches(labels.Set(o.Deployment.Spec.Template.Labels)) {
		t.Errorf("a VPNGateway named %s selects the legacy pod (or the reverse)", name)
	}
	// The agent is told its kind and its ConfigMap; the unified agent is told no kind.
	args := l.Deployment.Spec.Template.Spec.Containers[len(l.Deployment.Spec.Template.Spec.Containers)-1].Args
	for _, c := range l.Deployment.Spec.Template.Spec.Containers {
		if *c.Name == ContainerAgent {
			args = c.Args
		}
	}
	joined := strings.Join(args, " ")
	if !strings.Contains(joined, "--gateway "+legacy.Name+" --namespace "+legacy.Namespace+" --gateway-kind IPsecGateway") || !strings.Contains(joined, "--config-map "+name+"-config") {
		t.Errorf("agent args %q", joined)
	}
	for _, c := range u.Deployment.Spec.Template.Spec.Containers {
		if slices.Contains(c.Args, "--gateway-kind") {
			t.Errorf("unified agent args %v", c.Args)
		}
	}
	// Role: its ConfigMap, its Secrets, its IPsecGateway and that one's status; no VPN objects.
	var got []string
	for _, r := range l.Role.Rules {
		got = append(got, strings.Join(r.APIGroups, ",")+"/"+strings.Join(r.Resources, ",")+"="+strings.Join(r.ResourceNames, ",")+":"+strings.Join(r.Verbs, ","))
	}
	want := []string{
		"/configmaps=" + name + "-config:get,list,watch",
		"/secrets=" + strings.Join(SecretNames(legacy), ",") + ":get,list,watch",
		"ipsec.bnerd.net/ipsecgateways=" + legacy.Name + ":get,list,watch",
		"ipsec.bnerd.net/ipsecgateways/status=" + legacy.Name + ":patch,update",
		"/events=:create,patch",
	}
	if !slices.Equal(got, want) {
		t.Errorf("role rules\n got %q\nwant %q", got, want)
	}
	// The ConfigMap's model says the kind.
	if !strings.Contains(l.ConfigMap.Data[ModelKey], `"kind": "IPsecGateway"`) || strings.Contains(u.ConfigMap.Data[ModelKey], `"kind": "IPsecGateway"`) {
		t.Error("model kind missing from the legacy ConfigMap, or present in the unified one")
	}

	// An owner of the other kind is refused: its children would be collected with the wrong object.
	if _, err := Render(legacy, ownerOf(legacy), Options{AgentImage: "a", StrongSwanImage: "s"}); err == nil {
		t.Error("a legacy gateway rendered with a VPNGateway owner")
	}
	if _, err := Render(unified, legacyOwner(unified), Options{AgentImage: "a", StrongSwanImage: "s"}); err == nil {
		t.Error("a VPNGateway rendered with an IPsecGateway owner")
	}
}
