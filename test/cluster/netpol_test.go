package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubeRouterPort is where the lab's NetworkPolicy enforcer serves /healthz and /metrics on
// 127.0.0.1 (KUBE_ROUTER_PORT in hack/lab/common.sh).
const kubeRouterPort = 20244

// labPod is a pod of the lab's pause image (hack/lab/build-images.sh), as unprivileged as the
// lab's backend; with args it runs "/pause <args>" ("serve :8080" serves HTTP), else it sleeps
// (and "/pause get <url>" run in it is an HTTP client).
func labPod(namespace, name string, labels map[string]string, args ...string) *corev1.Pod {
	c := corev1.Container{
		Name: "c", Image: "lab-pause:lab", ImagePullPolicy: corev1.PullNever,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	if len(args) > 0 {
		c.Command = append([]string{"/pause"}, args...)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: ptr.To(int64(1))},
	}
}

// 0: NetworkPolicy is enforced in the lab (kube-router's firewall, started by cluster-up.sh). In
// two fresh namespaces: a server behind a ClusterIP Service, a client in each. Before any policy
// both clients reach the server through the Service, each with its own source address (kube-proxy
// does not masquerade pod to pod); with an ingress policy admitting only the server's own
// namespace, the other namespace's client is refused and the own one still gets through.
func test0NetworkPolicy(t *testing.T) {
	if body, err := metrics(fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeRouterPort)); err != nil {
		t.Fatalf("the NetworkPolicy enforcer (kube-router) is not healthy: %v", err)
	} else {
		t.Logf("kube-router /healthz: %s", strings.TrimSpace(body))
	}
	networkPolicyEnforced(t, podPlacement{})
}

// podPlacement names the nodes the pods of networkPolicyEnforced run on ("": the scheduler's
// choice among the nodes that take any pod).
type podPlacement struct{ server, ownClient, otherClient string }

// networkPolicyEnforced runs test0's case with its pods placed on the given nodes.
func networkPolicyEnforced(t *testing.T, at podPlacement) {
	suffix := randomHex(3)
	nsA, nsB := "lab-np-a-"+suffix, "lab-np-b-"+suffix
	c, cancel := ctx(60 * time.Second)
	defer cancel()
	for _, ns := range []string{nsA, nsB} {
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if err := L.c.Create(c, nsObj); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := L.deleteAndWait(nsObj, 90*time.Second); err != nil {
				t.Error(err)
			}
		}()
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: nsA},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "server"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	// (Create fills in the Service's ClusterIP)
	for _, o := range []client.Object{
		onNode(labPod(nsA, "server", map[string]string{"app": "server"}, "serve", ":8080"), at.server),
		onNode(labPod(nsA, "client", nil), at.ownClient),
		onNode(labPod(nsB, "client", nil), at.otherClient),
		svc,
	} {
		if err := L.c.Create(c, o); err != nil {
			t.Fatal(err)
		}
	}
	ips, nodes := map[string]string{}, map[string]string{}
	for _, p := range []struct{ ns, name string }{{nsA, "server"}, {nsA, "client"}, {nsB, "client"}} {
		pod, err := L.podRunning(p.ns, p.name, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ips[p.ns+"/"+p.name] = pod.Status.PodIP
		nodes[p.ns+"/"+p.name] = pod.Spec.NodeName
	}
	for role, want := range map[string]string{nsA + "/server": at.server, nsA + "/client": at.ownClient, nsB + "/client": at.otherClient} {
		if want != "" && nodes[role] != want {
			t.Fatalf("%s runs on %s, not on %s", role, nodes[role], want)
		}
	}
	url := "http://" + svc.Spec.ClusterIP + ":8080/"
	t.Logf("server %s on %s behind %s; clients %s (%s on %s), %s (%s on %s)", ips[nsA+"/server"], nodes[nsA+"/server"], url,
		nsA, ips[nsA+"/client"], nodes[nsA+"/client"], nsB, ips[nsB+"/client"], nodes[nsB+"/client"])
	get := func(ns string) (string, error) {
		return L.podExec(20*time.Second, ns, "client", "/pause", "get", url)
	}
	// reaches: the client's request through the Service is answered, and the server saw the
	// client's own address
	reaches := func(ns string) error {
		out, err := get(ns)
		if err != nil {
			return err
		}
		if want := "(you are " + ips[ns+"/client"] + ":"; !strings.Contains(out, want) {
			return fmt.Errorf("the server saw another source: %q (want %s...)", strings.TrimSpace(out), want)
		}
		return nil
	}

	t.Run("without a policy both namespaces reach the server, with their own source address", func(t *testing.T) {
		for _, ns := range []string{nsA, nsB} {
			if err := eventually(30*time.Second, func() error { return reaches(ns) }); err != nil {
				t.Errorf("%s: %v", ns, err)
			} else {
				t.Logf("%s/client reaches the server through its ClusterIP Service; the server sees %s", ns, ips[ns+"/client"])
			}
		}
	})

	pol := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "own-namespace-only", Namespace: nsA},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}},
		},
	}
	cp, cancelp := ctx(30 * time.Second)
	defer cancelp()
	if err := L.c.Create(cp, pol); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()

	t.Run("with the policy the other namespace is refused", func(t *testing.T) {
		var last string
		err := eventually(30*time.Second, func() error {
			_, err := get(nsB)
			if err == nil {
				return fmt.Errorf("%s/client still reaches the server", nsB)
			}
			// kube-router rejects (ICMP port unreachable): refused at once, not a timeout
			if last = err.Error(); !strings.Contains(last, "connection refused") {
				return fmt.Errorf("%s/client fails otherwise than refused: %v", nsB, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		} else {
			t.Logf("%s/client refused %.1fs after the policy was created: %s", nsB, time.Since(t0).Seconds(), dialError(last))
		}
	})

	t.Run("with the policy its own namespace still reaches the server", func(t *testing.T) {
		if err := eventually(30*time.Second, func() error { return reaches(nsA) }); err != nil {
			t.Error(err)
		} else {
			t.Logf("%s/client still reaches the server, with its own address", nsA)
		}
	})
}

// dialError is the dial error in a failed "/pause get" (e.g. "dial tcp ...: connection refused"),
// or the whole error.
func dialError(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if i := strings.Index(l, "dial tcp"); i >= 0 {
			return strings.TrimSpace(l[i:])
		}
	}
	return s
}
