package cluster

// The fault suite: control-plane and gateway faults on the live lab while
// the sites send a request through their tunnels every 200 ms (hq over IPsec to acme-gw's web
// exposure, roam over WireGuard to acme-wg's). Each fault prints the longest outage per site and
// asserts the goals: no failed probe for API server and etcd freezes, operator and
// kubelet restarts and a burst of peers; ≤ 1 s for an agent kill (both protocols); ≤ 5 s for a
// charon kill; the operator reconciling again ≤ 10 s after the control plane returns (a peer
// created right then is Authorized), without a container restart or CrashLoopBackOff; the
// operator's failover time measured.
//
// Runs between steps 8 and 9 (skipped with BNERD_LAB_FAULTS=0).

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

const (
	probeInterval = 200 * time.Millisecond
	probeTimeout  = 1 * time.Second
	leaseName     = "bnerd-vpn-operator.vpn.bnerd.net"
	// reconcileGoal: the operator reconciles again this soon after the control plane returns.
	reconcileGoal = 10 * time.Second
)

// probeResult is one request through a tunnel: when it was sent and whether it was answered.
type probeResult struct {
	at  time.Time
	ok  bool
	why string // a failed probe's curl error (its exit code names the kind: 28 a timeout, 7 refused, 56 reset)
}

// prober sends a request from a site's LAN host through its tunnel every probeInterval, each in
// its own goroutine with probeTimeout (a slow probe does not delay the next one).
type prober struct {
	site string
	args []string
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	res  []probeResult
	end  time.Time
}

// probeSummary is a prober's record: probes sent, failed, and the longest outage (from the
// first failed probe of a run of failures to the next answered one).
type probeSummary struct {
	site           string
	total, failed  int
	longestOutage  time.Duration
	longestStarted time.Time
	why            []string // the first failed probes' errors, with when they were sent
}

func (s probeSummary) String() string {
	return fmt.Sprintf("%s: %d probes, %d failed, longest outage %s", s.site, s.total, s.failed, s.longestOutage.Round(time.Millisecond))
}

func startProber(site string, i int, url string) *prober {
	p := &prober{
		site: site,
		args: []string{"netns", "exec", "lab-site-" + site, "curl", "-sS", "-o", "/dev/null",
			"--max-time", strconv.FormatFloat(probeTimeout.Seconds(), 'f', 1, 64), "--interface", siteHost(i), url},
		stop: make(chan struct{}),
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(probeInterval)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case at := <-tick.C:
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					out, err := exec.Command("ip", p.args...).CombinedOutput()
					why := ""
					if err != nil {
						why = strings.TrimSpace(fmt.Sprintf("%v: %s", err, out))
					}
					p.mu.Lock()
					p.res = append(p.res, probeResult{at: at, ok: err == nil, why: why})
					p.mu.Unlock()
				}()
			}
		}
	}()
	return p
}

// answered is how many of its probes have come back so far (answered or failed).
func (p *prober) answered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.res)
}

