// Package gateways loads what kubectl vpn looks at for a VPNGateway: the gateway and its
// peers from the API server, the operator's authorization decided over them (internal/model),
// the gateway's pod, and its agent's metrics read through the API server (AgentAccess).
// Secrets are never read.
package gateways

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// AgentAccess reaches a gateway pod's agent: its /metrics and its containers' logs. Nothing
// else: no Secret is ever read through it.
type AgentAccess interface {
	Metrics(ctx context.Context, namespace, pod string, port int32) ([]byte, error)
	Logs(ctx context.Context, namespace, pod, container string, tail int64) ([]byte, error)
}

// APIServerAccess is AgentAccess through the API server: the metrics through the pod proxy
// (GET /api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics, RBAC: get pods/proxy), the logs
// through pods/log (RBAC: get pods/log).
func APIServerAccess(cs kubernetes.Interface) AgentAccess { return apiServerAccess{cs: cs} }

type apiServerAccess struct{ cs kubernetes.Interface }

// requestTimeout bounds each request to the pod: a pod that does not answer is reported, not
// waited for.
const requestTimeout = 5 * time.Second

func (a apiServerAccess) Metrics(ctx context.Context, namespace, pod string, port int32) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	return failure(a.cs.CoreV1().Pods(namespace).ProxyGet("", pod, strconv.Itoa(int(port)), "metrics", nil).DoRaw(ctx))
}

func (a apiServerAccess) Logs(ctx context.Context, namespace, pod, container string, tail int64) ([]byte, error) {
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
