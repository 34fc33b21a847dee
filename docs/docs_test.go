// Package docs holds the project's documentation (markdown) and the tests that keep it honest:
// the manifests in it are valid, the parameter sheet's worked example is what `kubectl vpn
// import` makes of its sheet, the vendor algorithm tables are what the import reads, links,
// anchors, field paths and flags exist, and every quick-start command is either run by the lab
// or marked as needing a real cluster.
package docs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// --- the pages ---

// docsDir is this directory; repoRoot the repository's.
func docsDir() string { return filepath.Join(repoRoot(), "docs") }

func repoRoot() string { return testenv.RepoRoot() }

type page struct {
	path string // absolute
	rel  string // relative to docs/
	text string
}

// pages are the markdown files under docs/ and the README (rel "../README.md").
func pages(t *testing.T) []page {
	t.Helper()
	var out []page
	err := filepath.WalkDir(docsDir(), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(docsDir(), path)
		out = append(out, page{path: path, rel: rel, text: string(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 5 {
		t.Fatalf("only %d pages under docs/", len(out))
	}
	readme := filepath.Join(repoRoot(), "README.md")
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, page{path: readme, rel: filepath.Join("..", "README.md"), text: string(b)})
}

func pageNamed(t *testing.T, rel string) page {
	t.Helper()
	for _, p := range pages(t) {
		if p.rel == rel {
			return p
		}
	}
	t.Fatalf("no docs/%s", rel)
	return page{}
}

// block is a fenced code block: its info string (language) and its text, the fence's
// indentation removed (blocks inside list items are indented).
type block struct {
	lang string
	text string
	line int
}

var fence = regexp.MustCompile("^( *)(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

func blocks(text string) []block {
	var out []block
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		indent, marker := len(m[1]), m[2]
		b := block{lang: strings.ToLower(m[3]), line: i + 1}
		var body []string
		for i++; i < len(lines); i++ {
			if strings.HasPrefix(strings.TrimLeft(lines[i], " "), marker) {
				break
			}
			l := lines[i]
			for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
				l = l[1:]
			}
			body = append(body, l)
		}
		b.text = strings.Join(body, "\n")
		out = append(out, b)
	}
	return out
}

// prose is the text without fenced code blocks.
func prose(text string) string {
	var out []string
	in := ""
	for _, l := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(l); m != nil {
			switch {
			case in == "":
				in = m[2]
				continue
			case strings.HasPrefix(strings.TrimLeft(l, " "), in):
				in = ""
				continue
			}
		}
		if in == "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// codeSpan is an inline code span; it may wrap onto the next line, never across a paragraph.
var codeSpan = regexp.MustCompile("`([^`\n]+(?:\n[^`\n]+)?)`")

// codeSpans are the inline code spans of the prose (tables included).
func codeSpans(text string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(prose(text), -1) {
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

// yamlDocs splits a YAML block into its documents.
func yamlDocs(text string) []string {
	var out []string
	var cur []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimRight(l, " ") == "---" {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, l)
	}
	out = append(out, strings.Join(cur, "\n"))
	var docs []string
	for _, d := range out {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// --- manifests ---

// manifest is one YAML document of the pages that declares an apiVersion.
type manifest struct {
	where string // page:line
	doc   string
	gvk   schema.GroupVersionKind
}

func ours(group string) bool {
	return group == vpnv1.GroupVersion.Group || group == ipsecv1.GroupVersion.Group
}

// manifests are the documents of every yaml block that declare apiVersion and kind.
func manifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	for _, p := range pages(t) {
		for _, b := range blocks(p.text) {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			for _, d := range yamlDocs(b.text) {
				var head struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
				}
				if err := yaml.Unmarshal([]byte(d), &head); err != nil {
					t.Errorf("%s:%d: a YAML block that does not parse: %v", p.rel, b.line, err)
					continue
				}
				if head.APIVersion == "" {
					continue
				}
				gv, err := schema.ParseGroupVersion(head.APIVersion)
				if err != nil {
					t.Errorf("%s:%d: apiVersion %q: %v", p.rel, b.line, head.APIVersion, err)
					continue
				}
				out = append(out, manifest{where: fmt.Sprintf("%s:%d", p.rel, b.line), doc: d, gvk: gv.WithKind(head.Kind)})
			}
		}
	}
	return out
}

// TestManifestsDecodeStrictly: every manifest in the docs of this operator's groups (and of
// the built-in kinds) decodes into the Go types with unknown and duplicate fields refused, so
// a typo'd field in a page fails here. A fragment that is only a `spec:` decodes into a
// VPNGatewaySpec or a VPNPeerSpec, and a parameter sheet (top-level gateway and peer) parses
// as kubectl vpn import reads it.
func TestManifestsDecodeStrictly(t *testing.T) {
	scheme := kube.Scheme()
	n := 0
	for _, m := range manifests(t) {
		obj, err := scheme.New(m.gvk)
		if err != nil {
			if ours(m.gvk.Group) {
				t.Errorf("%s: %s is not a kind of this operator: %v", m.where, m.gvk, err)
			}
			continue // another project's kind (a PrometheusRule, ...)
		}
		if err := yaml.UnmarshalStrict([]byte(m.doc), obj); err != nil {
			t.Errorf("%s: %s does not decode strictly: %v\n%s", m.where, m.gvk.Kind, err, m.doc)
			continue
		}
		if ours(m.gvk.Group) {
			n++
		}
	}
	if n < 4 {
		t.Errorf("only %d manifests of this operator's kinds in the docs", n)
	}

	fragments, sheets := 0, 0
	for _, p := range pages(t) {
		for _, b := range blocks(p.text) {
			if b.lang != "yaml" && b.lang != "yml" {
				continue
			}
			for _, d := range yamlDocs(b.text) {
				var top map[string]any
				if err := yaml.Unmarshal([]byte(d), &top); err != nil || top["apiVersion"] != nil {
					continue
				}
				switch {
				case len(top) == 1 && top["spec"] != nil:
					fragments++
					var gw struct {
						Spec vpnv1.VPNGatewaySpec `json:"spec"`
					}
					var peer struct {
						Spec vpnv1.VPNPeerSpec `json:"spec"`
					}
					gerr, perr := yaml.UnmarshalStrict([]byte(d), &gw), yaml.UnmarshalStrict([]byte(d), &peer)
					if gerr != nil && perr != nil {
						t.Errorf("%s:%d: a spec fragment that is neither a VPNGateway's (%v) nor a VPNPeer's (%v)", p.rel, b.line, gerr, perr)
					}
				case top["gateway"] != nil && top["peer"] != nil:
					sheets++
					if _, err := deviceconfig.ParseSheet([]byte(d)); err != nil {
						t.Errorf("%s:%d: a parameter sheet kubectl vpn import cannot read: %v", p.rel, b.line, err)
					}
				}
			}
		}
	}
	t.Logf("%d manifests of this operator's kinds, %d spec fragments, %d parameter sheets decoded strictly", n, fragments, sheets)
}

// TestManifestsAcceptedByAPIServer: with a real API server (KUBEBUILDER_ASSETS, as in make
// test), every manifest of this operator's groups and every built-in object in the docs is
// accepted (server-side dry run): the CRDs' OpenAPI schemas and CEL rules, not only the Go
// types.
func TestManifestsAcceptedByAPIServer(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set (make test sets it): the strict decoding above still ran")
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop() //nolint:errcheck
	ctx := context.Background()
	scheme := kube.Scheme()
	namespaces := map[string]bool{}
	accepted := 0
	for _, m := range manifests(t) {
		if _, err := scheme.New(m.gvk); err != nil {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(m.doc), &obj.Object); err != nil {
			t.Errorf("%s: %v", m.where, err)
			continue
		}
		if m.gvk.Kind == "Namespace" || m.gvk.Kind == "ClusterLink" {
			obj.SetNamespace("")
		} else {
			ns := obj.GetNamespace()
			if ns == "" {
				ns = "docs"
				obj.SetNamespace(ns)
			}
			if !namespaces[ns] {
				namespaces[ns] = true
				err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
				if err != nil && !strings.Contains(err.Error(), "already exists") {
					t.Fatal(err)
				}
			}
		}
		if err := env.Client.Create(ctx, obj, client.DryRunAll); err != nil {
			t.Errorf("%s: %s %s refused by the API server: %v\n%s", m.where, m.gvk.Kind, obj.GetName(), err, m.doc)
			continue
		}
		accepted++
	}
	t.Logf("%d manifests accepted by the API server", accepted)
}

// --- the parameter sheet page ---

// TestWorkedExampleIsWhatImportMakes: the worked example of parameter-sheet.md is exactly what
// kubectl vpn import makes of the page's sheet, plus the exposures a sheet does not describe.
func TestWorkedExampleIsWhatImportMakes(t *testing.T) {
	p := pageNamed(t, "parameter-sheet.md")
	var sheetDoc string
	for _, b := range blocks(p.text) {
		if b.lang == "yaml" && strings.HasPrefix(strings.TrimSpace(b.text), "gateway:") {
			sheetDoc = b.text
			break
		}
	}
	if sheetDoc == "" {
		t.Fatal("parameter-sheet.md has no sheet (a yaml block starting with gateway:)")
	}
	sheet, err := deviceconfig.ParseSheet([]byte(sheetDoc))
	if err != nil {
		t.Fatal(err)
	}
	im, err := deviceconfig.Import(sheet, deviceconfig.ImportOptions{})
	if err != nil {
		t.Fatalf("kubectl vpn import refuses the page's sheet: %v", err)
	}

	var gw *vpnv1.VPNGateway
	var peer *vpnv1.VPNPeer
	var secret *corev1.Secret
	for _, m := range manifests(t) {
		if !strings.HasPrefix(m.where, "parameter-sheet.md:") {
			continue
		}
		switch m.gvk.Kind {
		case "VPNGateway":
			gw = &vpnv1.VPNGateway{}
			decodeInto(t, m, gw)
		case "VPNPeer":
			peer = &vpnv1.VPNPeer{}
			decodeInto(t, m, peer)
		case "Secret":
			secret = &corev1.Secret{}
			decodeInto(t, m, secret)
		}
	}
	if gw == nil || peer == nil || secret == nil {
		t.Fatal("parameter-sheet.md's worked example needs a Secret, a VPNGateway and a VPNPeer")
	}

	want := im.Gateway.DeepCopy()
	want.Spec.Exposures, want.Spec.ReverseExposures = gw.Spec.Exposures, gw.Spec.ReverseExposures
	if len(gw.Spec.Exposures) == 0 {
		t.Error("the worked example's gateway has no exposures")
	}
	if gw.Name != want.Name || gw.Namespace != want.Namespace || !apiequality.Semantic.DeepEqual(gw.Spec, want.Spec) {
		t.Errorf("the worked example's VPNGateway is not what kubectl vpn import makes of the sheet (plus the exposures):\npage:   %s\nimport: %s", asYAML(gw.Spec), asYAML(want.Spec))
	}
	if peer.Name != im.Peer.Name || peer.Namespace != im.Peer.Namespace || !apiequality.Semantic.DeepEqual(peer.Spec, im.Peer.Spec) {
		t.Errorf("the worked example's VPNPeer is not what kubectl vpn import makes of the sheet:\npage:   %s\nimport: %s", asYAML(peer.Spec), asYAML(im.Peer.Spec))
	}
	ref := im.Peer.Spec.IPsec.PSKSecretRef
	if secret.Name != im.Secret.Name || secret.Namespace != im.Secret.Namespace || secret.Type != corev1.SecretTypeOpaque ||
		secret.StringData[ref.Key] != sheet.PSK || !bytes.Equal(im.Secret.Data[ref.Key], []byte(sheet.PSK)) {
		t.Errorf("the worked example's Secret %s/%s (type %q) does not hold the sheet's key under %q as kubectl vpn import writes it (%s/%s)",
			secret.Namespace, secret.Name, secret.Type, ref.Key, im.Secret.Namespace, im.Secret.Name)
	}
}

func decodeInto(t *testing.T, m manifest, obj any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(m.doc), obj); err != nil {
		t.Fatalf("%s: %v", m.where, err)
	}
}

func asYAML(v any) string {
	b, _ := yaml.Marshal(v)
	return "\n" + string(b)
}

var backticked = regexp.MustCompile("`([^`]+)`")

// TestVendorAlgorithmTables: in parameter-sheet.md's algorithm tables (a header starting with
// "strongSwan keyword"), the first column is a canonical algorithm and every vendor word in a
// row is read by kubectl vpn import as exactly that algorithm (internal/deviceconfig's table).
func TestVendorAlgorithmTables(t *testing.T) {
	p := pageNamed(t, "parameter-sheet.md")
	kinds := []deviceconfig.Kind{deviceconfig.Encryption, deviceconfig.Integrity, deviceconfig.PRF, deviceconfig.DH}
	rows, words := 0, 0
	inTable := false
	for i, l := range strings.Split(prose(p.text), "\n") {
		if !strings.HasPrefix(l, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if strings.HasPrefix(strings.TrimSpace(cells[0]), "strongSwan keyword") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		m := backticked.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("parameter-sheet.md line %d: no algorithm in the first column: %s", i+1, l)
			continue
		}
		canonical := m[1]
		var kind deviceconfig.Kind
		found := false
		for _, k := range kinds {
			if a, err := deviceconfig.LookupAlias(k, canonical); err == nil && a.Name == canonical {
				kind, found = k, true
				break
			}
		}
		if !found {
			t.Errorf("parameter-sheet.md: %q is not a canonical algorithm (a strongSwan keyword the operator negotiates)", canonical)
			continue
		}
		rows++
		for _, cell := range cells[1:] {
			for _, w := range backticked.FindAllStringSubmatch(cell, -1) {
				words++
				a, err := deviceconfig.LookupAlias(kind, w[1])
				switch {
				case err != nil:
					t.Errorf("parameter-sheet.md: %q in the row of %s: %v", w[1], canonical, err)
				case a.Name != canonical:
					t.Errorf("parameter-sheet.md: %q in the row of %s is read as %s", w[1], canonical, a.Name)
				}
			}
		}
	}
	if rows < 20 || words < 100 {
		t.Errorf("only %d rows, %d vendor words checked in parameter-sheet.md's algorithm tables", rows, words)
	}
	t.Logf("%d algorithms, %d vendor words checked", rows, words)
}

// --- links ---

var (
	mdLink   = regexp.MustCompile(`\[[^\]\n]*\]\(([^)\s]+)\)`)
	htmlID   = regexp.MustCompile(`\bid="([^"]+)"`)
	headingR = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// slug is GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
func slug(heading string) string {
	heading = codeSpan.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// anchors of a markdown file: its headings' slugs (repeated ones with -1, -2, ...) and ids.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(prose(text), "\n") {
		if m := headingR.FindStringSubmatch(l); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlID.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// TestLinksResolve: every relative link in the pages names a file of the repository that
// exists, and every anchor one of its headings (or ids). A relative link that leaves the
// repository is an error: a clone has nothing beside it.
func TestLinksResolve(t *testing.T) {
	root := repoRoot()
	checked := 0
	for _, p := range pages(t) {
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(prose(p.text), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := p.path
			if file != "" {
				path = filepath.Join(filepath.Dir(p.path), file)
			}
			if rel, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("docs/%s: link %q leaves the repository", p.rel, target)
				continue
			}
			checked++
			b, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("docs/%s: link %q: %v", p.rel, target, err)
				continue
			}
			if anchor != "" && !anchors(string(b))[anchor] {
				t.Errorf("docs/%s: link %q: no heading or id %q in %s", p.rel, target, anchor, file)
			}
		}
	}
	t.Logf("%d links checked", checked)
}

// --- field paths ---

var fieldPath = regexp.MustCompile(`^(spec|status)((?:\.[A-Za-z][A-Za-z0-9]*(?:\[\])?)+)`)

// hasPath: the JSON field path (e.g. spec.exposures[].virtualIP) exists in the type.
func hasPath(t reflect.Type, path []string) bool {
	for _, name := range path {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return false
		}
		f, ok := jsonField(t, name)
		if !ok {
			return false
		}
		t = f.Type
	}
	return true
}

func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "" && f.Anonymous {
			if g, ok := jsonField(f.Type, name); ok {
				return g, true
			}
		}
		if tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// TestFieldPathsExist: every `spec.…` or `status.…` field path the pages name (in code spans)
// is a field of VPNGateway, VPNPeer, IPsecGateway or ClusterLink.
func TestFieldPathsExist(t *testing.T) {
	types := []reflect.Type{
		reflect.TypeFor[vpnv1.VPNGateway](), reflect.TypeFor[vpnv1.VPNPeer](),
		reflect.TypeFor[ipsecv1.IPsecGateway](), reflect.TypeFor[ipsecv1.ClusterLink](),
	}
	checked := 0
	for _, p := range pages(t) {
		if strings.HasPrefix(p.rel, "reference"+string(filepath.Separator)) {
			continue // generated from the types
		}
		for _, span := range codeSpans(p.text) {
			m := fieldPath.FindStringSubmatch(span)
			if m == nil {
				continue
			}
			path := []string{m[1]}
			for _, s := range strings.Split(strings.TrimPrefix(m[2], "."), ".") {
				path = append(path, strings.TrimSuffix(s, "[]"))
			}
			checked++
			if !slices.ContainsFunc(types, func(ty reflect.Type) bool { return hasPath(ty, path) }) {
				t.Errorf("docs/%s: `%s` is not a field of VPNGateway, VPNPeer, IPsecGateway or ClusterLink", p.rel, m[0])
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d field paths found in the docs", checked)
	}
	t.Logf("%d field paths checked", checked)
}

// --- flags ---

// flagDef finds flag definitions in the commands' sources: f.StringVar(&x, "name", ...),
// cmd.Flags().BoolVarP(&x, "name", "A", ...), ...
var flagDef = regexp.MustCompile(`\.(?:String|StringSlice|StringArray|StringToString|Bool|Int|Int32|Int64|Float32|Float64|Duration|Uint16)(?:Var)?P?\((?:&[^,]+,\s*)?"([a-z0-9][a-z0-9-]*)"`)

// otherTools are the flags of other programs the pages use, with the program.
var otherTools = map[string]string{
	"dry-run":                "kubectl apply",
	"server-side":            "kubectl apply",
	"overwrite":              "kubectl annotate",
	"from-literal":           "kubectl create secret",
	"timeout":                "kubectl wait",
	"interface":              "curl",
	"max-time":               "curl",
	"create-namespace":       "helm install",
	"set-file":               "helm install",
	"set":                    "helm install",
	"port":                   "openstack floating ip",
	"allowed-unsafe-sysctls": "kubelet",
	"load-all":               "swanctl",
	"help":                   "cobra",
	"version":                "cobra (the binaries set Version)",
}

// knownFlags: the flags of the operator, the gateway agent and kubectl vpn (from their
// sources), kubectl's generic flags that kubectl vpn shares, and otherTools.
func knownFlags(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range otherTools {
		out[k] = v
	}
	files, err := filepath.Glob(filepath.Join(repoRoot(), "cmd", "*", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no command sources: %v", err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagDef.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = filepath.Base(filepath.Dir(f))
		}
	}
	fs := pflag.NewFlagSet("kubectl", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).AddFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) { out[f.Name] = "kubectl (generic)" })
	for _, must := range []string{"service-cidr-pool", "internal-source-cidrs", "status-interval", "include-secrets", "tail"} {
		if out[must] == "" {
			t.Fatalf("flag --%s not found in cmd/: the flag pattern misses a definition", must)
		}
	}
	return out
}

var flagUse = regexp.MustCompile(`(?:^|[\s(\x60"'=\[])--([a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)

// TestFlagsExist: every --flag the pages name, in code spans and code blocks, is a flag of one
// of the project's commands or of a program listed in otherTools.
func TestFlagsExist(t *testing.T) {
	known := knownFlags(t)
	checked := 0
	for _, p := range pages(t) {
		if strings.HasPrefix(p.rel, "reference"+string(filepath.Separator)) {
			continue
		}
		texts := codeSpans(p.text)
		for _, b := range blocks(p.text) {
			texts = append(texts, b.text)
		}
		for _, s := range texts {
			for _, m := range flagUse.FindAllStringSubmatch(s, -1) {
				checked++
				if known[m[1]] == "" {
					t.Errorf("docs/%s: --%s is not a flag of the operator, the gateway agent, kubectl vpn, or the other programs the docs use", p.rel, m[1])
				}
			}
		}
	}
	t.Logf("%d flag uses checked", checked)
}

// --- commands ---

// needsCluster marks a command no test runs for us.
var needsCluster = regexp.MustCompile(`\(needs a real (cluster|cloud)`)

// labRuns are the commands the quick start (and the migration runbook) show without that
// mark: each is run, in this form, by the lab or its end-to-end suite — the file and the text
// in it that runs it.
var labRuns = map[string]struct{ file, runs string }{
	"make lab":      {"hack/lab/lab.mk", "\nlab: ##"},
	"make lab-down": {"hack/lab/lab.mk", "\nlab-down: ##"},
	// the lab's image builder, which make lab runs (cluster-up.sh) with the tag "lab"
	"make images VERSION=v0.4.0":                                                                                 {"Makefile", `IMAGE_TAG=$(VERSION) hack/lab/build-images.sh`},
	"export KUBECONFIG=/var/lib/bnerd-lab/pki/admin.kubeconfig":                                                  {"hack/lab/common.sh", `export KUBECONFIG=$S/pki/admin.kubeconfig`},
	"export PATH=$PWD/bin/k8s/v1.37.2:$PATH":                                                                     {"hack/lab/common.sh", `export PATH="$K:$PATH"`},
	"kubectl -n lab-acme get vpngw,vpnpeer -o wide":                                                              {"hack/lab/lab.sh", `kubectl -n $NS get vpngw,vpnpeer -o wide`},
	"bin/kubectl-vpn status -n lab-acme":                                                                         {"test/cluster/cluster_test.go", `L.vpn("status")`},
	"bin/kubectl-vpn diagnose acme-gw -n lab-acme":                                                               {"test/cluster/cluster_test.go", `L.vpn("diagnose", ipsecGW)`},
	"bin/kubectl-vpn peer-config hq -n lab-acme --format strongswan --include-secrets":                           {"hack/lab/common.sh", `"$root/bin/kubectl-vpn" peer-config "$1" -n "$LAB_NS" --format "$2" --include-secrets`},
	`VIP=$(kubectl -n lab-acme get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name=="web")].virtualIP}')`: {"hack/lab/lab.sh", `VIP_WEB=$(kubectl -n $NS get vpngw acme-gw -o jsonpath='{.status.exposures[?(@.name=="web")].virtualIP}')`},
	"ip netns exec lab-site-hq curl -sS --interface 203.0.113.17 http://$VIP:8080/":                              {"hack/lab/lab.sh", `ip netns exec "lab-site-$1" curl -sS --max-time "${3:-2}" --interface "$(site_host "$2")" "$4"`},
	"go build -o bin/kubectl-vpn ./cmd/kubectl-vpn":                                                              {"hack/lab/build.sh", `static build -o bin/kubectl-vpn ./cmd/kubectl-vpn`},
}

// commandLines are the commands of a page's sh blocks: continuation lines joined, comment
// lines left out.
func commandLines(text string) []string {
	var out []string
	for _, b := range blocks(text) {
		if b.lang != "sh" && b.lang != "bash" && b.lang != "console" {
			continue
		}
		cur := ""
		for _, l := range strings.Split(b.text, "\n") {
			l = strings.TrimSpace(l)
			if cur == "" && (l == "" || strings.HasPrefix(l, "#")) {
				continue
			}
			if strings.HasSuffix(l, "\\") {
				cur += strings.TrimSuffix(l, "\\") + " "
				continue
			}
			out = append(out, cur+l)
			cur = ""
		}
	}
	return out
}

// withoutComment is a command line without its trailing comment.
func withoutComment(l string) string {
	if i := strings.Index(l, " #"); i >= 0 {
		l = l[:i]
	}
	return strings.TrimSpace(l)
}

// TestCommandsRunByTheLabOrMarked: every command of the quick start and the migration
// runbook is either run by the lab (labRuns names where) or marked as needing a real cluster
// or cloud.
func TestCommandsRunByTheLabOrMarked(t *testing.T) {
	root := repoRoot()
	var used []string
	for _, name := range []string{"quick-start.md", "migration.md"} {
		for _, l := range commandLines(pageNamed(t, name).text) {
			if needsCluster.MatchString(l) {
				continue
			}
			cmd := withoutComment(l)
			ev, ok := labRuns[cmd]
			if !ok {
				t.Errorf("docs/%s: %q is neither run by the lab (add it to labRuns with the file that runs it) nor marked \"(needs a real cluster)\" or \"(needs a real cloud)\"", name, cmd)
				continue
			}
			used = append(used, cmd)
			b, err := os.ReadFile(filepath.Join(root, ev.file))
			if err != nil {
				t.Errorf("%q: %v", cmd, err)
				continue
			}
			if !strings.Contains(string(b), ev.runs) {
				t.Errorf("docs/%s: %q: %s no longer runs it (%q not found)", name, cmd, ev.file, ev.runs)
			}
		}
	}
	var stale []string
	for cmd := range labRuns {
		if !slices.Contains(used, cmd) {
			stale = append(stale, cmd)
		}
	}
	sort.Strings(stale)
	for _, cmd := range stale {
		t.Errorf("labRuns lists %q, which no page shows any more", cmd)
	}
	t.Logf("%d commands run by the lab", len(used))
}

// --- Helm values ---

// chartValuesMarker marks a YAML block of values for the chart.
const chartValuesMarker = "values for charts/bnerd-vpn-operator"

// keyPaths lists the paths of a values tree's leaves (maps only; lists are leaves).
func keyPaths(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		*out = append(*out, prefix)
		return
	}
	for k, sub := range m {
		keyPaths(strings.TrimPrefix(prefix+"."+k, "."), sub, out)
	}
}