// atLeastProbes waits until every prober has done minProbes probes (a fault over in a moment,
// as a handover, leaves too few to tell an outage from a slow probe otherwise).
func atLeastProbes(t *testing.T, probes []*prober) {
	t.Helper()
	if err := eventually(30*time.Second, func() error {
		for _, p := range probes {
			if n := p.answered(); n < minProbes {
				return fmt.Errorf("%s: %d probes", p.site, n)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// minProbes is how many probes a fault's summary needs to say anything.
const minProbes = 15

// finish stops the prober, waits for the probes in flight and summarizes.
func (p *prober) finish() probeSummary {
	p.end = time.Now()
	close(p.stop)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	sort.Slice(p.res, func(a, b int) bool { return p.res[a].at.Before(p.res[b].at) })
	s := probeSummary{site: p.site, total: len(p.res)}
	var failStart time.Time
	for _, r := range p.res {
		switch {
		case !r.ok:
			s.failed++
			if len(s.why) < 3 {
				s.why = append(s.why, r.at.Format("15:04:05.000")+" "+r.why)
			}
			if failStart.IsZero() {
				failStart = r.at
			}
		case !failStart.IsZero():
			if d := r.at.Sub(failStart); d > s.longestOutage {
				s.longestOutage, s.longestStarted = d, failStart
			}
			failStart = time.Time{}
		}
	}
	if !failStart.IsZero() {
		if d := p.end.Sub(failStart); d > s.longestOutage {
			s.longestOutage, s.longestStarted = d, failStart
		}
	}
	return s
}

// faultSite is a site probed during the faults and the longest outage it may have (0: no
// failed probe at all).
type faultSite struct {
	name      string
	index     int
	url       func() string
	maxOutage time.Duration
}

func hqSite(max time.Duration) faultSite   { return faultSite{"hq", 1, urlWeb, max} }
func roamSite(max time.Duration) faultSite { return faultSite{"roam", 4, urlWGWeb, max} }

// sitesLive waits until both probed sites reach their exposures (hq re-initiating as a client's
// device does when it has no tunnel).
func sitesLive(t *testing.T) {
	t.Helper()
	err := eventually(90*time.Second, func() error {
		L.siteEnsure("hq")
		if _, err := L.curlFrom("hq", 1, 2, urlWeb()); err != nil {
			return fmt.Errorf("hq: %w", err)
		}
		if _, err := L.curlFrom("roam", 4, 2, urlWGWeb()); err != nil {
			return fmt.Errorf("roam: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the sites have no tunnel before the fault: %v", err)
	}
}

// steadySpan is how long the sites must be served without a failure before a fault's probes
// start.
const steadySpan = 3 * time.Second

// sitesSteady waits until every site has reached its URL without a failure for span: a
// fault's measurement starts from a steady path, not in the aftermath of the previous fault
// (a node just back, its endpoints and routes still settling), whose losses are not this
// fault's.
func sitesSteady(t *testing.T, sites []faultSite, span time.Duration) {
	t.Helper()
	for _, s := range sites {
		var since time.Time
		err := eventually(90*time.Second, func() error {
			if _, err := L.curlFrom(s.name, s.index, 1, s.url()); err != nil {
				since = time.Time{}
				return err
			}
			if since.IsZero() {
				since = time.Now()
			}
			if d := time.Since(since); d < span {
				return fmt.Errorf("served for %.1fs of %s", d.Seconds(), span)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s is not served steadily before the fault: %v", s.name, err)
		}
	}
}

// withProbes runs a fault with the sites probing (2 s before, 3 s after it), prints each
// site's outage and asserts its goal.
func withProbes(t *testing.T, fault string, sites []faultSite, f func(t *testing.T)) {
	t.Helper()
	for _, s := range sites {
		if err := siteLive(s.name, s.index, s.url(), 90*time.Second); err != nil {
			t.Fatalf("%s has no tunnel before the fault: %v", s.name, err)
		}
	}
	sitesSteady(t, sites, steadySpan)
	var ps []*prober
	for _, s := range sites {
		ps = append(ps, startProber(s.name, s.index, s.url()))
	}
	time.Sleep(2 * time.Second)
	t0 := time.Now()
	f(t)
	time.Sleep(3 * time.Second)
	atLeastProbes(t, ps)
	for i, p := range ps {
		s := p.finish()
		t.Logf("%s: %s", fault, s)
		goal := sites[i].maxOutage
		switch {
		case s.total < minProbes:
			t.Errorf("%s: %s: too few probes ran", fault, s.site)
		case goal == 0 && s.failed > 0:
			t.Errorf("%s: %s: %d failed probes (goal: none; longest outage from %+.1fs): %s", fault, s.site, s.failed, s.longestStarted.Sub(t0).Seconds(), strings.Join(s.why, "; "))
		case s.longestOutage.Round(probeInterval) > goal: // measured in probe intervals: 5 lost probes are 1.0 s
			t.Errorf("%s: %s: longest outage %s > %s (from %+.1fs)", fault, s.site, s.longestOutage.Round(time.Millisecond), goal, s.longestStarted.Sub(t0).Seconds())
		case s.failed > 0:
			t.Logf("%s: %s: the outage began %+.1fs after the fault", fault, s.site, s.longestStarted.Sub(t0).Seconds())
		}
	}
}

// labPid is the pid of a process cluster-up.sh started ($LAB_STATE/pids: "<name> <pid>"),
// checked against its command line.
func labPid(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(L.state + "/pids")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if err != nil || !strings.Contains(string(cmdline), name) {
				t.Fatalf("%s: pid %d is not it (%q, %v)", name, pid, cmdline, err)
			}
			return pid
		}
	}
	t.Fatalf("no %s in %s/pids", name, L.state)
	return 0
}

// operatorPods are the operator's pods: name -> restarts, and whether any waits in
// CrashLoopBackOff.
func operatorPods() (map[string]int32, string, error) {
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := L.c.List(c, &pods, client.InNamespace(operatorNS)); err != nil {
		return nil, "", err
	}
	restarts := map[string]int32{}
	var crash string
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, operatorDep+"-") {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
			restarts[p.Name] += cs.RestartCount
			if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				crash += p.Name + " "
			}
		}
	}
	return restarts, crash, nil
}

// managerRestarts sums bnerd_vpn_operator_manager_restarts_total (the operator's in-process
// manager replacements) over the operator's pods, read from their metrics port.
func managerRestarts() (float64, error) {
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := L.c.List(c, &pods, client.InNamespace(operatorNS)); err != nil {
		return 0, err
	}
	var sum float64
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, operatorDep+"-") || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
			continue
		}
		m, err := metrics("http://" + p.Status.PodIP + ":8080/metrics")
		if err != nil {
			return 0, err
		}
		v, _ := metricValue(m, "bnerd_vpn_operator_manager_restarts_total")
		sum += v
	}
	return sum, nil
}

// leaseHolder is the operator pod holding the leader Lease ("" when nobody does).
func leaseHolder() (string, error) {
	var lease coordinationv1.Lease
	if err := L.get(operatorNS, leaseName, &lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return holder, nil
}

// operatorAvailable waits until the operator's Deployment has all its replicas available.
func operatorAvailable(timeout time.Duration) error {
	return eventually(timeout, func() error {
		var d appsv1.Deployment
		if err := L.get(operatorNS, operatorDep, &d); err != nil {
			return err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		if d.Status.AvailableReplicas < want || d.Status.Replicas != want {
			return fmt.Errorf("operator: %d of %d available (%d replicas)", d.Status.AvailableReplicas, want, d.Status.Replicas)
		}
		return nil
	})
}

// faultPeer creates a VPNPeer of acme-gw with its PSK Secret, without a site: addresses in
// 10.199.0.0/16 (the device) and 10.200.0.0/16 (its LAN), numbered n (1..250).
func faultPeer(name string, n int) error {
	c, cancel := ctx(60 * time.Second)
	defer cancel()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-psk", Namespace: labNS},
		StringData: map[string]string{"psk": "lab-fault-" + randomHex(12)},
	}
	if err := L.c.Create(c, sec); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	p := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: labNS},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: ipsecGW,
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: fmt.Sprintf("10.199.0.%d", n), ID: name + ".acme.example"},
				RemoteSubnets: []string{fmt.Sprintf("10.200.%d.0/24", n)},
				ESP:           vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp256"}},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			},
			Authorization: &vpnv1.Authorization{Exposures: []string{"web"}},
		},
	}
	if err := L.c.Create(c, p); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// removeFaultPeers deletes fault peers and their Secrets (the later steps see the lab as before).
