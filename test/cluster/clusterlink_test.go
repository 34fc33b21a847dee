package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// The lab's service cluster (hack/lab/common.sh SVC_*, set up by service-cluster.sh): a network
// namespace behind the node, linked by the ClusterLink lab-service-cluster.
const (
	svcSite    = "svc" // its network namespace is lab-site-svc
	svcNetns   = "lab-site-svc"
	svcVia     = "198.51.100.202"
	svcRange   = "203.0.113.160/28"
	svcHost    = "203.0.113.161"
	svcLink    = "lab-service-cluster"
	svcPort    = 2223
	svcExposed = "svc-api"
)

// linkReady waits for a ClusterLink's Ready condition to have the status and reason; returns it
// with the link.
func linkReady(name string, status metav1.ConditionStatus, reason string) (*ipsecv1.ClusterLink, *metav1.Condition, error) {
	l := &ipsecv1.ClusterLink{}
	var cond *metav1.Condition
	err := eventually(60*time.Second, func() error {
		if err := L.get("", name, l); err != nil {
			return err
		}
		cond = apimeta.FindStatusCondition(l.Status.Conditions, "Ready")
		if cond == nil || cond.Status != status || cond.Reason != reason || cond.ObservedGeneration != l.Generation {
			return fmt.Errorf("ClusterLink %s: Ready %+v, want %s/%s for generation %d", name, cond, status, reason, l.Generation)
		}
		return nil
	})
	return l, cond, err
}

