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
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labnet"
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
	sinks := map[string]string{}
	for _, x := range targets {
		addReverseExposure(t, x)
		sinks[x.gateway] = udpSink(t, x.site, x.index)
	}
	// hq's grants are explicit (web): it gets the reverse exposure too; roam has no
	// authorization block, the only peer of its gateway: it holds every exposure (DefaultAllow).
	grantReverseExposure(t, "hq")

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
	pods := map[string]*corev1.Pod{}
	for _, p := range []struct{ ns, name string }{{labNS, own.Name}, {stranger, "client"}} {
		pod, err := L.podRunning(p.ns, p.name, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ips[p.ns], pods[p.ns] = pod.Status.PodIP, pod
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
			svc, vip := reverseExposureService(t, x.gateway)
			url := fmt.Sprintf("http://%s:2222/", svc.Spec.ClusterIP)
			t.Logf("%s: reverse exposure erp into %s (%s:2222) through Service %s (%s), virtual IP %s",
				x.gateway, x.peer, siteHost(x.index), svc.Name, url, vip)

			t.Run("a pod of the gateway's namespace reaches it, from the virtual IP", func(t *testing.T) {
				out := reverseExposureReached(t, own.Name, url, x.site, vip)
				t.Logf("%s/%s: %s", labNS, own.Name, out)
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

			// The ruleset admits the tenant pod by its source address (reverse_clients, or the
			// Service's NetworkPolicy); the pod network keeps a pod from sending as another.
			t.Run("a pod of another namespace sending as the tenant's pod is dropped by the pod network", func(t *testing.T) {
				gwPod, err := L.gatewayPod(x.gateway)
				if err != nil {
					t.Fatal(err)
				}
				udp := servicePort(t, &svc, corev1.ProtocolUDP)
				dsts := []string{
					fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, udp.Port),                  // the Service
					fmt.Sprintf("%s:%d", gwPod.Status.PodIP, udp.TargetPort.IntValue()), // its endpoint
				}
				spoofAs(t, pods[stranger], ips[labNS])
				spoofedBefore := guardSpoofed(t)
				forged := "forged-" + randomHex(3)
				for _, dst := range dsts {
					for range 3 {
						if err := sendUDP(pods[stranger], forged, dst, ips[labNS]); err != nil {
							t.Fatal(err)
						}
					}
				}
				// the tenant's own datagram, sent after the forged ones on the same path, arrives
				got := udpReceived(t, sinks[x.gateway], pods[labNS], "genuine-"+randomHex(3), dsts[0], "")
				if strings.Contains(got, forged) {
					t.Fatalf("the site received datagrams %s/client forged as %s: %q", stranger, ips[labNS], got)
				}
				spoofed := guardSpoofed(t) - spoofedBefore
				if spoofed < uint64(3*len(dsts)) {
					t.Fatalf("the pod source guard dropped %d frames, want at least the %d forged datagrams", spoofed, 3*len(dsts))
				}
				t.Logf("%d datagrams from %s/client as %s (to %s): none at the site, %d dropped by the pod source guard; %s/%s's own arrived",
					3*len(dsts), stranger, ips[labNS], strings.Join(dsts, " and "), spoofed, labNS, own.Name)
			})
		})
	}

	// Control: with the other namespace's pod's port left unchecked, its forged datagrams reach
	// the site through the exposure: what stops them above is the pod network's source check,
	// not the gateway.
	t.Run("control: without the pod network's source check the forged datagrams arrive", func(t *testing.T) {
		spoofAs(t, pods[stranger], ips[labNS])
		port := guardPort(t, ips[stranger])
		if _, err := L.run(10*time.Second, "nft", "delete", "element", "bridge", labnet.TableName, "guarded_ports", "{ "+port+" }"); err != nil {
			t.Fatal(err)
		}
		reguard := func() error {
			_, err := L.run(10*time.Second, "nft", "add", "element", "bridge", labnet.TableName, "guarded_ports", "{ "+port+" }")
			return err
		}
		defer func() {
			if err := reguard(); err != nil {
				t.Error(err)
			}
		}()
		for _, x := range targets {
			var svc corev1.Service
			if err := L.get(labNS, x.gateway+"-erp", &svc); err != nil {
				t.Fatal(err)
			}
			dst := fmt.Sprintf("%s:%d", svc.Spec.ClusterIP, servicePort(t, &svc, corev1.ProtocolUDP).Port)
			udpReceived(t, sinks[x.gateway], pods[stranger], "unchecked-"+randomHex(3), dst, ips[labNS])
			t.Logf("%s: unchecked, %s/client's datagram as %s reached %s's site", x.gateway, stranger, ips[labNS], x.site)
		}
	})
}

// spoofAs gives a pod a second address, another pod's: the hostile pod of the reverse exposure
// steps (the node's root, through nsenter, stands for a pod with NET_ADMIN). Its ARP keeps to its
// own address (arp_announce, arp_ignore), so only the datagrams it forges carry the other. The
// address is taken back when the test ends.
func spoofAs(t *testing.T, pod *corev1.Pod, addr string) {
	t.Helper()
	if _, err := L.inPodNetns(pod, "c", "sh", "-c",
		"echo 2 >/proc/sys/net/ipv4/conf/eth0/arp_announce && echo 2 >/proc/sys/net/ipv4/conf/eth0/arp_ignore && ip addr replace "+addr+"/32 dev eth0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := L.inPodNetns(pod, "c", "ip", "addr", "del", addr+"/32", "dev", "eth0"); err != nil {
			t.Error(err)
		}
	})
}