func lookupPath(v any, path string) bool {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if v, ok = m[k]; !ok {
			return false
		}
	}
	return true
}

// TestChartValuesExist: every value a page sets for the chart (a yaml block whose first line
// says it holds values for charts/bnerd-vpn-operator) is a value of the chart's values.yaml,
// and helm renders the chart with them (values.schema.json included) when hack/helm.sh can
// provide helm.
func TestChartValuesExist(t *testing.T) {
	chartDir := filepath.Join(repoRoot(), "charts", "bnerd-vpn-operator")
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(b, &defaults); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, p := range pages(t) {
		for _, bl := range blocks(p.text) {
			first, _, _ := strings.Cut(bl.text, "\n")
			if bl.lang != "yaml" || !strings.Contains(first, chartValuesMarker) {
				continue
			}
			found++
			var values map[string]any
			if err := yaml.UnmarshalStrict([]byte(bl.text), &values); err != nil {
				t.Errorf("%s:%d: %v", p.rel, bl.line, err)
				continue
			}
			var paths []string
			keyPaths("", values, &paths)
			sort.Strings(paths)
			for _, path := range paths {
				if !lookupPath(defaults, path) {
					t.Errorf("%s:%d: %s is not a value of the chart (charts/bnerd-vpn-operator/values.yaml)", p.rel, bl.line, path)
				}
			}
			helmTemplate(t, chartDir, fmt.Sprintf("%s:%d", p.rel, bl.line), bl.text)
		}
	}
	if found == 0 {
		t.Errorf("no page holds values for the chart (a yaml block whose first line says %q)", chartValuesMarker)
	}
}

