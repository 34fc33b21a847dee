package cluster

// Typed helpers of the cluster end-to-end suite: the lab's constants (hack/lab/common.sh), a
// controller-runtime client from the lab's kubeconfig, polls with deadlines, and the lab's shell
// pieces that stay shell (the sites' daemons and network namespaces, nft on the node,
// kubectl vpn).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wait"
)

// The lab's constants, as hack/lab/common.sh sets them.
const (
	labNS       = "lab-acme"         // the sample client's namespace (LAB_NS)
	operatorNS  = "bnerd-vpn-system" // the operator's namespace
	operatorDep = "bnerd-vpn-operator"
	ipsecGW     = "acme-gw" // the host-network IPsec gateway
	wgGW        = "acme-wg" // the WireGuard gateway behind a LoadBalancer Service
	gatewayKey  = "vpn.bnerd.net/gateway"
	tokenPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// lab is the running lab: its paths and clients.
type lab struct {
	root, state, kubeconfig string
	c                       client.Client
	cs                      kubernetes.Interface
}

// L is the lab the suite runs against (set by TestMain when the lab is up).
var L *lab

// labState is $LAB_STATE, /var/lib/bnerd-lab unless set.
func labState() string {
	if s := os.Getenv("LAB_STATE"); s != "" {
		return s
	}
	return "/var/lib/bnerd-lab"
}

func newLab() (*lab, error) {
	root, err := filepath.Abs("../..")
	if err != nil {
		return nil, err
	}
	// The suite's clients log nothing; without a logger controller-runtime warns with a stack.
	ctrllog.SetLogger(logr.Discard())
	l := &lab{root: root, state: labState()}
	l.kubeconfig = filepath.Join(l.state, "pki", "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := vpnv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := ipsecv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if l.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return nil, err
	}
	if l.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return l, nil
}

// Site addresses (common.sh): the node side of site i's link, the site's side, its LAN and the
// LAN's host.
func siteLinkHost(i int) string { return fmt.Sprintf("198.51.100.%d", 4*i+1) }
func siteLinkSite(i int) string { return fmt.Sprintf("198.51.100.%d", 4*i+2) }
func siteLAN(i int) string      { return fmt.Sprintf("203.0.113.%d/28", 16*i) }
func siteHost(i int) string     { return fmt.Sprintf("203.0.113.%d", 16*i+1) }

func ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// eventually polls f until it returns nil or the deadline passes; it returns f's last error.
func eventually(timeout time.Duration, f func() error) error {
	// the poll interval of the lab scripts' wait_for: each check is a command or a request
	if err := wait.Every(timeout, 300*time.Millisecond, f); err != nil {
		return fmt.Errorf("after %s: %w", timeout, err)
	}
	return nil
}

// sh runs a bash script with hack/lab/common.sh sourced (kubectl, site_ensure, ... and the lab's
// KUBECONFIG); env adds variables. It returns stdout; the error carries stderr.
func (l *lab) sh(timeout time.Duration, script string, env ...string) (string, error) {
	c, cancel := ctx(timeout)
	defer cancel()
	cmd := l.script(c, script, env)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s: %v: %s", firstLine(script), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// script is the command of sh and stream: bash in a process group of its own, which the
// deadline kills whole (a kubectl the script started holds its output open otherwise, until it
// gives up by itself).
func (l *lab) script(c context.Context, script string, env []string) *exec.Cmd {
	cmd := exec.CommandContext(c, "bash", "-c", `source "$LAB_ROOT/hack/lab/common.sh"; `+script)
	cmd.Env = append(os.Environ(), append([]string{"LAB_ROOT=" + l.root, "LAB_STATE=" + l.state}, env...)...)
	cmd.Dir = l.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// stream runs a bash script like sh, its output going to the test's stdout as it comes.
func (l *lab) stream(timeout time.Duration, script string, env ...string) error {
	c, cancel := ctx(timeout)
	defer cancel()
	cmd := l.script(c, script, env)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v", firstLine(script), err)
	}
	return nil
}

// run runs a program (not through the shell), its combined output.
func (l *lab) run(timeout time.Duration, name string, args ...string) (string, error) {
	c, cancel := ctx(timeout)
	defer cancel()
	cmd := exec.CommandContext(c, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+l.kubeconfig, "LAB_STATE="+l.state)
	cmd.Dir = l.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// inPodNetns runs a program on the node inside a pod's network namespace (that of its
// container's process, found through containerd): what the pod's network sees, with the node's
// tools and root.
func (l *lab) inPodNetns(pod *corev1.Pod, container string, args ...string) (string, error) {
	var id string
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == container {
			_, id, _ = strings.Cut(cs.ContainerID, "://")
		}
	}
	out, err := l.run(20*time.Second, "ctr", "--address", l.containerdSocket(pod.Spec.NodeName), "-n", "k8s.io", "tasks", "ls")
	if err != nil {
		return "", err
	}
	pid := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && id != "" && f[0] == id {
			pid = f[1]
		}
	}
	if pid == "" {
		return "", fmt.Errorf("no task of %s/%s container %s", pod.Namespace, pod.Name, container)
	}
	return l.run(20*time.Second, "nsenter", append([]string{"-t", pid, "-n"}, args...)...)
}

// containerdSocket is the socket of a node's containerd: node 1's is the machine's, node i's is
// under nodes/lab-node-i.
func (l *lab) containerdSocket(node string) string {
	if node != "" && node != labNodeName(1) {
		return l.state + "/nodes/" + node + "/containerd/containerd.sock"
	}
	return l.state + "/containerd/containerd.sock"
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

// shellQuote quotes arguments for bash.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// kubectl runs the lab's kubectl (for the human-readable tables only).
func (l *lab) kubectl(args ...string) string {
	out, err := l.sh(60*time.Second, "kubectl "+shellQuote(args))
	if err != nil {
		return out + err.Error()
	}
	return out
}

// podExec runs a command in a pod's (first) container, as kubectl exec does; stdout, the error
// carrying stderr.
func (l *lab) podExec(timeout time.Duration, namespace, pod string, cmd ...string) (string, error) {
	return l.sh(timeout, "kubectl "+shellQuote(append([]string{"-n", namespace, "exec", pod, "--"}, cmd...)))
}

// podRunning waits until a pod is Running with an address and returns it.
func (l *lab) podRunning(namespace, name string, timeout time.Duration) (*corev1.Pod, error) {
	var p corev1.Pod
	err := eventually(timeout, func() error {
		if err := l.get(namespace, name, &p); err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod %s/%s: %s, address %q", namespace, name, p.Status.Phase, p.Status.PodIP)
		}
		return nil
	})
	return &p, err
}

// vpn runs the lab's kubectl vpn (bin/kubectl-vpn) in the client's namespace; stdout only.
func (l *lab) vpn(args ...string) (string, error) {
	c, cancel := ctx(2 * time.Minute)
	defer cancel()
	cmd := exec.CommandContext(c, filepath.Join(l.root, "bin", "kubectl-vpn"), append([]string{"-n", labNS}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+l.kubeconfig)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), fmt.Errorf("kubectl vpn %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// curlFrom sends an HTTP request from a site's LAN host (index i) through its tunnel.
func (l *lab) curlFrom(site string, i int, timeout int, url string) (string, error) {
	return l.curlFromAddr(site, siteHost(i), timeout, url)
}

func (l *lab) curlFromAddr(site, src string, timeout int, url string) (string, error) {
	return l.run(time.Duration(timeout+5)*time.Second, "ip", "netns", "exec", "lab-site-"+site,
		"curl", "-sS", "--max-time", strconv.Itoa(timeout), "--interface", src, url)
}

// siteEnsure initiates a site's tunnel when it has no established CHILD_SA (site_ensure).
func (l *lab) siteEnsure(site string) {
	_, _ = l.sh(30*time.Second, "site_ensure "+site)
}

// swanctl runs swanctl with an IPsec site's strongswan.conf.
func (l *lab) swanctl(site string, args ...string) (string, error) {
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, "swanctl", args...)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+filepath.Join(l.state, "sites", site, "strongswan.conf"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

var ikeSARe = regexp.MustCompile(`(?m)^[^ :]*: #[0-9]*`)

// ikeSA is a site's first IKE SA, "<name>: #<unique id>", or "".
func (l *lab) ikeSA(site string) string {
	out, _ := l.swanctl(site, "--list-sas")
	return ikeSARe.FindString(out)
}

// nftDrops is how many packets from the subnet lan the node's gateway ruleset has dropped: its
// element of the drops set of its prefix length (none before the first drop).
func (l *lab) nftDrops(lan string) (int64, error) {
	p, err := netip.ParsePrefix(lan)
	if err != nil {
		return 0, err
	}
	set := fmt.Sprintf("%s_%d", nft.SetDropsIn, p.Bits())
	out, err := l.run(10*time.Second, "nft", "-j", "list", "set", "ip", nft.Table, set)
	if err != nil {
		return 0, err
	}
	drops, err := nft.ParseDrops([]byte(out))
	if err != nil {
		return 0, err
	}
	return int64(drops[nft.DropName(set, p.Masked().Addr())].Packets), nil
}

// gatewayPod is a Running pod of the gateway.
func (l *lab) gatewayPod(gw string) (*corev1.Pod, error) {
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := l.c.List(c, &pods, client.InNamespace(labNS), client.MatchingLabels{gatewayKey: gw}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no running pod of %s", gw)
}

func (l *lab) gatewayPodName(gw string) string {
	p, err := l.gatewayPod(gw)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return p.Name
}

func (l *lab) get(namespace, name string, obj client.Object) error {
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	return l.c.Get(c, types.NamespacedName{Namespace: namespace, Name: name}, obj)
}

func (l *lab) gateway(namespace, name string) (*vpnv1.VPNGateway, error) {
	var gw vpnv1.VPNGateway
	return &gw, l.get(namespace, name, &gw)
}

func (l *lab) peer(name string) (*vpnv1.VPNPeer, error) {
	var p vpnv1.VPNPeer
	return &p, l.get(labNS, name, &p)
}

// cond is a condition of a list, or an empty one.
func cond(conds []metav1.Condition, t string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, t); c != nil {
		return *c
	}
	return metav1.Condition{Type: t}
}

// peerCondition waits until a peer's condition has the reason (with reason "True": until its
// status is True).
func (l *lab) peerCondition(name, t, reason string, timeout time.Duration) (metav1.Condition, error) {
	var last metav1.Condition
	err := eventually(timeout, func() error {
		p, err := l.peer(name)
		if err != nil {
			return err
		}
		last = cond(p.Status.Conditions, t)
		if reason == "True" && last.Status == metav1.ConditionTrue || last.Reason == reason && reason != "True" {
			return nil
		}
		return fmt.Errorf("%s %s=%s/%s: %s", name, t, last.Status, last.Reason, last.Message)
	})
	return last, err
}

// exposureVIP is a gateway's virtual IP of an exposure.
func exposureVIP(gw *vpnv1.VPNGateway, name string) string {
	for _, e := range gw.Status.Exposures {
		if e.Name == name {
			return e.VirtualIP
		}
	}
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ipsecPeer creates the PSK Secret and VPNPeer of gateway acme-gw for the IPsec site <name> at
// index i (lab_ipsec_peer in common.sh, typed): its device's address and LAN from the index.
// With exposures nil the peer has no authorization block; extraSubnets are added to its LAN.
func (l *lab) ipsecPeer(name string, i int, psk string, exposures []string, extraSubnets ...string) error {
	return l.ipsecPeerOf(ipsecGW, name, i, psk, exposures, extraSubnets...)
}

// ipsecPeerOf is ipsecPeer for the gateway gw.
func (l *lab) ipsecPeerOf(gw, name string, i int, psk string, exposures []string, extraSubnets ...string) error {
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-psk", Namespace: labNS},
		StringData: map[string]string{"psk": psk},
	}
	if err := l.c.Create(c, sec); err != nil {
		return err
	}
	p := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: labNS},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: gw,
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: siteLinkSite(i), ID: name + ".acme.example"},
				RemoteSubnets: append([]string{siteLAN(i)}, extraSubnets...),
				ESP:           vpnv1.ESPSettings{Proposals: []string{"aes256gcm16-ecp256"}},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"},
			},
		},
	}
	if exposures != nil {
		p.Spec.Authorization = &vpnv1.Authorization{Exposures: exposures}
	}
	return l.c.Create(c, p)
}