func removeFaultPeers(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := L.deleteAndWait(&vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Namespace: labNS, Name: n}}, 60*time.Second); err != nil {
			t.Errorf("peer %s: %v", n, err)
		}
		_ = L.deleteAndWait(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: labNS, Name: n + "-psk"}}, 30*time.Second)
	}
}

// reconcilesAfter creates a peer right after the control plane returned (at back) and asserts
// it is Authorized within reconcileGoal; then that no operator container restarted and none is
// in CrashLoopBackOff.
func reconcilesAfter(t *testing.T, back time.Time, peer string, n int, restartsBefore map[string]int32) {
	t.Helper()
	if err := eventually(20*time.Second, func() error { return faultPeer(peer, n) }); err != nil {
		t.Errorf("creating %s after the outage: %v", peer, err)
		return
	}
	created := time.Since(back)
	var landed time.Duration
	err := eventually(60*time.Second, func() error {
		p, err := L.peer(peer)
		if err != nil {
			return err
		}
		if c := cond(p.Status.Conditions, vpnv1.ConditionAuthorized); c.Status != metav1.ConditionTrue {
			return fmt.Errorf("%s Authorized=%s/%s", peer, c.Status, c.Reason)
		}
		landed = time.Since(back)
		return nil
	})
	switch {
	case err != nil:
		t.Errorf("the operator did not reconcile %s after the outage: %v", peer, err)
	case landed > reconcileGoal:
		t.Errorf("%s Authorized %.1fs after the control plane returned (created at %.1fs; goal %s)", peer, landed.Seconds(), created.Seconds(), reconcileGoal)
	default:
		t.Logf("operator reconciling again: %s (created %.1fs after the control plane returned) Authorized at %.1fs", peer, created.Seconds(), landed.Seconds())
	}
	time.Sleep(5 * time.Second) // a crash would show by now
	after, crash, err := operatorPods()
	if err != nil {
		t.Error(err)
		return
	}
	if crash != "" {
		t.Errorf("operator in CrashLoopBackOff: %s", crash)
	}
	for pod, r := range after {
		if r > restartsBefore[pod] {
			t.Errorf("operator pod %s restarted (%d -> %d)", pod, restartsBefore[pod], r)
		}
	}
	if holder, err := leaseHolder(); err == nil {
		t.Logf("operator pods %v (restarts), leader %s", after, holder)
	}
	removeFaultPeers(t, peer)
}

