package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// --version prints the version (internal/version) and exits before anything is configured or
// contacted.
func TestVersion(t *testing.T) {
	defer func(v string) { version.Version = v }(version.Version)
	for _, linked := range []string{"", "v1.2.3-test"} {
		version.Version = linked
		var out bytes.Buffer
		cmd := command()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--version"})
		if err := cmd.Execute(); err != nil || out.String() != "operator version "+version.Get()+"\n" {
			t.Errorf("version.Version %q: %v %q", linked, err, out.String())
		}
		if linked != "" && version.Get() != linked {
			t.Errorf("version.Get() = %q, linked %q", version.Get(), linked)
		}
	}
}

// --gateway-namespaces takes namespace names (DNS-1123 labels), each once; a bad list is
// refused naming the flag and the name, before the cluster is looked for.
func TestGatewayNamespacesFlag(t *testing.T) {
	for _, tc := range []struct{ list, want string }{
		{"tenant-a,Tenant_B", `--gateway-namespaces "Tenant_B": not a namespace name`},
		{"tenant-a,-b", `--gateway-namespaces "-b": not a namespace name`},
		{"tenant-a,tenant-a", `--gateway-namespaces "tenant-a": listed twice`},
		{"tenant-a," + strings.Repeat("a", 64), `--gateway-namespaces "` + strings.Repeat("a", 64) + `"`},
	} {
		var out bytes.Buffer
		cmd := command()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"--gateway-namespaces=" + tc.list, "--zap-log-level=error"})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--gateway-namespaces=%s: %v, want an error containing %s", tc.list, err, tc.want)
		}
	}
}