// deleteAndWait deletes an object and waits until it is gone.
func (l *lab) deleteAndWait(obj client.Object, timeout time.Duration) error {
	c, cancel := ctx(timeout)
	defer cancel()
	if err := l.c.Delete(c, obj); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return eventually(timeout, func() error {
		err := l.get(obj.GetNamespace(), obj.GetName(), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s still there (%v)", obj.GetName(), err)
	})
}

// podsGone waits until no pod matches the selector (or, with an IP, none has it).
func (l *lab) podsGone(namespace string, sel client.MatchingLabels, ip string, timeout time.Duration) error {
	return eventually(timeout, func() error {
		c, cancel := ctx(20 * time.Second)
		defer cancel()
		var pods corev1.PodList
		if err := l.c.List(c, &pods, client.InNamespace(namespace), sel); err != nil {
			return err
		}
		for _, p := range pods.Items {
			if ip == "" || p.Status.PodIP == ip {
				return fmt.Errorf("pod %s (%s) still there", p.Name, p.Status.PodIP)
			}
		}
		return nil
	})
}

// rolloutRestart restarts a Deployment as `kubectl rollout restart` does and waits for the
// rollout to complete as `kubectl rollout status` does.
func (l *lab) rolloutRestart(namespace, name string, timeout time.Duration) error {
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := l.c.Patch(c, d, client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil {
		return err
	}
	return eventually(timeout, func() error {
		var d appsv1.Deployment
		if err := l.get(namespace, name, &d); err != nil {
			return err
		}
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		s := d.Status
		if s.ObservedGeneration < d.Generation || s.UpdatedReplicas < want || s.Replicas > s.UpdatedReplicas || s.AvailableReplicas < s.UpdatedReplicas {
			return fmt.Errorf("deployment %s: generation %d observed %d, %d updated, %d replicas, %d available",
				name, d.Generation, s.ObservedGeneration, s.UpdatedReplicas, s.Replicas, s.AvailableReplicas)
		}
		return nil
	})
}

// metrics fetches a Prometheus text endpoint.
func metrics(url string) (string, error) {
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metricValue sums the samples of a metric whose name and labels start with prefix
// (e.g. `controller_runtime_reconcile_total{controller="vpnpeer",result="success"}`); ok is
// false when there is none.
func metricValue(text, prefix string) (v float64, ok bool) {
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if x, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			v += x
			ok = true
		}
	}
	return v, ok
}

// logs is a pod's current log (one container, or every container with c == "").
func (l *lab) logs(namespace string, pod *corev1.Pod, container string) string {
	var names []string
	if container != "" {
		names = []string{container}
	} else {
		for _, c := range pod.Spec.InitContainers {
			names = append(names, c.Name)
		}
		for _, c := range pod.Spec.Containers {
			names = append(names, c.Name)
		}
	}
	var b strings.Builder
	for _, n := range names {
		c, cancel := ctx(30 * time.Second)
		raw, err := l.cs.CoreV1().Pods(namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: n}).DoRaw(c)
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "(logs of %s/%s: %v)\n", pod.Name, n, err)
			continue
		}
		b.Write(raw)
	}
	return b.String()
}