// freeze stops a lab process (SIGSTOP) for d while the sites probe, then lets it go on and
// asserts the operator reconciles again.
func freeze(t *testing.T, fault, process string, d time.Duration, peer string, n int) {
	pid := labPid(t, process)
	restarts, crash, err := operatorPods()
	if err != nil {
		t.Fatal(err)
	}
	if crash != "" {
		t.Fatalf("operator in CrashLoopBackOff before the fault: %s", crash)
	}
	if err := operatorAvailable(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	mr0, mrErr := managerRestarts()
	var back time.Time
	withProbes(t, fault, []faultSite{hqSite(0), roamSite(0)}, func(t *testing.T) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (pid %d) stopped for %s", process, pid, d)
		time.Sleep(d)
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		back = time.Now()
		reconcilesAfter(t, back, peer, n, restarts)
	})
	if mr1, err := managerRestarts(); err == nil && mrErr == nil {
		t.Logf("%s: in-process manager restarts of the operator: %v (the design's answer to a lost lease; no container restart)", fault, mr1-mr0)
	}
}

// containerID is the containerd id of a container of a gateway's running pod, and the pod.
func containerID(t *testing.T, gw, container string) (string, *corev1.Pod) {
	t.Helper()
	pod, err := L.gatewayPod(gw)
	if err != nil {
		t.Fatal(err)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ := strings.Cut(cs.ContainerID, "://")
			if id == "" {
				t.Fatalf("%s/%s has no container id", pod.Name, container)
			}
			return id, pod
		}
	}
	t.Fatalf("%s has no container %s", pod.Name, container)
	return "", nil
}

