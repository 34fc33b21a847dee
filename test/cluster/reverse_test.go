package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// reverseTarget is a reverse exposure of the lab: a gateway, the peer it reaches into and that
// peer's site (index) whose LAN host serves it.
type reverseTarget struct {
	gateway, peer, site string
	index               int
}

// lanListener serves HTTP on a site's LAN host, port 2222, answering "lan of <site>, you are
// <client address>" (socat, in the site's network namespace); stopped when the test ends.
func lanListener(t *testing.T, site string, index int) {
	t.Helper()
	listener(t, "lab-site-"+site, siteHost(index), 2222, "lan of "+site)
}

// listener serves HTTP on bind:port in a network namespace, answering "<what>, you are <client
// address>"; stopped when the test ends.
func listener(t *testing.T, netns, bind string, port int, what string) {
	t.Helper()
	// a script: socat would cut a SYSTEM command at its first comma
	script := filepath.Join(t.TempDir(), "answer.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nprintf 'HTTP/1.0 200 OK\\r\\n\\r\\n%s, you are %s\\n' \"$*\" \"$SOCAT_PEERADDR\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", netns, "socat",
		fmt.Sprintf("TCP-LISTEN:%d,bind=%s,fork,reuseaddr", port, bind), "EXEC:"+script+" "+what)
	if err := cmd.Start(); err != nil {
		t.Fatalf("listener in %s: %v", netns, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
}

// updateGateway re-reads a lab gateway, applies change and writes it back (retrying conflicts).
func updateGateway(name string, change func(*vpnv1.VPNGateway)) error {
	return eventually(30*time.Second, func() error {
		c, cancel := ctx(10 * time.Second)
		defer cancel()
		gw := &vpnv1.VPNGateway{}
		if err := L.c.Get(c, client.ObjectKey{Namespace: labNS, Name: name}, gw); err != nil {
			return err
		}
		change(gw)
		return L.c.Update(c, gw)
	})
}

func updatePeer(name string, change func(*vpnv1.VPNPeer)) error {
	return eventually(30*time.Second, func() error {
		c, cancel := ctx(10 * time.Second)
		defer cancel()
		p := &vpnv1.VPNPeer{}
		if err := L.c.Get(c, client.ObjectKey{Namespace: labNS, Name: name}, p); err != nil {
			return err
		}
		change(p)
		return L.c.Update(c, p)
	})
}

// 4f: reverse exposures are reached from their own tenant, through their Service. Each lab
// gateway gets a reverse exposure "erp" into a peer's LAN (the host-network IPsec gateway into
// hq's, the pod-network WireGuard gateway into roam's). A pod of the gateway's namespace reaches
// it through the <gateway>-erp Service, and the site sees the exposure's virtual IP; a pod of
// another namespace (inside the operator's internal sources all the same) does not.
func test4fReverseExposures(t *testing.T) {
	targets := []reverseTarget{{ipsecGW, "hq", "hq", 1}, {wgGW, "roam", "roam", 4}}
	for _, x := range targets {
		lanListener(t, x.site, x.index)
		target := vpnv1.ReverseExposure{Name: "erp", Target: vpnv1.ReverseExposureTarget{
			Address: siteHost(x.index), Ports: []intstr.IntOrString{intstr.FromInt32(2222)}}}
		if err := updateGateway(x.gateway, func(gw *vpnv1.VPNGateway) { gw.Spec.ReverseExposures = []vpnv1.ReverseExposure{target} }); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := updateGateway(x.gateway, func(gw *vpnv1.VPNGateway) { gw.Spec.ReverseExposures = nil }); err != nil {
				t.Error(err)
			}
		})
	}
	// hq's grants are explicit (web): it gets the reverse exposure too; roam has no
	// authorization block, the only peer of its gateway: it holds every exposure (DefaultAllow).
	var hqAuthz *vpnv1.Authorization
	if err := updatePeer("hq", func(p *vpnv1.VPNPeer) {
		hqAuthz = p.Spec.Authorization.DeepCopy()
		if p.Spec.Authorization == nil {
			p.Spec.Authorization = &vpnv1.Authorization{}
		}
		p.Spec.Authorization.ReverseExposures = []string{"erp"}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := updatePeer("hq", func(p *vpnv1.VPNPeer) { p.Spec.Authorization = hqAuthz }); err != nil {
			t.Error(err)
		}
	})

	suffix := randomHex(3)
	stranger := "lab-stranger-" + suffix
	c, cancel := ctx(60 * time.Second)
	defer cancel()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: stranger}}
	if err := L.c.Create(c, nsObj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := L.deleteAndWait(nsObj, 90*time.Second); err != nil {
			t.Error(err)
		}
	})
	own := labPod(labNS, "tenant-client-"+suffix, nil)
	for _, p := range []*corev1.Pod{own, labPod(stranger, "client", nil)} {
		if err := L.c.Create(c, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = L.deleteAndWait(own, 60*time.Second) })
	ips := map[string]string{}
	for _, p := range []struct{ ns, name string }{{labNS, own.Name}, {stranger, "client"}} {
		pod, err := L.podRunning(p.ns, p.name, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ips[p.ns] = pod.Status.PodIP
	}

	// On the node, the host-network gateway's ruleset admits the tenant's pod and not the
	// other namespace's (NetworkPolicy does not apply to a host-network pod: the ruleset is
	// all there is).
	t.Run("the host-network gateway's ruleset holds the tenant's pods only", func(t *testing.T) {
		err := eventually(60*time.Second, func() error {
			out, err := L.run(10*time.Second, "nft", "list", "set", "ip", "bnerd_vpn", "reverse_clients")
			if err != nil {
				return err
			}
			elems := strings.FieldsFunc(out, func(r rune) bool { return strings.ContainsRune(" \t\n,{}", r) })
			if !slices.Contains(elems, ips[labNS]) || slices.Contains(elems, ips[stranger]) {
				return fmt.Errorf("reverse_clients %q: want %s (%s) and not %s (%s)", strings.Join(strings.Fields(out), " "), ips[labNS], labNS, ips[stranger], stranger)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("reverse_clients holds %s (%s), not %s (%s)", ips[labNS], labNS, ips[stranger], stranger)
	})

	for _, x := range targets {
		t.Run(x.gateway, func(t *testing.T) {
			// the Service, named in the status, and the exposure's virtual IP
			var svc corev1.Service
			var vip string
			err := eventually(60*time.Second, func() error {
				gw, err := L.gateway(labNS, x.gateway)
				if err != nil {
					return err
				}
				if len(gw.Status.ReverseExposures) != 1 || gw.Status.ReverseExposures[0].Service != x.gateway+"-erp" {
					return fmt.Errorf("status.reverseExposures %+v", gw.Status.ReverseExposures)
				}
				vip = gw.Status.ReverseExposures[0].VirtualIP
				return L.get(labNS, x.gateway+"-erp", &svc)
			})
			if err != nil {
				t.Fatal(err)
			}
			url := fmt.Sprintf("http://%s:2222/", svc.Spec.ClusterIP)
			t.Logf("%s: reverse exposure erp into %s (%s:2222) through Service %s (%s), virtual IP %s",
				x.gateway, x.peer, siteHost(x.index), svc.Name, url, vip)

			t.Run("a pod of the gateway's namespace reaches it, from the virtual IP", func(t *testing.T) {
				var out string
				err := eventually(60*time.Second, func() error {
					var err error
					out, err = L.podExec(20*time.Second, labNS, own.Name, "/pause", "get", url)
					if err != nil {
						return err
					}
					if !strings.Contains(out, "lan of "+x.site+", you are "+vip) {
						return fmt.Errorf("unexpected answer %q (want the site to see %s)", strings.TrimSpace(out), vip)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s/%s: %s", labNS, own.Name, strings.TrimSpace(out))
			})

			t.Run("a pod of another namespace does not", func(t *testing.T) {
				for range 2 {
					out, err := L.podExec(20*time.Second, stranger, "client", "/pause", "get", url)
					if err == nil {
						t.Fatalf("%s/client reached the reverse exposure: %q", stranger, strings.TrimSpace(out))
					}
					t.Logf("%s/client refused: %s", stranger, firstLine(err.Error()))
				}
			})
		})
	}
}
