package hack

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestKubeSharesTheModulesVersions: every module that both the project's packages (tests
// included) and the Kubernetes build (hack/tools/kube, what envtest and the lab run) compile is
// selected at one version in both. Built in one configuration (static, -trimpath), a package of
// such a module is then compiled once for both, which is most of what a cold `make test`
// compiles; a module at two versions is compiled twice, with everything that imports it.
// Fix a failure by raising the lower side to the higher version (`go get module@version` in
// the module that is behind).
func TestKubeSharesTheModulesVersions(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ours := compiledModules(t, root, "-test", "./...")
	kube := compiledModules(t, filepath.Join(root, "hack/tools/kube"), "./cmd/kube")
	shared := 0
	var paths []string
	for path := range ours {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		k, ok := kube[path]
		if !ok {
			continue
		}
		shared++
		if k != ours[path] {
			t.Errorf("%s: %s in go.mod, %s in hack/tools/kube/go.mod: the packages both compile are built twice", path, ours[path], k)
		}
	}
	// the Kubernetes libraries, the x/ modules, protobuf, prometheus, ... at the least
	if shared < 20 {
		t.Fatalf("only %d modules compiled by both: is go list working?", shared)
	}
}

// compiledModules are the modules (path → version, after replacements) of the packages that
// building pkgs compiles, with CGO_ENABLED=0 as make test builds.
func compiledModules(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-json=Module"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list in %s: %v %s", dir, err, msg)
	}
	type module struct {
		Path, Version string
		Main          bool
		Replace       *module
	}
	mods := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct{ Module *module }
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list output: %v", err)
		}
		m := p.Module
		if m == nil || m.Main {
			continue // the standard library, or the module itself
		}
		v := m.Version
		if m.Replace != nil {
			v = m.Replace.Path + "@" + m.Replace.Version
			if m.Replace.Path == m.Path {
				v = m.Replace.Version
			}
		}
		mods[m.Path] = v
	}
	return mods
}
