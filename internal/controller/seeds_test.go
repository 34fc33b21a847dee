package controller_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bnerd/bnerd-vpn-operator/internal/testenv"
)

// TestSeedManifestsApply: every manifest shown in the product's documents (../shared/seeds,
// 000 and 001, which describe this operator) is accepted by the API server verbatim — the
// documents are what users copy from.
func TestSeedManifestsApply(t *testing.T) {
	seeds, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "..", "shared", "seeds", "00[01]_*.txt"))
	if len(seeds) == 0 {
		t.Skip("no ../shared/seeds beside the repository")
	}
	ns := namespace(t)
	applied := 0
	for _, path := range seeds {
		for i, doc := range seedManifests(t, path) {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("%s manifest %d does not parse: %v\n%s", filepath.Base(path), i, err, doc)
			}
			obj.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused: %v\n%s", filepath.Base(path), obj.GetKind(), obj.GetName(), err, doc)
				continue
			}
			t.Logf("%s: %s %s accepted", filepath.Base(path), obj.GetKind(), obj.GetName())
			applied++
		}
	}
	if applied < 2 {
		t.Errorf("only %d seed manifests found and applied; seed 001 shows a VPNGateway and a VPNPeer", applied)
	}
}

// seedManifests extracts the YAML manifests of one seed document: blocks of lines that start
// at "apiVersion:" and run to the next blank line, split at "---".
func seedManifests(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs []string
	var cur []string
	in := false
	flush := func() {
		if len(cur) > 0 {
			docs = append(docs, strings.Join(cur, "\n"))
		}
		cur = nil
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), " \t")
		switch {
		case !in && strings.HasPrefix(line, "apiVersion:"):
			in = true
			cur = append(cur, line)
		case in && line == "":
			in = false
			flush()
		case in && line == "---":
			flush()
		case in:
			cur = append(cur, line)
		}
	}
	flush()
	var out []string
	for _, d := range docs {
		if strings.Contains(d, "bnerd.net/") {
			out = append(out, d)
		}
	}
	return out
}

// TestSamplesApply: the samples the README points at are accepted by the API server.
func TestSamplesApply(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "samples", "*.yaml"))
	ns := namespace(t)
	applied := 0
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(raw), "\n---") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				t.Fatalf("%s: %v", filepath.Base(path), err)
			}
			if len(obj.Object) == 0 || obj.GetKind() == "Kustomization" {
				continue
			}
			obj.SetNamespace(ns)
			if err := env.Client.Create(context.Background(), obj, client.DryRunAll); err != nil {
				t.Errorf("%s: %s %s refused: %v", filepath.Base(path), obj.GetKind(), obj.GetName(), err)
				continue
			}
			applied++
		}
	}
	if applied == 0 {
		t.Fatal("no sample applied")
	}
	t.Logf("%d sample objects accepted", applied)
}
