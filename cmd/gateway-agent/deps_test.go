package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLinksNoOperatorCode: the agent is the internet-facing binary; it links neither the
// reconcilers nor the cloud clients nor controller-runtime's manager (docs/design.md: each binary
// links only what it runs).
func TestLinksNoOperatorCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	forbidden := []string{
		"github.com/bnerd/bnerd-vpn-operator/internal/controller",
		"github.com/bnerd/bnerd-vpn-operator/internal/operator",
		"github.com/bnerd/bnerd-vpn-operator/internal/cloud",
		"github.com/gophercloud/",
		"sigs.k8s.io/controller-runtime/pkg/manager",
		"sigs.k8s.io/controller-runtime/pkg/builder",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == strings.TrimSuffix(f, "/") || strings.HasPrefix(dep, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(dep, f+"/")) {
				t.Errorf("the gateway agent links %s", dep)
			}
		}
	}
}
