package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// A host-network gateway's model, rewritten by someone with edit rights on its ConfigMap, never
// reaches the node. The rewrite is the one seen on a live lab: the endpoint said to be a
// LoadBalancer's (the agent would render a pod's ruleset, whose forward chain drops every
// flow it does not know, into the node's namespace) and a ClusterLink route added (the agent
// would install it into the node's main table). The agent runs as its pod would — told by its
// Deployment that it is on the node's network, on which node, for which service CIDR — and
// reads the model from files, so the test decides exactly what it sees:
//   - the rewritten model is refused (the refusal names the disagreement) and the last good
//     configuration stays: the node's forwarded and own flows to a pod keep working, the
//     node's routes are unchanged, the gateway's table is the same, the site's tunnel still
//     carries its exposure;
//   - the control: an agent not told where it runs applies the same model, and the node's
//     forwarded flows die and the route lands in the node's table — what the check prevents.
func TestTamperedModelNeverReachesTheNode(t *testing.T) {
	l := newLab(t, vpnv1.ProtocolWireGuard, uniqueNamespace("e2e-tamper"), "btm")
	a, b := l.newSite("a"), l.newSite("b")
	for _, s := range []*labSite{a, b} {
		l.configureDevice(s)
		l.createPeer(s, "web")
	}
	podFlows := nodesOwnThings(t, l, a)
	if err := podFlows(); err != nil {
		t.Fatalf("before the gateway: %v", err)
	}
	cfgDir, secDir := l.modelFiles(t)
	good, err := os.ReadFile(filepath.Join(cfgDir, render.KeyModel))
	if err != nil {
		t.Fatal(err)
	}
	tampered := tamperedHostModel(t, good)
	placed := []string{"--config-dir", cfgDir, "--secrets-dir", secDir,
		"--host-network=true", "--node-name=node-1", "--service-cidr", l.serviceCIDR.String()}

	agent := l.startAgent(placed...)
	l.waitAgentReady(agent, 30*time.Second)
	waitFor(t, "site b through web", 60*time.Second, func() error { return b.request(l.web(53), time.Second) })
	routes := nodeRoutes(l)
	table, err := l.nftState()
	if err != nil {
		t.Fatal(err)
	}
	rejected := agentCounter(t, l, "bnerd_vpn_config_rejected_total")

	writeModel(t, cfgDir, tampered)
	waitFor(t, "the agent refusing the rewritten model", 20*time.Second, func() error {
		if got := agentCounter(t, l, "bnerd_vpn_config_rejected_total"); got <= rejected {
			return fmt.Errorf("rejected %v, was %v", got, rejected)
		}
		return nil
	})
	if out := agent.Output(); !strings.Contains(out, "disagrees with where this agent runs") || !strings.Contains(out, `endpoint is \"loadBalancer\"`) {
		t.Errorf("the refusal does not say why: %s", tail(out))
	}
	// A refused model applies nothing: the checks below see what the last good one left.
	if err := podFlows(); err != nil {
		t.Errorf("the node's flows after the rewrite: %v", err)
	}
	if got := nodeRoutes(l); got != routes {
		t.Errorf("the node's routes after the rewrite:\n%s\nwant\n%s", got, routes)
	}
	if got, err := l.nftState(); err != nil || got != table {
		t.Errorf("the gateway's table after the rewrite (%v):\n%s\nwant\n%s", err, got, table)
	}
	if err := b.request(l.web(53), 2*time.Second); err != nil {
		t.Errorf("site b after the rewrite: %v", err)
	}

	// Restored (the operator restores the ConfigMap): applied again, nothing refused.
	writeModel(t, cfgDir, good)
	stopAgent(t, agent)
	if err := podFlows(); err != nil {
		t.Fatalf("after the gateway went: %v", err)
	}

	t.Run("control: an agent not told where it runs would apply it", func(t *testing.T) {
		unplaced := l.startAgent("--config-dir", cfgDir, "--secrets-dir", secDir)
		defer stopAgent(t, unplaced)
		l.waitAgentReady(unplaced, 30*time.Second)
		writeModel(t, cfgDir, tampered)
		waitFor(t, "the node's forwarded flows dying", 20*time.Second, func() error {
			if err := podFlows(); err == nil {
				return fmt.Errorf("the node's flows still work")
			}
			return nil
		})
		waitFor(t, "the route in the node's table", 10*time.Second, func() error {
			if got := nodeRoutes(l); !strings.Contains(got, "203.0.113.160/29 via 198.51.100.130") {
				return fmt.Errorf("routes:\n%s", got)
			}
			return nil
		})
	})
}

// modelFiles writes the gateway's ConfigMap data and the Secrets its model names as a pod
// mounts them (files per key), for an agent started with --config-dir and --secrets-dir.
func (l *lab) modelFiles(t *testing.T) (cfgDir, secDir string) {
	t.Helper()
	ctx := context.Background()
	cfgDir, secDir = t.TempDir(), t.TempDir()
	cm := &corev1.ConfigMap{}
	waitFor(t, "the gateway's ConfigMap", 30*time.Second, func() error {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: l.k8sNS, Name: children.ConfigMapName("gw")}, cm)
	})
	for k, v := range cm.Data {
		writeFile(t, filepath.Join(cfgDir, k), v)
	}
	m, err := render.DecodeModel([]byte(cm.Data[render.KeyModel]))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range children.SecretNames(m) {
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: l.k8sNS, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Data {
			writeFile(t, filepath.Join(secDir, name, k), string(v))
		}
	}
	return cfgDir, secDir
}

// tamperedHostModel is a host-network gateway's model rewritten to pass model.Verify but lie
// about the node: a LoadBalancer endpoint and a ClusterLink route via the LAN's backend.
func tamperedHostModel(t *testing.T, good []byte) []byte {
	t.Helper()
	m, err := render.DecodeModel(good)
	if err != nil {
		t.Fatal(err)
	}
	m.Endpoint = model.Endpoint{Kind: model.EndpointLoadBalancer}
	evil := netip.MustParsePrefix("203.0.113.160/29")
	m.InternalSourceCIDRs = append(m.InternalSourceCIDRs, evil)
	m.Routes = append(m.Routes, model.Route{CIDR: evil, Via: labBackend, Link: "evil"})
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := render.DecodeModel(raw); err != nil {
		t.Fatalf("the rewritten model must pass model.Verify (only the placement refuses it): %v", err)
	}
	return raw
}

// writeModel replaces the model file at once (a rename, as the kubelet swaps a ConfigMap).
func writeModel(t *testing.T, dir string, raw []byte) {
	t.Helper()
	tmp := filepath.Join(dir, ".."+render.KeyModel+".tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, render.KeyModel)); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// agentCounter reads one of the gateway's counters (its only series) from the agent's /metrics.
func agentCounter(t *testing.T, l *lab, name string) float64 {
	t.Helper()
	code, body, err := l.agentGet("/metrics")
	if err != nil || code != 200 {
		t.Fatalf("metrics: %d %v", code, err)
	}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest)
		var v float64
		if _, err := fmt.Sscan(fields[len(fields)-1], &v); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return v
	}
	t.Fatalf("no %s in the agent's metrics", name)
	return 0
}