func restartCount(pod *corev1.Pod, container string) int32 {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			return cs.RestartCount
		}
	}
	return -1
}

// killContainer kills a gateway container's process (SIGKILL through containerd) and waits
// until the kubelet restarted it and the pod is Ready again (same pod).
func killContainer(t *testing.T, gw, container string) {
	t.Helper()
	_, pod := containerID(t, gw, container)
	before := restartCount(pod, container)
	t0 := time.Now()
	killPodContainer(t, pod, container)
	err := eventually(90*time.Second, func() error {
		var p corev1.Pod
		if err := L.get(labNS, pod.Name, &p); err != nil {
			return err
		}
		if r := restartCount(&p, container); r <= before {
			return fmt.Errorf("%s/%s not restarted yet", pod.Name, container)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("%s not Ready", pod.Name)
	})
	if err != nil {
		t.Errorf("after killing %s/%s: %v", pod.Name, container, err)
	} else {
		t.Logf("%s/%s killed; restarted and the pod Ready after %.1fs", pod.Name, container, time.Since(t0).Seconds())
	}
}

// podUIDs are the pods of the lab's client and operator namespaces: name -> UID.
func podUIDs(t *testing.T) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, ns := range []string{labNS, operatorNS} {
		c, cancel := ctx(20 * time.Second)
		var pods corev1.PodList
		err := L.c.List(c, &pods, client.InNamespace(ns))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			m[ns+"/"+p.Name] = string(p.UID)
		}
	}
	return m
}

