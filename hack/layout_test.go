package hack

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The binaries the project ships (images and the kubectl plugin); every other program of cmd/
// belongs to the lab.
var shippedBinaries = []string{"./cmd/operator", "./cmd/gateway-agent", "./cmd/kubectl-vpn"}

// notShipped are the roots of the packages that only tests and the lab use.
var notShipped = []string{"internal/testing/", "internal/lab/"}

// TestLayoutSeparatesShippedCode: the shipped binaries link nothing under internal/testing or
// internal/lab, and every other package of internal/ with code is linked by one of them, so a
// package's path tells whether it ships.
func TestLayoutSeparatesShippedCode(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	module := goList(t, root, "-m")[0]
	shipped := map[string]bool{}
	for _, bin := range shippedBinaries {
		for _, dep := range goList(t, root, "-deps", bin) {
			rel, ok := strings.CutPrefix(dep, module+"/")
			if !ok {
				continue
			}
			for _, n := range notShipped {
				if strings.HasPrefix(rel+"/", n) {
					t.Errorf("%s links %s, a package of the tests or the lab", bin, rel)
				}
			}
			shipped[rel] = true
		}
	}
	// packages with code (a directory of tests alone ships nothing either way)
	for _, pkg := range goList(t, root, "-f", "{{if .GoFiles}}{{.ImportPath}}{{end}}", "./internal/...") {
		rel := strings.TrimPrefix(pkg, module+"/")
		test := false
		for _, n := range notShipped {
			test = test || strings.HasPrefix(rel+"/", n)
		}
		if !test && !shipped[rel] {
			t.Errorf("%s ships in no binary (%s): move it under %s", rel, strings.Join(shippedBinaries, ", "), strings.Join(notShipped, " or "))
		}
	}
	if len(shipped) < 10 {
		t.Fatalf("only %d packages of the module linked by the shipped binaries: is go list working?", len(shipped))
	}
}

func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v %s", strings.Join(args, " "), err, msg)
	}
	return strings.Fields(string(out))
}
