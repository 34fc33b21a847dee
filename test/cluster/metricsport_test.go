package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// 4i: a gateway agent's metrics port is open only to the namespaces the admin selects (by
// default the operator's and "monitoring"), not to every pod of the cluster. From a pod of an
// unrelated namespace the WireGuard gateway's agent (a pod, so its NetworkPolicy applies)
// refuses the connection; from a pod of "monitoring" it serves /metrics.
func test4iMetricsPort(t *testing.T) {
	pod, err := L.gatewayPod(wgGW)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + pod.Status.PodIP + ":9090/metrics"
	suffix := randomHex(3)
	c, cancel := ctx(60 * time.Second)
	defer cancel()

	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab-scraper-" + suffix}}
	if err := L.c.Create(c, other); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := L.deleteAndWait(other, 90*time.Second); err != nil {
			t.Error(err)
		}
	}()
	monitoring := &corev1.Namespace{}
	if err := L.c.Get(c, types.NamespacedName{Name: "monitoring"}, monitoring); apierrors.IsNotFound(err) {
		monitoring = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}
		if err := L.c.Create(c, monitoring); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := L.deleteAndWait(monitoring, 90*time.Second); err != nil {
				t.Error(err)
			}
		}()
	} else if err != nil {
		t.Fatal(err)
	}
	scraper := "scraper-" + suffix
	for _, ns := range []string{other.Name, "monitoring"} {
		p := labPod(ns, scraper, nil)
		if err := L.c.Create(c, p); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := L.deleteAndWait(p, 60*time.Second); err != nil {
				t.Error(err)
			}
		}()
		if _, err := L.podRunning(ns, scraper, 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	get := func(ns string) (string, error) {
		return L.podExec(20*time.Second, ns, scraper, "/pause", "get", url)
	}

	t.Run("a pod of another namespace is refused", func(t *testing.T) {
		err := eventually(30*time.Second, func() error {
			out, err := get(other.Name)
			if err == nil {
				return fmt.Errorf("%s/%s reads the agent's metrics: %.80q", other.Name, scraper, out)
			}
			if !strings.Contains(err.Error(), "connection refused") {
				return fmt.Errorf("fails otherwise than refused: %v", err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	t.Run("a pod of monitoring scrapes it", func(t *testing.T) {
		err := eventually(30*time.Second, func() error {
			out, err := get("monitoring")
			if err != nil {
				return err
			}
			if !strings.Contains(out, "bnerd_vpn_build_info") {
				return fmt.Errorf("not the agent's metrics: %.200q", out)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
}