// restartKubelet kills the lab's kubelet and starts it again as cluster-up.sh did (the same
// command line, environment and log; its pid replaces the old one in $LAB_STATE/pids).
func restartKubelet(t *testing.T) {
	t.Helper()
	pid := labPid(t, "kubelet")
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := eventually(20*time.Second, func() error {
		if err := syscall.Kill(pid, 0); err == nil {
			return fmt.Errorf("kubelet %d still running", pid)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet (pid %d) killed", pid)
	time.Sleep(2 * time.Second)
	logf, err := os.OpenFile(L.state+"/logs/kubelet.log", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
	cmd.Dir = cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the kubelet again: %v", err)
	}
	newPid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reaped if it ends while the suite runs
	b, err := os.ReadFile(L.state + "/pids")
	if err != nil {
		t.Fatal(err)
	}
	pids := strings.Replace(string(b), fmt.Sprintf("kubelet %d\n", pid), fmt.Sprintf("kubelet %d\n", newPid), 1)
	if err := os.WriteFile(L.state+"/pids", []byte(pids), 0o644); err != nil {
		t.Fatal(err)
	}
	// up again: its health endpoint answers and it renewed the node's Lease (microseconds; the
	// Node's heartbeat has seconds only and is written every 5 min when nothing changes)
	err = eventually(90*time.Second, func() error {
		if _, err := metrics("http://127.0.0.1:10248/healthz"); err != nil {
			return fmt.Errorf("kubelet healthz: %w", err)
		}
		var lease coordinationv1.Lease
		if err := L.get("kube-node-lease", "lab-node", &lease); err != nil {
			return err
		}
		if lease.Spec.RenewTime == nil || !lease.Spec.RenewTime.Time.After(started) {
			return fmt.Errorf("node Lease not renewed by the new kubelet")
		}
		var n corev1.Node
		if err := L.get("", "lab-node", &n); err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("node not Ready")
	})
	if err != nil {
		t.Errorf("after restarting the kubelet: %v", err)
	} else {
		t.Logf("kubelet started again (pid %d); healthy, node Lease renewed and node Ready after %.1fs", newPid, time.Since(started).Seconds())
	}
}

// failover deletes the leader's pod and measures until another pod holds the Lease.
func failover(t *testing.T) (time.Duration, error) {
	t.Helper()
	var leader string
	if err := eventually(60*time.Second, func() (err error) {
		if leader, err = leaseHolder(); err == nil && leader == "" {
			err = fmt.Errorf("no leader")
		}
		return err
	}); err != nil {
		return 0, err
	}
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	t0 := time.Now()
	if err := L.c.Delete(c, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: leader}}); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if h, err := leaseHolder(); err == nil && h != "" && h != leader {
			d := time.Since(t0)
			t.Logf("operator failover: leader %s deleted, %s holds the Lease after %.2fs", leader, h, d.Seconds())
			return d, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("no new leader 90s after deleting %s", leader)
}

// leaseIdentity is the Lease's full holder identity ("<pod>_<random>", new per process).
func leaseIdentity() (string, error) {
	var lease coordinationv1.Lease
	if err := L.get(operatorNS, leaseName, &lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *lease.Spec.HolderIdentity, nil
}

// hardFailover kills the leader's process (SIGKILL through containerd: no release of the Lease)
// and measures until another process holds the Lease (it must wait for the Lease to expire).
func hardFailover(t *testing.T) {
	t.Helper()
	id, err := leaseIdentity()
	if err != nil || id == "" {
		t.Fatalf("no leader: %q %v", id, err)
	}
	pod, _, _ := strings.Cut(id, "_")
	var p corev1.Pod
	if err := L.get(operatorNS, pod, &p); err != nil {
		t.Fatal(err)
	}
	var cid string
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == "operator" {
			_, cid, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	if cid == "" {
		t.Fatalf("%s has no container id", pod)
	}
	t0 := time.Now()
	if out, err := L.run(20*time.Second, "ctr", "--address", L.state+"/containerd/containerd.sock", "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", cid); err != nil {
		t.Fatalf("kill the leader %s: %v %s", pod, err, out)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if h, err := leaseIdentity(); err == nil && h != "" && h != id {
			d := time.Since(t0)
			h, _, _ = strings.Cut(h, "_")
			if h == pod {
				h += " (its restarted container, a new identity)"
			}
			t.Logf("operator failover: leader %s killed (SIGKILL), %s holds the Lease after %.1fs (lease duration 30s)", pod, h, d.Seconds())
			if d > 45*time.Second {
				t.Errorf("failover after a leader's death took %.1fs (lease 30s + 2.2 x 2s retry expected)", d.Seconds())
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("no new leader 90s after killing %s", pod)
}

// faults: the fault suite, one subtest per fault, in an order that leaves the lab as it was.
func testFaults(t *testing.T) {
	if os.Getenv("BNERD_LAB_FAULTS") == "0" {
		t.Skip("BNERD_LAB_FAULTS=0: the fault suite skipped")
	}
	faults := []struct {
		name string
		f    func(*testing.T)
	}{
		{"agent killed IPsec", func(t *testing.T) {
			withProbes(t, "agent killed (IPsec)", []faultSite{hqSite(time.Second), roamSite(0)}, func(t *testing.T) {
				killContainer(t, ipsecGW, "agent")
			})
		}},
		{"agent killed WireGuard", func(t *testing.T) {
			// The device runs in the pod's wireguard container: the agent's death touches no
			// tunnel (as for IPsec, where charon has its own container).
			withProbes(t, "agent killed (WireGuard)", []faultSite{hqSite(0), roamSite(time.Second)}, func(t *testing.T) {
				killContainer(t, wgGW, "agent")
			})
		}},
		{"charon killed", func(t *testing.T) {
			withProbes(t, "charon killed", []faultSite{hqSite(5 * time.Second), roamSite(0)}, func(t *testing.T) {
				killContainer(t, ipsecGW, "charon")
			})
		}},
		{"API server frozen", func(t *testing.T) {
			freeze(t, "API server frozen 30s", "kube-apiserver", 30*time.Second, "fault-api", 201)
		}},
		{"etcd frozen", func(t *testing.T) {
			freeze(t, "etcd frozen 20s", "etcd", 20*time.Second, "fault-etcd", 202)
		}},
		{"operator killed mid-change", func(t *testing.T) {
			if err := operatorAvailable(90 * time.Second); err != nil {
				t.Fatal(err)
			}
			withProbes(t, "operator killed mid-change", []faultSite{hqSite(0), roamSite(0)}, func(t *testing.T) {
				t0 := time.Now()
				if err := faultPeer("fault-midchange", 203); err != nil {
					t.Fatal(err)
				}
				if _, err := failover(t); err != nil {
					t.Error(err)
				}
				if _, err := L.peerCondition("fault-midchange", vpnv1.ConditionAuthorized, "True", 60*time.Second); err != nil {
					t.Errorf("the change made as the leader died did not land: %v", err)
				} else {
					t.Logf("the change landed %.1fs after it was made", time.Since(t0).Seconds())
				}
			})
			removeFaultPeers(t, "fault-midchange")
		}},
		{"operator failover", func(t *testing.T) {
			if err := operatorAvailable(120 * time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := failover(t); err != nil {
				t.Error(err)
			}
			if err := operatorAvailable(120 * time.Second); err != nil {
				t.Error(err)
			}
		}},
		{"operator leader killed", func(t *testing.T) {
			if err := operatorAvailable(120 * time.Second); err != nil {
				t.Fatal(err)
			}
			withProbes(t, "operator leader killed", []faultSite{hqSite(0), roamSite(0)}, hardFailover)
			if err := operatorAvailable(120 * time.Second); err != nil {
				t.Error(err)
			}
		}},
		{"kubelet restarted", func(t *testing.T) {
			before := podUIDs(t)
			withProbes(t, "kubelet restarted", []faultSite{hqSite(0), roamSite(0)}, restartKubelet)
			time.Sleep(5 * time.Second)
			after := podUIDs(t)
			same := len(before) == len(after)
			for k, v := range before {
				if after[k] != v {
					same = false
				}
			}
			if same {
				t.Logf("no pod recreated (%d pods)", len(after))
			} else {
				t.Errorf("pods changed across the kubelet restart: %v -> %v", before, after)
			}
		}},
		{"burst of 50 peers", func(t *testing.T) {
			var names []string
			withProbes(t, "burst of 50 peers", []faultSite{hqSite(0), roamSite(0)}, func(t *testing.T) {
				t0 := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, 50)
				for n := 1; n <= 50; n++ {
					name := fmt.Sprintf("burst-%02d", n)
					names = append(names, name)
					wg.Add(1)
					go func(n int) {
						defer wg.Done()
						if err := faultPeer(name, n); err != nil {
							errs <- fmt.Errorf("%s: %w", name, err)
						}
					}(n)
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				created := time.Since(t0)
				err := eventually(60*time.Second, func() error {
					c, cancel := ctx(20 * time.Second)
					defer cancel()
					var peers vpnv1.VPNPeerList
					if err := L.c.List(c, &peers, client.InNamespace(labNS)); err != nil {
						return err
					}
					n := 0
					for _, p := range peers.Items {
						if strings.HasPrefix(p.Name, "burst-") && cond(p.Status.Conditions, vpnv1.ConditionAuthorized).Status == metav1.ConditionTrue {
							n++
						}
					}
					if n < 50 {
						return fmt.Errorf("%d of 50 Authorized", n)
					}
					return nil
				})
				if err != nil {
					t.Errorf("burst: %v", err)
				} else {
					t.Logf("50 peers created in %.1fs, all Authorized after %.1fs", created.Seconds(), time.Since(t0).Seconds())
				}
			})
			removeFaultPeers(t, names...)
		}},
	}
	for _, f := range faults {
		t.Run(f.name, f.f)
	}
	if err := operatorAvailable(120 * time.Second); err != nil {
		t.Error(err)
	}
	sitesLive(t)
}
