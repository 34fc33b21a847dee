// Package testenv starts a real kube-apiserver and etcd (controller-runtime envtest) with the
// project's CRDs installed, for integration tests and benchmarks. The binaries come from
// hack/test-binaries.sh (KUBEBUILDER_ASSETS, or bin/k8s/<version> in the repository).
package testenv

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
)

// Env is a running API server.
type Env struct {
	env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	// dataDir is etcd's data directory when the environment chose it.
	dataDir string
}

// RepoRoot is the repository's top directory: the nearest directory above the working
// directory (go test runs a package's tests in its own directory) whose go.mod is this module's.
// It does not ask the compiler where a source file was: make test builds with -trimpath.
func RepoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(fmt.Sprintf("testenv.RepoRoot: %v", err))
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module "+module+"\n")) {
			return dir
		}
		if filepath.Dir(dir) == dir {
			panic(fmt.Sprintf("testenv.RepoRoot: no go.mod of %s above %s", module, wd))
		}
	}
}

// module is the repository's Go module.
const module = "github.com/bnerd/bnerd-vpn-operator"

// assets finds the kube-apiserver and etcd binaries.
func assets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	out, err := exec.Command(filepath.Join(RepoRoot(), "hack", "test-binaries.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("no KUBEBUILDER_ASSETS and hack/test-binaries.sh failed (run `make test-binaries`): %w", err)
	}
	return strings.TrimSpace(string(bytes.TrimSpace(out))), nil
}

// Start starts etcd and kube-apiserver with the CRDs from config/crd/bases installed.
func Start() (*Env, error) {
	dir, err := assets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// etcd's data is thrown away after the run: keep it in memory so fsync costs nothing.
	var dataDir string
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dataDir, err = os.MkdirTemp("/dev/shm", "bnerd-envtest-etcd-"); err == nil {
			env.ControlPlane.Etcd = &envtest.Etcd{DataDir: dataDir}
		}
	}
	cfg, err := env.Start()
	if err != nil {
		if dataDir != "" {
			_ = os.RemoveAll(dataDir)
		}
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := client.New(cfg, client.Options{Scheme: operator.Scheme()})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{env: env, Config: cfg, Client: c, dataDir: dataDir}, nil
}

// Stop stops the API server and etcd.
func (e *Env) Stop() error {
	err := e.env.Stop()
	if e.dataDir != "" {
		_ = os.RemoveAll(e.dataDir)
	}
	return err
}

// WriteCounter counts the mutating API requests made through a rest.Config.
type WriteCounter struct {
	n      atomic.Int64
	mu     sync.Mutex
	byKind map[string]int64
}

// ByKind is the number of writes per method and resource (e.g. "PATCH vpnpeers/status").
func (w *WriteCounter) ByKind() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int64, len(w.byKind))
	for k, v := range w.byKind {
		out[k] = v
	}
	return out
}

// resourceOf turns /apis/g/v/namespaces/ns/kind/name/sub into "kind/sub".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "namespaces" && i+2 < len(parts) {
			rest := parts[i+2:]
			if len(rest) >= 3 {
				return rest[0] + "/" + rest[2]
			}
			return rest[0]
		}
	}
	return path
}

// Count is the number of writes so far.
func (w *WriteCounter) Count() int64 { return w.n.Load() }

// Wrap returns a copy of cfg whose requests are counted.
func (w *WriteCounter) Wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			switch req.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				w.n.Add(1)
				w.mu.Lock()
				if w.byKind == nil {
					w.byKind = map[string]int64{}
				}
				w.byKind[req.Method+" "+resourceOf(req.URL.Path)]++
				w.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Main runs a package's tests against one API server: it starts it, hands it to use, runs the
// tests and stops it. For TestMain: os.Exit(testenv.Main(m, func(e *Env) { env = e })).
func Main(m interface{ Run() int }, use func(*Env)) int {
	// Operators started by the tests log through controller-runtime: noise in a passing run;
	// TEST_LOG=1 shows it.
	logOut := io.Discard
	if os.Getenv("TEST_LOG") != "" {
		logOut = os.Stderr
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(logOut), zap.Level(zapcore.InfoLevel)))
	e, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Stop() //nolint:errcheck
	use(e)
	return m.Run()
}