// 4h: a service cluster linked by a ClusterLink. The link is Ready and lists the lab's gateways;
// a link overlapping a peer's LAN is refused naming both; an exposure of the WireGuard gateway
// (a pod) targets a service in the service cluster and the roam site reaches it; a workload in
// the service cluster reaches a reverse exposure into roam's LAN, through the gateway pod's
// address (the fabric routes pod addresses: a ClusterIP would not do, kube-proxy masquerades
// sources outside the cluster's pod CIDR to the node's address, hiding the link's range); the
// host-network gateway added no route to the node's table.
func test4hClusterLink(t *testing.T) {
	link, cond, err := linkReady(svcLink, metav1.ConditionTrue, "Ready")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ClusterLink %s %v via %s: Ready (%s), gateways %v", link.Name, link.Spec.CIDRs, link.Spec.Via, cond.Message, link.Status.Gateways)
	for _, gw := range []string{labNS + "/" + ipsecGW, labNS + "/" + wgGW} {
		if !slices.Contains(link.Status.Gateways, gw) {
			t.Errorf("status.gateways %v lacks %s", link.Status.Gateways, gw)
		}
	}

	t.Run("a link overlapping a peer's LAN is refused, naming both", func(t *testing.T) {
		bad := &ipsecv1.ClusterLink{
			ObjectMeta: metav1.ObjectMeta{Name: "lab-overlap-" + randomHex(3)},
			Spec:       ipsecv1.ClusterLinkSpec{CIDRs: []string{siteLAN(1)}, Via: svcVia},
		}
		c, cancel := ctx(20 * time.Second)
		defer cancel()
		if err := L.c.Create(c, bad); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = L.deleteAndWait(bad, 60*time.Second) })
		_, cond, err := linkReady(bad.Name, metav1.ConditionFalse, "OverlapsPeerSubnet")
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("cidr %s overlaps peer %s/hq subnet %s", siteLAN(1), labNS, siteLAN(1))
		if cond.Message != want {
			t.Fatalf("message %q, want %q", cond.Message, want)
		}
		t.Logf("ClusterLink %s: Ready=False %s: %s", bad.Name, cond.Reason, cond.Message)
	})

	// The WireGuard gateway gets an exposure into the service cluster and a reverse exposure
	// into roam's LAN (roam is its only peer: it holds both).
	listener(t, svcNetns, svcHost, svcPort, "service cluster")
	lanListener(t, "roam", 4)
	if err := updateGateway(wgGW, func(gw *vpnv1.VPNGateway) {
		gw.Spec.Exposures = append(gw.Spec.Exposures, vpnv1.Exposure{Name: svcExposed, Target: vpnv1.ExposureTarget{
			Address: svcHost, Ports: []intstr.IntOrString{intstr.FromInt32(svcPort)}}})
		gw.Spec.ReverseExposures = []vpnv1.ReverseExposure{{Name: "erp", Target: vpnv1.ReverseExposureTarget{
			Address: siteHost(4), Ports: []intstr.IntOrString{intstr.FromInt32(2222)}}}}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := updateGateway(wgGW, func(gw *vpnv1.VPNGateway) {
			gw.Spec.Exposures = slices.DeleteFunc(gw.Spec.Exposures, func(e vpnv1.Exposure) bool { return e.Name == svcExposed })
			gw.Spec.ReverseExposures = nil
		}); err != nil {
			t.Error(err)
		}
	})
	var vipSvc, vipErp string
	if err := eventually(60*time.Second, func() error {
		gw, err := L.gateway(labNS, wgGW)
		if err != nil {
			return err
		}
		vipSvc = exposureVIP(gw, svcExposed)
		if len(gw.Status.ReverseExposures) == 1 {
			vipErp = gw.Status.ReverseExposures[0].VirtualIP
		}
		if vipSvc == "" || vipErp == "" {
			return fmt.Errorf("virtual IPs not assigned yet: %s %q, erp %q", svcExposed, vipSvc, vipErp)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("roam reaches a service in the service cluster through an exposure", func(t *testing.T) {
		url := fmt.Sprintf("http://%s:%d/", vipSvc, svcPort)
		var out string
		err := eventually(60*time.Second, func() error {
			var err error
			out, err = L.curlFrom("roam", 4, 3, url)
			if err != nil {
				return err
			}
			if !strings.Contains(out, "service cluster, you are ") {
				return fmt.Errorf("unexpected answer %q", strings.TrimSpace(out))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("roam -> %s (exposure %s, target %s:%d in %s): %s", url, svcExposed, svcHost, svcPort, svcRange, strings.TrimSpace(out))
	})

	t.Run("a workload in the service cluster reaches a reverse exposure", func(t *testing.T) {
		var pod *corev1.Pod
		var svc corev1.Service
		err := eventually(60*time.Second, func() error {
			var err error
			if pod, err = L.gatewayPod(wgGW); err != nil {
				return err
			}
			return L.get(labNS, wgGW+"-erp", &svc)
		})
		if err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://%s:%s/", pod.Status.PodIP, svc.Spec.Ports[0].TargetPort.String())
		var out string
		err = eventually(60*time.Second, func() error {
			var err error
			out, err = L.curlFromAddr(svcSite, svcHost, 3, url)
			if err != nil {
				return err
			}
			if !strings.Contains(out, "lan of roam, you are "+vipErp) {
				return fmt.Errorf("unexpected answer %q (want roam to see %s)", strings.TrimSpace(out), vipErp)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (service cluster) -> %s (gateway pod %s, reverse exposure erp): %s", svcHost, url, pod.Name, strings.TrimSpace(out))
	})

	t.Run("without the link, the service cluster is refused; with it again, admitted", func(t *testing.T) {
		pod, err := L.gatewayPod(wgGW)
		if err != nil {
			t.Fatal(err)
		}
		var svc corev1.Service
		if err := L.get(labNS, wgGW+"-erp", &svc); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://%s:%s/", pod.Status.PodIP, svc.Spec.Ports[0].TargetPort.String())
		spec := link.Spec
		if err := L.deleteAndWait(link, 60*time.Second); err != nil {
			t.Fatal(err)
		}
		recreated := false
		recreate := func() {
			if recreated {
				return
			}
			recreated = true
			c, cancel := ctx(20 * time.Second)
			defer cancel()
			if err := L.c.Create(c, &ipsecv1.ClusterLink{ObjectMeta: metav1.ObjectMeta{Name: svcLink}, Spec: spec}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := linkReady(svcLink, metav1.ConditionTrue, "Ready"); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(recreate) // the lab keeps its link whatever happens here
		var refusal error
		if err := eventually(60*time.Second, func() error {
			out, err := L.curlFromAddr(svcSite, svcHost, 2, url)
			if err == nil {
				return fmt.Errorf("still admitted without the link: %q", strings.TrimSpace(out))
			}
			refusal = err
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("link deleted: %s -> %s refused (%s)", svcHost, url, firstLine(refusal.Error()))
		recreate()
		if err := eventually(60*time.Second, func() error {
			out, err := L.curlFromAddr(svcSite, svcHost, 3, url)
			if err != nil {
				return err
			}
			if !strings.Contains(out, "lan of roam, you are "+vipErp) {
				return fmt.Errorf("unexpected answer %q", strings.TrimSpace(out))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("link re-created: Ready, %s admitted again", svcHost)
	})

	t.Run("no gateway added a route to the node's table", func(t *testing.T) {
		out, err := L.run(10*time.Second, "ip", "-4", "route", "show", "proto", "191")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "" {
			t.Fatalf("routes of protocol 191 (the agent's ClusterLink routes) on the node: %q", out)
		}
		t.Logf("the node's table holds no ClusterLink route of a gateway (proto 191): the host-network gateway left it to the node's routing")
	})
}