// udpSink receives UDP datagrams on a site's LAN host, port 2223, appending them to a file whose
// path it returns; stopped when the test ends.
func udpSink(t *testing.T, site string, index int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "udp-"+site)
	cmd := exec.Command("ip", "netns", "exec", "lab-site-"+site, "socat", "-u",
		fmt.Sprintf("UDP-RECV:2223,bind=%s,reuseaddr", siteHost(index)), "OPEN:"+path+",creat,append")
	if err := cmd.Start(); err != nil {
		t.Fatalf("UDP sink in lab-site-%s: %v", site, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return path
}

// sendUDP sends one datagram "<msg>\n" from a pod's network to dst (address:port), from the
// address bind when it is set.
func sendUDP(pod *corev1.Pod, msg, dst, bind string) error {
	to := "UDP-SENDTO:" + dst
	if bind != "" {
		to += ",bind=" + bind
	}
	_, err := L.inPodNetns(pod, "c", "sh", "-c", "echo "+msg+" | socat -u - "+to)
	return err
}

// udpReceived sends msg from a pod to dst until the sink has it (a datagram may be lost while a
// path is set up) and returns everything the sink holds then.
func udpReceived(t *testing.T, sink string, pod *corev1.Pod, msg, dst, bind string) string {
	t.Helper()
	var got string
	err := eventually(60*time.Second, func() error {
		if err := sendUDP(pod, msg, dst, bind); err != nil {
			return err
		}
		b, err := os.ReadFile(sink)
		if got = string(b); err != nil || !strings.Contains(got, msg) {
			return fmt.Errorf("%s from %s/%s to %s not at the site (it holds %q, %v)", msg, pod.Namespace, pod.Name, dst, got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func servicePort(t *testing.T, svc *corev1.Service, proto corev1.Protocol) corev1.ServicePort {
	t.Helper()
	for _, p := range svc.Spec.Ports {
		if p.Protocol == proto {
			return p
		}
	}
	t.Fatalf("Service %s has no %s port: %+v", svc.Name, proto, svc.Spec.Ports)
	return corev1.ServicePort{}
}

// guardSpoofed is the frames the lab's pod source guard dropped so far.
func guardSpoofed(t *testing.T) uint64 {
	t.Helper()
	c, cancel := ctx(10 * time.Second)
	defer cancel()
	n, err := labnet.Guard{}.Spoofed(c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// guardPort is the bridge port the pod source guard admits addr on: the pod's host veth.
func guardPort(t *testing.T, addr string) string {
	t.Helper()
	c, cancel := ctx(10 * time.Second)
	defer cancel()
	srcs, err := labnet.Guard{}.Sources(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range srcs {
		if s.Addr.String() == addr {
			return s.Port
		}
	}
	t.Fatalf("the pod source guard admits %s on no port: %+v", addr, srcs)
	return ""
}

// addReverseExposure gives the gateway the reverse exposure "erp" to its site's LAN host (TCP
// 2222, answered by a listener there, and UDP 2223) until the test ends.
func addReverseExposure(t *testing.T, x reverseTarget) {
	t.Helper()
	lanListener(t, x.site, x.index)
	target := vpnv1.ReverseExposure{Name: "erp", Target: vpnv1.ReverseExposureTarget{
		Address: siteHost(x.index), Ports: []intstr.IntOrString{intstr.FromInt32(2222), intstr.FromString("2223/udp")}}}
	if err := updateGateway(x.gateway, func(gw *vpnv1.VPNGateway) { gw.Spec.ReverseExposures = []vpnv1.ReverseExposure{target} }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := updateGateway(x.gateway, func(gw *vpnv1.VPNGateway) { gw.Spec.ReverseExposures = nil }); err != nil {
			t.Error(err)
		}
	})
}

// grantReverseExposure adds "erp" to a peer's reverse-exposure grants until the test ends.
func grantReverseExposure(t *testing.T, peer string) {
	t.Helper()
	var authz *vpnv1.Authorization
	if err := updatePeer(peer, func(p *vpnv1.VPNPeer) {
		authz = p.Spec.Authorization.DeepCopy()
		if p.Spec.Authorization == nil {
			p.Spec.Authorization = &vpnv1.Authorization{}
		}
		p.Spec.Authorization.ReverseExposures = []string{"erp"}
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := updatePeer(peer, func(p *vpnv1.VPNPeer) { p.Spec.Authorization = authz }); err != nil {
			t.Error(err)
		}
	})
}

// reverseExposureService is the Service of a gateway's reverse exposure "erp", named in its
// status, and the exposure's virtual IP (the source its site sees).
func reverseExposureService(t *testing.T, gateway string) (corev1.Service, string) {
	t.Helper()
	var svc corev1.Service
	var vip string
	err := eventually(60*time.Second, func() error {
		gw, err := L.gateway(labNS, gateway)
		if err != nil {
			return err
		}
		if len(gw.Status.ReverseExposures) != 1 || gw.Status.ReverseExposures[0].Service != gateway+"-erp" {
			return fmt.Errorf("status.reverseExposures %+v", gw.Status.ReverseExposures)
		}
		vip = gw.Status.ReverseExposures[0].VirtualIP
		return L.get(labNS, gateway+"-erp", &svc)
	})
	if err != nil {
		t.Fatal(err)
	}
	return svc, vip
}

// reverseExposureReached waits until the pod (of the lab's namespace) gets the site's LAN
// listener's answer through url, the site seeing the exposure's virtual IP; it returns the answer.
func reverseExposureReached(t *testing.T, pod, url, site, vip string) string {
	t.Helper()
	var out string
	err := eventually(60*time.Second, func() error {
		var err error
		if out, err = L.podExec(20*time.Second, labNS, pod, "/pause", "get", url); err != nil {
			return err
		}
		if !strings.Contains(out, "lan of "+site+", you are "+vip) {
			return fmt.Errorf("unexpected answer %q (want the site to see %s)", strings.TrimSpace(out), vip)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}
