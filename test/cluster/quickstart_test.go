package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

// quickStartBlock is one ```sh block of docs/quick-start.md, found by its first line, run as
// written (bash, from the repository's root, with the lab's KUBECONFIG in the environment, as a
// reader who exported it would run it).
type quickStartBlock struct {
	firstLine string
	// check looks at what the block printed (stdout); nil: its exit status is the check.
	check func(out string) error
	// secret: the output holds a pre-shared key and is never logged.
	secret bool
}

// The quick start's lab commands, and the sample manifests its real-cluster part applies:
// the samples' objects are accepted by the API server and the operator in the lab too (the
// endpoints they ask for, a cloud load balancer and a node named node-1, do not exist there).
var quickStartLab = []quickStartBlock{
	{firstLine: "export KUBECONFIG=/var/lib/bnerd-lab/pki/admin.kubeconfig", secret: true, check: func(out string) error {
		for _, want := range []string{"acme-gw", "hq", "branch", "connections {", "secrets {"} {
			if !strings.Contains(out, want) {
				return fmt.Errorf("no %q in what it printed", want)
			}
		}
		return nil
	}},
	{firstLine: "VIP=$(kubectl -n lab-acme get vpngw acme-gw", check: func(out string) error {
		if strings.TrimSpace(out) == "" {
			return fmt.Errorf("the request through hq's tunnel returned nothing")
		}
		return nil
	}},
}

var quickStartSamples = []quickStartBlock{
	{firstLine: "kubectl create namespace globex"},
	{firstLine: "kubectl create namespace acme"},
}

// 3e: the quick start's commands, as written, against the lab.
func test3eQuickStart(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(L.root, "docs", "quick-start.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shellBlocks(string(doc))
	// the doc's paths name the lab's state directory; a lab elsewhere (LAB_STATE) runs them
	// with its own
	fix := strings.NewReplacer("/var/lib/bnerd-lab", L.state)
	run := func(t *testing.T, b quickStartBlock) {
		script, ok := blockStarting(blocks, b.firstLine)
		if !ok {
			t.Fatalf("docs/quick-start.md has no ```sh block starting %q (the quick start and this test move together)", b.firstLine)
		}
		out, err := L.sh(2*time.Minute, "set -euo pipefail; export KUBECONFIG="+L.kubeconfig+"\n"+fix.Replace(script))
		if err != nil {
			if b.secret {
				t.Fatalf("%q failed (its output holds a key: not shown)", b.firstLine)
			}
			t.Fatalf("%v\n%s", err, out)
		}
		if b.check != nil {
			if err := b.check(out); err != nil {
				t.Errorf("%q: %v", b.firstLine, err)
			}
		}
		if !b.secret {
			t.Logf("%s\n%s", script, out)
		}
	}
	for _, b := range quickStartLab {
		t.Run(b.firstLine, func(t *testing.T) { run(t, b) })
	}
	defer func() {
		if _, err := L.sh(3*time.Minute, "kubectl delete namespace globex acme --ignore-not-found --wait=true --timeout=150s"); err != nil {
			t.Errorf("removing the samples' namespaces: %v", err)
		}
	}()
	for _, b := range quickStartSamples {
		t.Run(b.firstLine, func(t *testing.T) { run(t, b) })
	}
	// what the samples made: the WireGuard gateway has its key; both gateways are reconciled
	err = eventually(60*time.Second, func() error {
		wg, err := L.gateway("globex", "globex-wg")
		if err != nil {
			return err
		}
		if wg.Status.WireGuardPublicKey == "" {
			return fmt.Errorf("globex-wg: no public key in its status yet")
		}
		acme, err := L.gateway("acme", "acme-gw")
		if err != nil {
			return err
		}
		if c := cond(acme.Status.Conditions, vpnv1.ConditionReady); c.ObservedGeneration != acme.Generation {
			return fmt.Errorf("acme/acme-gw: Ready not computed for generation %d", acme.Generation)
		}
		return nil
	})
	if err != nil {
		t.Errorf("the quick start's samples: %v", err)
	}
}

// blockStarting is the block whose first line starts with prefix (a line may end in a comment).
func blockStarting(blocks []string, prefix string) (string, bool) {
	for _, b := range blocks {
		if strings.HasPrefix(strings.TrimSpace(b), prefix) {
			return b, true
		}
	}
	return "", false
}

// shellBlocks are the ```sh blocks of a Markdown text.
func shellBlocks(doc string) []string {
	var out []string
	var cur []string
	in := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			out = append(out, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return out
}
