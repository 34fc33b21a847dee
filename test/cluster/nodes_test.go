package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// workerTaint (PreferNoSchedule) keeps the scheduler's own choices on node 1: the other nodes
// take the pods placed there (a node selector or a gateway's node) and those that tolerate it
// (WORKER_TAINT in hack/lab/nodes.sh).
const workerTaint = "lab.bnerd.net/worker"

// labNodeCount is how many nodes the lab runs (LAB_NODES, default 3, as in hack/lab/nodes.sh).
func labNodeCount() int {
	if n, err := strconv.Atoi(os.Getenv("LAB_NODES")); err == nil {
		return n
	}
	return 3
}

// labNodeName is the name of the lab's node i (1-based; node 1 is the machine).
func labNodeName(i int) string {
	if i == 1 {
		return labNode
	}
	return fmt.Sprintf("lab-node-%d", i)
}

// onNode places a pod on a node through the scheduler (a node selector, and the worker taint
// tolerated); "" leaves the pod as it is.
func onNode(p *corev1.Pod, node string) *corev1.Pod {
	if node == "" {
		return p
	}
	p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: workerTaint, Operator: corev1.TolerationOpExists})
	return p
}

// 2b: the lab's nodes, and paths that cross them: a site through a gateway on node 1 to the
// sample's backend on the last node, a pod on node 2 through a gateway on node 1 to a site,
// NetworkPolicy between pods of three nodes; then each fault of hack/lab/node.sh once: node 2
// frozen under a host-network gateway (how long until the API calls it NotReady, how long that
// gateway is unreachable, the gateways of node 1 untouched), the backend's node killed, cut off,
// partitioned, its kubelet restarted, drained.
func test2bAcrossNodes(t *testing.T) {
	want := labNodeCount()
	if want < 3 {
		t.Fatalf("the lab runs %d nodes; the paths across nodes need 3 (LAB_NODES)", want)
	}
	a, b, c := labNodeName(1), labNodeName(2), labNodeName(3)

	t.Run("every node Ready, each with its own address and pod range", func(t *testing.T) {
		cx, cancel := ctx(20 * time.Second)
		defer cancel()
		var nodes corev1.NodeList
		if err := L.c.List(cx, &nodes); err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) != want {
			t.Fatalf("%d nodes, want %d", len(nodes.Items), want)
		}
		addrs, ranges := map[string]string{}, map[string]string{}
		for _, n := range nodes.Items {
			ready, ip := false, ""
			for _, cond := range n.Status.Conditions {
				ready = ready || cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue
			}
			for _, ad := range n.Status.Addresses {
				if ad.Type == corev1.NodeInternalIP {
					ip = ad.Address
				}
			}
			if !ready {
				t.Errorf("node %s is not Ready", n.Name)
			}
			if other, dup := addrs[ip]; ip == "" || dup {
				t.Errorf("node %s: address %q (also %s's)", n.Name, ip, other)
			}
			if other, dup := ranges[n.Spec.PodCIDR]; n.Spec.PodCIDR == "" || dup {
				t.Errorf("node %s: pod range %q (also %s's)", n.Name, n.Spec.PodCIDR, other)
			}
			addrs[ip], ranges[n.Spec.PodCIDR] = n.Name, n.Name
			t.Logf("%s Ready, address %s, pods %s", n.Name, ip, n.Spec.PodCIDR)
		}
	})

	for _, gw := range []string{ipsecGW, wgGW} {
		if p, err := L.gatewayPod(gw); err != nil {
			t.Fatal(err)
		} else if p.Spec.NodeName != a {
			t.Fatalf("gateway %s runs on %s; the paths below expect it on %s", gw, p.Spec.NodeName, a)
		}
	}

	// the lab places the sample's backend on the last node (hack/lab/lab.sh)
	backendNode := ""
	if pods, err := backendPods(); err != nil || len(pods) != 1 {
		t.Fatalf("the backend's pods: %d, %v", len(pods), err)
	} else if backendNode = pods[0].Spec.NodeName; backendNode == a {
		t.Fatalf("the backend runs on %s with the gateways", a)
	}

	t.Run("sites reach a backend on another node through the gateways", func(t *testing.T) {
		for _, s := range []struct {
			site, gw string
			i        int
			url      string
		}{{"hq", ipsecGW + " (host network)", 1, urlWeb()}, {"roam", wgGW + " (pod network)", 4, urlWGWeb()}} {
			if err := siteLive(s.site, s.i, s.url, 60*time.Second); err != nil {
				t.Errorf("%s -> %s on %s -> backend on %s: %v", s.site, s.gw, a, backendNode, err)
				continue
			}
			t.Logf("%s -> %s on %s -> backend on %s (%s): answered", s.site, s.gw, a, backendNode, s.url)
		}
	})

	t.Run("a pod on another node reaches a site through a gateway's reverse exposure", func(t *testing.T) {
		x := reverseTarget{ipsecGW, "hq", "hq", 1}
		addReverseExposure(t, x)
		grantReverseExposure(t, x.peer)
		svc, vip := reverseExposureService(t, x.gateway)
		pod := onNode(labPod(labNS, "remote-client-"+randomHex(3), nil), b)
		cx, cancel := ctx(30 * time.Second)
		defer cancel()
		if err := L.c.Create(cx, pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = L.deleteAndWait(pod, 60*time.Second) })
		running, err := L.podRunning(labNS, pod.Name, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if running.Spec.NodeName != b {
			t.Fatalf("the client runs on %s, not %s", running.Spec.NodeName, b)
		}
		url := fmt.Sprintf("http://%s:2222/", svc.Spec.ClusterIP)
		out := reverseExposureReached(t, pod.Name, url, x.site, vip)
		t.Logf("%s (%s, on %s) -> %s -> %s on %s -> %s: %s", pod.Name, running.Status.PodIP, b, url, x.gateway, a, x.site, out)
	})

	t.Run("NetworkPolicy is enforced between pods of different nodes", func(t *testing.T) {
		networkPolicyEnforced(t, podPlacement{server: b, ownClient: c, otherClient: a})
	})

	// the faults of hack/lab/node.sh, each once: a freeze of node 2 under a gateway, the others
	// on the backend's node, with hq probing the backend through its gateway on node 1
	t.Run("gateways' node frozen: NotReady after the grace period, the pod-network gateway back on another node, the host-network one when the node is back", func(t *testing.T) {
		url := edgeGateway(t, b)
		t.Logf("gateway %s moved to %s, roam served again after %.1fs", wgGW, b, moveGateway(t, wgGW, b, roamServed).Seconds())
		t.Cleanup(func() { moveGateway(t, wgGW, a, roamServed) })
		gatewayNodeLost(t, b, url)
	})
	t.Run("the WireGuard gateway's node drained: its pod started on another node, roam's outage measured", func(t *testing.T) {
		t.Logf("gateway %s moved to %s, roam served again after %.1fs", wgGW, b, moveGateway(t, wgGW, b, roamServed).Seconds())
		t.Cleanup(func() { moveGateway(t, wgGW, a, roamServed) })
		var moved string
		sums := withNodeFaultProbed(t, b, "drain", "uncordon", func() {
			var err error
			if moved, err = wgGatewayServedOffNode(b, 2*time.Minute); err != nil {
				t.Errorf("the WireGuard gateway after draining %s: %v", b, err)
			}
		}, []faultSite{roamSite(0), hqSite(0)})
		roam, hq := sums[0], sums[1]
		if hq.failed != 0 {
			t.Errorf("hq -> %s on %s -> the backend: %d probes failed while %s was drained: %s", ipsecGW, a, hq.failed, b, strings.Join(hq.why, "; "))
		}
		t.Logf("node %s drained: WireGuard gateway %s evicted and started on %s, roam unreachable for %.1fs (a single-pod gateway: the old pod stops before the new one starts)",
			b, wgGW, moved, roam.longestOutage.Seconds())
	})
	t.Run("a node killed and booted again: the backend unreachable, then served again", func(t *testing.T) {
		sum := withNodeFault(t, backendNode, "kill", "boot", func() { siteCutOff(t, "hq", 1, urlWeb()) })
		if sum.failed == 0 {
			t.Errorf("no probe failed while %s was down", backendNode)
		}
	})
	t.Run("a node cut off: the backend unreachable until its link is restored", func(t *testing.T) {
		sum := withNodeFault(t, backendNode, "cut", "restore", func() { siteCutOff(t, "hq", 1, urlWeb()) })
		if sum.failed == 0 {
			t.Errorf("no probe failed while %s was cut off", backendNode)
		}
	})
	t.Run("a node partitioned from the control plane: its pods serve on", func(t *testing.T) {
		sum := withNodeFault(t, backendNode, "partition", "heal", func() {
			// the API server cannot reach the node's kubelet any more
			err := eventually(30*time.Second, func() error {
				pods, err := backendPods()
				if err != nil || len(pods) == 0 {
					return fmt.Errorf("the backend's pod: %v", err)
				}
				if _, err := L.podExec(5*time.Second, labNS, pods[0].Name, "/pause", "get", "http://127.0.0.1:8080/"); err == nil {
					return fmt.Errorf("kubectl exec into the backend on %s still works", backendNode)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
		if sum.failed != 0 {
			t.Errorf("the backend's node was cut from the control plane only, yet %d probes failed: %s", sum.failed, strings.Join(sum.why, "; "))
		}
	})
	t.Run("a node's kubelet restarted: its pods serve on", func(t *testing.T) {
		sum := withNodeFault(t, backendNode, "restart-kubelet", "", func() { nodeReady(t, backendNode, 60*time.Second) })
		if sum.failed != 0 {
			t.Errorf("%d probes failed while %s's kubelet restarted: %s", sum.failed, backendNode, strings.Join(sum.why, "; "))
		}
	})
	t.Run("a node drained: the backend evicted, back once it is uncordoned", func(t *testing.T) {
		sum := withNodeFault(t, backendNode, "drain", "uncordon", func() {
			siteCutOff(t, "hq", 1, urlWeb())
			pods, err := backendPods()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods {
				if p.Spec.NodeName == backendNode {
					t.Errorf("backend pod %s still bound to the drained %s", p.Name, backendNode)
				}
			}
		})
		if sum.failed == 0 {
			t.Errorf("no probe failed while %s, the backend's only node, was drained", backendNode)
		}
	})
}

// siteCutOff waits until a site's request to url fails.
func siteCutOff(t *testing.T, site string, i int, url string) {
	t.Helper()
	err := eventually(30*time.Second, func() error {
		if _, err := L.curlFrom(site, i, 2, url); err == nil {
			return fmt.Errorf("%s still reaches %s", site, url)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// nodeScript runs hack/lab/node.sh ACTION NODE.
func nodeScript(action, node string) error {
	_, err := L.run(3*time.Minute, filepath.Join(L.root, "hack", "lab", "node.sh"), action, node)
	return err
}

// nodeReady waits until a node's Ready condition is (or is not) True.
func nodeReady(t *testing.T, node string, timeout time.Duration) {
	t.Helper()
	if err := nodeCondition(node, true, timeout); err != nil {
		t.Error(err)
	}
}

func nodeCondition(node string, ready bool, timeout time.Duration) error {
	return eventually(timeout, func() error {
		var n corev1.Node
		if err := L.get("", node, &n); err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && (c.Status == corev1.ConditionTrue) == ready {
				return nil
			}
		}
		return fmt.Errorf("node %s: Ready is not %v", node, ready)
	})
}

// withNodeFault runs `node.sh fault NODE`, then during(), then `node.sh undo NODE` (when undo is
// not ""), with hq probing the backend through its gateway from before the fault until it
// reaches the backend again afterwards; it logs and returns the probes' summary.
func withNodeFault(t *testing.T, node, fault, undo string, during func()) probeSummary {
	t.Helper()
	return withNodeFaultProbed(t, node, fault, undo, during, []faultSite{hqSite(0)})[0]
}

// withNodeFaultProbed is withNodeFault with the given sites probing, each its own URL; it
// returns their summaries in the same order.
func withNodeFaultProbed(t *testing.T, node, fault, undo string, during func(), sites []faultSite) []probeSummary {
	t.Helper()
	var probes []*prober
	for _, s := range sites {
		if err := siteLive(s.name, s.index, s.url(), 60*time.Second); err != nil {
			t.Fatalf("%s before the fault: %v", s.name, err)
		}
	}
	sitesSteady(t, sites, steadySpan)
	for _, s := range sites {
		probes = append(probes, startProber(s.name, s.index, s.url()))
	}
	undone := undo == ""
	t.Cleanup(func() {
		if !undone {
			_ = nodeScript(undo, node)
		}
	})
	if err := nodeScript(fault, node); err != nil {
		for _, p := range probes {
			p.finish()
		}
		t.Fatal(err)
	}
	during()
	if !undone {
		undone = true
		if err := nodeScript(undo, node); err != nil {
			t.Error(err)
		}
	}
	nodeReady(t, node, 120*time.Second)
	for _, s := range sites {
		if err := siteLive(s.name, s.index, s.url(), 90*time.Second); err != nil {
			t.Errorf("%s after %s %s: %v", s.name, fault, node, err)
		}
	}
	atLeastProbes(t, probes)
	var sums []probeSummary
	for i, p := range probes {
		sum := p.finish()
		t.Logf("%s %s: %s -> %s: %s", fault, node, sites[i].name, sites[i].url(), sum)
		sums = append(sums, sum)
	}
	return sums
}

// The gateway the e2e runs on another node than node 1 for a node lost under it: host network
// (its node's address is its public address), pinned to the node, exposing web to its site.
const (
	edgeGW        = "edge-gw"
	edgeSite      = "edge"
	edgeSiteIndex = 11
)

// edgeGateway runs edgeGW on node with its peer and its site, and waits until the site reaches
// web through it; it returns that URL. The gateway and its peer are removed at cleanup.
func edgeGateway(t *testing.T, node string) string {
	t.Helper()
	applyYAML(t, ipsecGatewayYAML(edgeGW, fmt.Sprintf("{hostNetwork: {nodeName: %s}}", node)))
	t.Cleanup(func() { removeGatewayAndPeer(t, edgeGW, edgeSite) })
	if err := L.ipsecPeerOf(edgeGW, edgeSite, edgeSiteIndex, "lab-edge-"+randomHex(12), []string{"web"}); err != nil {
		t.Fatal(err)
	}
	gw, c, err := gatewayCondition(edgeGW, vpnv1.ConditionGatewayAvailable, metav1.ConditionTrue, "", 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := L.gatewayPod(edgeGW)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != node {
		t.Fatalf("gateway %s runs on %s, not %s", edgeGW, pod.Spec.NodeName, node)
	}
	if out, err := L.sh(2*time.Minute, fmt.Sprintf(`"$LAB_ROOT/hack/lab/site.sh" %s %d`, edgeSite, edgeSiteIndex)); err != nil {
		t.Fatalf("site %s: %v %s", edgeSite, err, out)
	}
	url := "http://" + exposureVIP(gw, "web") + ":8080/"
	if err := siteLive(edgeSite, edgeSiteIndex, url, 2*time.Minute); err != nil {
		t.Fatalf("%s -> %s on %s -> web: %v", edgeSite, edgeGW, node, err)
	}
	t.Logf("%s -> %s on %s (public address %s, %s) -> web %s: answered", edgeSite, edgeGW, node, gw.Status.PublicAddress, c.Reason, url)
	return url
}

// removeGatewayAndPeer deletes a gateway of the e2e's own with its one peer (named after its
// site) and the peer's PSK Secret, and waits until they are gone.
func removeGatewayAndPeer(t *testing.T, gw, site string) {
	t.Helper()
	for _, o := range []client.Object{
		&vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: site, Namespace: labNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: site + "-psk", Namespace: labNS}},
		&vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: gw, Namespace: labNS}},
	} {
		if err := L.deleteAndWait(o, 2*time.Minute); err != nil {
			t.Errorf("removing %s: %v", o.GetName(), err)
		}
	}
}

// moveGateway puts a gateway's pod on node: the other nodes are cordoned while its pod is
// replaced, then uncordoned; it waits until served (the gateway's site answers again) and
// returns how long that took from the pod's deletion.
func moveGateway(t *testing.T, gw, node string, served func(timeout time.Duration) error) time.Duration {
	t.Helper()
	p, err := L.gatewayPod(gw)
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName == node {
		return 0
	}
	var others []string
	for i := 1; i <= labNodeCount(); i++ {
		if n := labNodeName(i); n != node {
			others = append(others, n)
		}
	}
	if out, err := L.sh(60*time.Second, "kubectl cordon "+strings.Join(others, " ")); err != nil {
		t.Fatalf("cordon: %v %s", err, out)
	}
	defer func() {
		if out, err := L.sh(60*time.Second, "kubectl uncordon "+strings.Join(others, " ")); err != nil {
			t.Errorf("uncordon: %v %s", err, out)
		}
	}()
	t0 := time.Now()
	deleteGatewayPod(t, gw)
	err = eventually(90*time.Second, func() error {
		p, err := L.gatewayPod(gw)
		if err != nil {
			return err
		}
		if p.Spec.NodeName != node {
			return fmt.Errorf("%s runs on %s", p.Name, p.Spec.NodeName)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("gateway %s not on %s: %v", gw, node, err)
	}
	if err := served(90 * time.Second); err != nil {
		t.Fatalf("through %s on %s: %v", gw, node, err)
	}
	return time.Since(t0)
}

// roamServed waits until roam reaches web through the WireGuard gateway.
func roamServed(timeout time.Duration) error { return siteLive("roam", 4, urlWGWeb(), timeout) }

// wgGatewayServedOffNode waits until the WireGuard gateway runs on another node than node and
// roam is served through it again; it returns that node.
func wgGatewayServedOffNode(node string, timeout time.Duration) (string, error) {
	var on string
	err := eventually(timeout, func() error {
		p, err := L.gatewayPod(wgGW)
		if err != nil {
			return err
		}
		if p.Spec.NodeName == node {
			return fmt.Errorf("%s still on %s", p.Name, node)
		}
		if _, err := L.curlFrom("roam", 4, 2, urlWGWeb()); err != nil {
			return fmt.Errorf("roam through %s on %s: %w", p.Name, p.Spec.NodeName, err)
		}
		on = p.Spec.NodeName
		return nil
	})
	return on, err
}

// gatewayNodeLost freezes a node (hack/lab/node.sh freeze: its uplink down, its processes
// stopped) that runs two gateways: edgeGW in its host network, with its site edge probing, and
// the WireGuard gateway in the pod network behind the lab's load balancer, with roam probing;
// hq probes the backend through its gateway on node 1 meanwhile. It measures how long the API
// takes to call the node NotReady and how long each gateway is unreachable: the pod-network
// gateway is evicted after its node-loss toleration and comes back on another node, the load
// balancer following it, while the node is still frozen; the host-network gateway is pinned and
// answers again only once the node is thawed (right after that).
func gatewayNodeLost(t *testing.T, node, url string) {
	var notReady, back time.Duration
	var moved string
	t0 := time.Now()
	edge := faultSite{edgeSite, edgeSiteIndex, func() string { return url }, 0}
	sums := withNodeFaultProbed(t, node, "freeze", "thaw", func() {
		if err := nodeCondition(node, false, 120*time.Second); err != nil {
			t.Fatalf("%v %.0fs after the freeze", err, time.Since(t0).Seconds())
		}
		notReady = time.Since(t0)
		t.Logf("%s frozen: the API called it NotReady after %.1fs (the node monitor's grace period)", node, notReady.Seconds())
		var err error
		if moved, err = wgGatewayServedOffNode(node, 3*time.Minute); err != nil {
			t.Errorf("the pod-network gateway %s did not come back while %s was frozen: %v", wgGW, node, err)
		}
		back = time.Since(t0)
		cx, cancel := ctx(20 * time.Second)
		defer cancel()
		var pods corev1.PodList
		if err := L.c.List(cx, &pods, client.InNamespace(labNS), client.MatchingLabels{gatewayKey: edgeGW}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != node {
				t.Errorf("host-network gateway %s has a pod on %s while its node %s is frozen: %s", edgeGW, p.Spec.NodeName, node, p.Name)
			}
		}
	}, []faultSite{hqSite(0), edge, roamSite(0)})
	hq, lost, roam := sums[0], sums[1], sums[2]
	if lost.failed == 0 || roam.failed == 0 {
		t.Errorf("probes through the gateways on the frozen %s: %s failed %d, roam failed %d (want both > 0)", node, edgeGW, lost.failed, roam.failed)
	}
	if hq.failed != 0 {
		t.Errorf("hq -> %s on %s -> the backend: %d probes failed while %s was frozen: %s", ipsecGW, labNode, hq.failed, node, strings.Join(hq.why, "; "))
	}
	t.Logf("node %s frozen: NotReady after %.1fs; pod-network gateway %s unreachable for %.1fs, back on %s at %.1fs (NotReady + its node-loss toleration + a new pod + the client's handshake); host-network gateway %s unreachable for %.1fs (pinned: until the thaw)",
		node, notReady.Seconds(), wgGW, roam.longestOutage.Seconds(), moved, back.Seconds(), edgeGW, lost.longestOutage.Seconds())
}
