package main

import (
	"bytes"
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
