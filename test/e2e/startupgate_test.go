package e2e

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
)

// A client's device that initiates while the gateway pod is still starting — charon running,
// the agent not yet — is not refused: `gateway-agent init` (the pod's init container) installs
// the ruleset with the startup gate, which keeps IKE out until the agent has loaded the peers.
// Without it charon answers NO_PROPOSAL_CHOSEN and many devices stop trying. Here the device's
// next retransmission is answered and its first initiation comes up; nobody initiates again.
func TestIPsecDeviceInitiatesBeforeAgent(t *testing.T) {
	ctx := context.Background()
	l := newLab(t, vpnv1.ProtocolIPsec, "e2e-gate", "")
	s := l.newSite("early")
	l.createPeer(s, "web")

	// The pod's config volume: the ConfigMap's data as files, once it has the peer.
	cm := &corev1.ConfigMap{}
	waitFor(t, "the peer in the rendered configuration", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: l.k8sNS, Name: children.ConfigMapName("gw")}, cm); err != nil {
			return err
		}
		var m model.Gateway
		if err := json.Unmarshal([]byte(cm.Data[render.KeyModel]), &m); err != nil {
			return err
		}
		if len(m.Peers) != 1 {
			return fmt.Errorf("%d peers rendered", len(m.Peers))
		}
		return nil
	})
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := l.gw.Run(agentBin, "init", "--config-dir", dir, "--userspace-dataplane"); err != nil {
		t.Fatalf("gateway-agent init: %v\n%s", err, out)
	}

	// The device initiates at once, with a device's patience (five retransmits over ~25 s).
	s.charon = charontest.Start(t, s.cns, s.name, charontest.Config{RetransmitTimeout: 2, RetransmitBase: 1.5, RetransmitTries: 5})
	if err := s.charon.LoadSwanctlConf(labSwanctlConf(s, l.serviceCIDR)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gate dropping the device's IKE", 15*time.Second, func() error {
		out, err := l.gw.Run("nft", "list", "table", "ip", nft.GateTable)
		if err != nil {
			return err
		}
		if strings.Contains(out, "packets 0 ") {
			return fmt.Errorf("nothing dropped yet:\n%s", out)
		}
		return nil
	})

	agent := l.startAgent()
	l.waitAgentReady(agent, 30*time.Second)
	waitFor(t, "the early device's tunnel carrying traffic", 40*time.Second, func() error {
		return s.request(l.web(53), time.Second)
	})
	if log := s.charon.Log(); strings.Contains(log, "NO_PROPOSAL_CHOSEN") {
		t.Errorf("the device was refused while the gateway started:\n%s", tail(log))
	}
	if out := l.gw.MustRun("nft", "list", "tables"); strings.Contains(out, nft.GateTable) || !strings.Contains(out, "table ip "+nft.Table) {
		t.Errorf("after the agent loaded the peers, tables:\n%s", out)
	}
}
