package cluster

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

const (
	legacyGW     = "acme-legacy"
	legacyTunnel = "hq-tunnel"
	labNode      = "lab-node"  // NODE in hack/lab/common.sh
	labNodeIP    = "192.0.2.1" // NODE_IP
)

var outageRe = regexp.MustCompile(`outage: ([0-9.]+)s`)

// 11: the seed product's user moves in. After the host-network gateway is gone (step 9), the
// client's site hq — its strongSwan configuration untouched since the lab configured it for
// acme-gw — gets a legacy IPsecGateway on the node's address presenting exactly what acme-gw
// presented (its identity, service CIDR, the web exposure's virtual IP, hq's PSK Secret), and its
// tunnel comes up through it. `kubectl vpn migrate ipsecgateway --apply` then moves it to a
// VPNGateway + VPNPeer: the tunnel is back and web is reached within the printed outage (goal
// ≤ 10 s), the new peer is Authorized by DefaultAllow (one tunnel), the legacy CR is gone and
// nothing of it is left.
func test11LegacyMigrated(t *testing.T) {
	c, cancel := ctx(60 * time.Second)
	defer cancel()
	legacy := &ipsecv1.IPsecGateway{
		ObjectMeta: metav1.ObjectMeta{Name: legacyGW, Namespace: labNS},
		Spec: ipsecv1.IPsecGatewaySpec{
			Endpoint:    vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: labNode, Address: labNodeIP}},
			ServiceCIDR: cidr,
			Exposures: []vpnv1.Exposure{{Name: "web", VirtualIP: vipWeb, Target: vpnv1.ExposureTarget{
				Service: &vpnv1.ServiceRef{Name: "web"}, Ports: []intstr.IntOrString{intstr.FromInt32(8080)}}}},
			IKE: vpnv1.IKESettings{Version: 2, Proposals: []string{"aes256gcm16-prfsha256-ecp256"},
				DPD: &vpnv1.DPDSettings{Delay: &metav1.Duration{Duration: 5 * time.Second}, Action: "restart"}},
			Tunnels: []ipsecv1.Tunnel{{
				Name:          legacyTunnel,
				Peer:          vpnv1.IPsecRemote{Address: siteLinkSite(1), ID: "hq.acme.example"},
				RemoteSubnets: []string{siteLAN(1)},
				ESP:           vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp256"}},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			}},
		},
	}
	if err := L.c.Create(c, legacy); err != nil {
		t.Fatalf("creating the legacy IPsecGateway: %v", err)
	}
	t.Cleanup(func() {
		_ = L.deleteAndWait(&ipsecv1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Name: legacyGW, Namespace: labNS}}, 60*time.Second)
		_ = L.deleteAndWait(&vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: legacyGW, Namespace: labNS}}, 60*time.Second)
	})

	t.Run("hq's untouched site comes up through the legacy gateway", func(t *testing.T) {
		err := eventually(120*time.Second, func() error {
			L.siteEnsure("hq")
			cur := &ipsecv1.IPsecGateway{}
			if err := L.get(labNS, legacyGW, cur); err != nil {
				return err
			}
			if cur.Status.TunnelsUp != "1/1" {
				return fmt.Errorf("tunnels up %q, conditions %+v", cur.Status.TunnelsUp, cur.Status.Conditions)
			}
			_, err := L.curlFrom("hq", 1, 2, urlWeb())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Log("hq reaches web through the legacy IPsecGateway")
	})
	if t.Failed() {
		return
	}

	var out string
	t.Run("kubectl vpn migrate --apply moves it within the outage goal", func(t *testing.T) {
		var err error
		out, err = L.vpn("migrate", "ipsecgateway", legacyGW, "--apply", "--timeout", "120s")
		t.Logf("kubectl vpn migrate ipsecgateway %s --apply:\n%s", legacyGW, out)
		if err != nil {
			t.Fatal(err)
		}
		m := outageRe.FindStringSubmatch(out)
		if m == nil {
			t.Fatal("no measured outage printed")
		}
		outage, _ := strconv.ParseFloat(m[1], 64)
		// The goal is a figure to print, not a timed assertion: on a loaded machine pod start
		// alone has taken 12-15 s, on CI 2.6-3.9 s.
		goal := "goal ≤ 10 s met"
		if outage > 10 {
			goal = "GOAL MISSED (≤ 10 s)"
		}
		t.Logf("measured outage %.1fs: %s", outage, goal)
		if err := eventually(30*time.Second, func() error { _, err := L.curlFrom("hq", 1, 2, urlWeb()); return err }); err != nil {
			t.Errorf("hq does not reach web after the migration: %v", err)
		} else {
			t.Logf("hq reaches web through the VPNGateway %s (outage %.1fs)", legacyGW, outage)
		}
	})

	t.Run("the new objects are Authorized by DefaultAllow, the legacy CR and its children are gone", func(t *testing.T) {
		p := &vpnv1.VPNPeer{}
		if err := L.get(labNS, legacyTunnel, p); err != nil {
			t.Fatal(err)
		}
		if a := cond(p.Status.Conditions, vpnv1.ConditionAuthorized); a.Status != metav1.ConditionTrue || a.Reason != "DefaultAllow" {
			t.Errorf("peer %s Authorized=%s/%s", legacyTunnel, a.Status, a.Reason)
		}
		err := eventually(60*time.Second, func() error {
			if err := L.get(labNS, legacyGW, &ipsecv1.IPsecGateway{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the IPsecGateway is still there (%v)", err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// nothing owned by something that no longer exists
		gws := &vpnv1.VPNGatewayList{}
		if err := L.c.List(c, gws, client.InNamespace(labNS)); err != nil {
			t.Fatal(err)
		}
		live := map[string]bool{}
		for _, g := range gws.Items {
			live[string(g.UID)] = true
		}
		var orphans []string
		for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{}} {
			if err := eventually(30*time.Second, func() error {
				orphans = nil
				if err := L.c.List(c, list, client.InNamespace(labNS)); err != nil {
					return err
				}
				items, _ := metaItems(list)
				for _, o := range items {
					for _, ref := range o.GetOwnerReferences() {
						if (ref.Kind == "IPsecGateway" || ref.Kind == "VPNGateway") && !live[string(ref.UID)] {
							orphans = append(orphans, fmt.Sprintf("%T %s (owner %s %s)", o, o.GetName(), ref.Kind, ref.Name))
						}
					}
				}
				if len(orphans) > 0 {
					return fmt.Errorf("left behind: %s", strings.Join(orphans, ", "))
				}
				return nil
			}); err != nil {
				t.Error(err)
			}
		}
		t.Logf("peer %s Authorized by DefaultAllow; the legacy CR is gone and nothing of it is left", legacyTunnel)
	})
}

// metaItems are a list's items as objects with metadata.
func metaItems(list client.ObjectList) ([]metav1.Object, error) {
	var out []metav1.Object
	switch l := list.(type) {
	case *appsv1.DeploymentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	default:
		return nil, fmt.Errorf("unexpected list %T", list)
	}
	return out, nil
}
