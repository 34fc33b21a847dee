package version

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "f41cb81e0a7c3d9b2c1f00aa11bb22cc33dd44ee"
	for _, tc := range []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		want   string
	}{
		{"linker wins", "v1.2.3", &debug.BuildInfo{Main: debug.Module{Version: "v0.9.0"}, Settings: vcs(rev, "true")}, "v1.2.3"},
		{"linker trimmed", " v1.2.3\n", nil, "v1.2.3"},
		{"no build info", "", nil, "dev"},
		{"module version (tag)", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}, Settings: vcs(rev, "false")}, "v0.4.0"},
		{"module pseudo-version, dirty", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-f41cb81e0a7c+dirty"}}, "v0.0.0-20260101120000-f41cb81e0a7c+dirty"},
		{"devel: revision", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "false")}, "f41cb81e0a7c"},
		{"devel: revision, modified", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs(rev, "true")}, "f41cb81e0a7c-dirty"},
		{"short revision kept", "", &debug.BuildInfo{Settings: vcs("abc123", "true")}, "abc123-dirty"},
		{"devel without VCS (go test, go run)", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"modified without revision", "", &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}}, "dev"},
	} {
		if got := resolve(tc.linked, tc.bi); got != tc.want {
			t.Errorf("%s: resolve(%q, %+v) = %q, want %q", tc.name, tc.linked, tc.bi, got, tc.want)
		}
	}
}

func TestGetUsesLinkedVersion(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v7.7.7"
	if got := Get(); got != "v7.7.7" {
		t.Errorf("Get() = %q with Version set", got)
	}
	Version = ""
	if got := Get(); got == "" {
		t.Error("Get() is empty without a linked version")
	}
}

// The variable's path is what the Makefile passes to -X (and what the report names).
func TestLinkerFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "printversion")
	const flag = "-X github.com/bnerd/bnerd-vpn-operator/internal/version.Version=v1.2.3-test"
	build := exec.Command("go", "build", "-ldflags", flag, "-o", bin, "./testdata/printversion")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil || strings.TrimSpace(string(out)) != "v1.2.3-test" {
		t.Fatalf("built with %s, the binary prints %q (%v)", flag, out, err)
	}
}

func TestBuildInfo(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v1.0.0-test"
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewBuildInfo())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 1 || fams[0].GetName() != BuildInfoName || len(fams[0].Metric) != 1 {
		t.Fatalf("gathered %v", fams)
	}
	m := fams[0].Metric[0]
	labels := map[string]string{}
	for _, l := range m.Label {
		labels[l.GetName()] = l.GetValue()
	}
	if m.GetGauge().GetValue() != 1 || len(labels) != 2 || labels["version"] != "v1.0.0-test" || labels["goversion"] != runtime.Version() {
		t.Errorf("build info %v", m)
	}
}