// helmTemplate renders the chart with the values through the real helm (hack/helm.sh, cached
// in bin/tools; built from the Go module proxy the first time, as the chart's own tests do).
func helmTemplate(t *testing.T, chartDir, where, values string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(repoRoot(), "hack", "helm.sh")).Output()
	if err != nil {
		t.Logf("%s: not rendered with helm (hack/helm.sh: %v); the value names were checked", where, err)
		return
	}
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(strings.TrimSpace(string(out)), "template", "bnerd-vpn-operator", chartDir, "-n", "bnerd-vpn-system",
		"--kube-version", "v1.37.2", "-f", f) // the version the project tests against
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: helm template refuses the values: %v\n%s", where, err, msg)
	} else {
		t.Logf("%s: helm template renders the chart with these values", where)
	}
}

// --- words of the tracker ---

// trackerWords are words that belong to how the project is worked on, not to the product: an
// issue number, the tracker's commands, the first documents the product grew from, a path
// outside the repository. Users of a clone see none of them.
var trackerWords = regexp.MustCompile(`(?i:\bissues? #?\d+\b|\bissues show\b|\bseeds?\b)|\.\./shared\b|\bDESIGN\.md\b`)

// codeTrackerWords: the same in code, where "seed" has other meanings (an allocator's seeds,
// a fuzzer's).
var codeTrackerWords = regexp.MustCompile(`(?i:\bissue #?\d+\b|\bissues show\b|\bseed 0\d\d\b|\bseeds')|\.\./shared\b|\bDESIGN\.md\b`)

// TestNoTrackerWords: the pages, the CRDs (their descriptions ship in the cluster), the chart,
// the scripts and the Go code (messages and comments) name no tracker issue, no document
// outside the repository and no path beside it.
func TestNoTrackerWords(t *testing.T) {
	for _, p := range pages(t) {
		for i, l := range strings.Split(p.text, "\n") {
			if m := trackerWords.FindString(l); m != "" {
				t.Errorf("docs/%s:%d: %q: a word of the tracker, not of the product", p.rel, i+1, m)
			}
		}
	}
	root := repoRoot()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "docs":
				return filepath.SkipDir
			}
			return nil
		}
		re := codeTrackerWords
		switch {
		case strings.HasSuffix(path, ".go"):
		case strings.HasSuffix(path, ".yaml"), strings.HasSuffix(path, ".sh"), strings.HasSuffix(path, ".mk"),
			strings.HasSuffix(path, ".tpl"), strings.HasSuffix(path, ".json"), filepath.Base(path) == "Makefile":
			re = trackerWords
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, l := range strings.Split(string(b), "\n") {
			if m := re.FindString(l); m != "" {
				t.Errorf("%s:%d: %q: a word of the tracker, not of the product", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files checked", checked)
}
