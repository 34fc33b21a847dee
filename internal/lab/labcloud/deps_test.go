package labcloud_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// The lab's cloud is lab tooling: the operator and the gateway agent never link it.
func TestShippedBinariesDoNotLinkTheLabCloud(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool")
	}
	cmd := exec.Command("go", "list", "-deps", "./cmd/operator", "./cmd/gateway-agent", "./cmd/kubectl-vpn")
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasSuffix(pkg, "/internal/lab/labcloud") || strings.HasSuffix(pkg, "/cmd/lab-cloud") {
			t.Errorf("a shipped binary links %s", pkg)
		}
	}
	if !strings.Contains(string(out), "/internal/cloud/openstack") {
		t.Fatalf("go list named none of the operator's packages:\n%s", out)
	}
}
