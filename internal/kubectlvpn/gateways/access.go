package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// agentAccess reaches a gateway pod's agent through the API server: its /metrics through the
// pod proxy (GET /api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics, RBAC: get pods/proxy) and
// its containers' logs (RBAC: get pods/log). Nothing else: no Secret is ever read.
type agentAccess interface {
	Metrics(ctx context.Context, namespace, pod string, port int32) ([]byte, error)
	Logs(ctx context.Context, namespace, pod, container string, tail int64) ([]byte, error)
}

// apiAgentAccess is agentAccess through the API server.
type apiAgentAccess struct{ cs kubernetes.Interface }

// requestTimeout bounds each request to the pod: a pod that does not answer is reported, not
// waited for.
const requestTimeout = 5 * time.Second

func (a apiAgentAccess) Metrics(ctx context.Context, namespace, pod string, port int32) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return failure(a.cs.CoreV1().Pods(namespace).ProxyGet("", pod, strconv.Itoa(int(port)), "metrics", nil).DoRaw(ctx))
}

func (a apiAgentAccess) Logs(ctx context.Context, namespace, pod, container string, tail int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return failure(a.cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, TailLines: &tail, Timestamps: true,
	}).DoRaw(ctx))
}

// failure is the API server's own message for a request it refused (a proxied or log
// request's Status is left in the body by DoRaw).
func failure(body []byte, err error) ([]byte, error) {
	if err == nil {
		return body, nil
	}
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Message != "" {
		return nil, fmt.Errorf("%s (HTTP %d)", st.Message, st.Code)
	}
	return nil, err
}

func (o *options) agentAccess() (agentAccess, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return apiAgentAccess{cs: cs}, nil
}

// gatewayPod finds the gateway's pod (label vpn.bnerd.net/gateway): a running, ready one
// first, the newest among equals. The string says why there is none to talk to.
func gatewayPod(ctx context.Context, c client.Client, gw *vpnv1.VPNGateway) (*corev1.Pod, string) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(gw.Namespace), client.MatchingLabels(children.SelectorLabels(gw.Name))); err != nil {
		return nil, fmt.Sprintf("listing the gateway's pods failed: %v", err)
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Sprintf("no pod with label %s=%s", children.LabelGateway, gw.Name)
	}
	rank := func(p *corev1.Pod) int {
		switch {
		case p.DeletionTimestamp != nil:
			return 0
		case p.Status.Phase == corev1.PodRunning && podReady(p):
			return 3
		case p.Status.Phase == corev1.PodRunning:
			return 2
		}
		return 1
	}
	sort.SliceStable(pods.Items, func(i, j int) bool {
		a, b := &pods.Items[i], &pods.Items[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra > rb
		}
		return a.CreationTimestamp.After(b.CreationTimestamp.Time)
	})
	p := pods.Items[0]
	return &p, ""
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// metricsPort is the agent's port named "metrics" in the pod, else the default 9090.
func metricsPort(p *corev1.Pod) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == children.PortMetrics && port.ContainerPort > 0 {
				return port.ContainerPort
			}
		}
	}
	return children.DefaultMetricsPort
}

// podHasContainer reports whether the pod runs a container of that name.
func podHasContainer(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// readMetrics fetches and reads the agent's metrics for the gateway.
func readMetrics(ctx context.Context, a agentAccess, gw *vpnv1.VPNGateway, pod *corev1.Pod) (*agentMetrics, error) {
	raw, err := a.Metrics(ctx, pod.Namespace, pod.Name, metricsPort(pod))
	if err != nil {
		return nil, err
	}
	samples, err := parseMetrics(raw)
	if err != nil {
		return nil, fmt.Errorf("the answer is not Prometheus metrics: %w", err)
	}
	return agentView(samples, gw.Namespace, gw.Name), nil
}
