// Package e2e proves the whole path with real parts: CRs on a real kube-apiserver → the
// operator (in-process) → the rendered ConfigMap → the gateway agent (its own process, inside
// the gateway's network namespace, authenticated as the gateway's ServiceAccount with exactly
// the rendered Role) → real strongSwan / WireGuard tunnels to client sites in other network
// namespaces → real packets → VPNPeer status.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/controller"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wait"
)

var (
	env        *testenv.Env
	agentBin   string
	internalSN = netip.MustParsePrefix("198.51.100.128/25") // the "cluster" side allowed to use reverse exposures
)

func TestMain(m *testing.M) {
	if wgtest.IsHelper() { // a client site's WireGuard device, re-executed inside its namespace
		os.Exit(wgtest.RunHelper())
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if err := netns.Available("nft", "charon-systemd", "socat"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot run here:", err)
		if os.Getenv("CI") != "" {
			return 1 // CI runs as root with the packages installed: not running is a failure
		}
		return 0
	}
	logOut := io.Discard
	if os.Getenv("TEST_LOG") != "" {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logOut), zap.Level(zapcore.InfoLevel)))
	dir, err := os.MkdirTemp("", "bnerd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "gateway-agent")
	// -trimpath, as make test and the images build: the packages are in the build cache already
	build := exec.Command("go", "build", "-trimpath", "-o", agentBin, "./cmd/gateway-agent")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the agent: %v\n%s", err, out)
		return 1
	}
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop() //nolint:errcheck
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := operator.NewManager(ctx, env.Config, operator.Config{
		Options: controller.Options{
			Model:  model.Config{PoolCIDR: model.DefaultPoolCIDR, InternalSourceCIDRs: []netip.Prefix{internalSN}},
			Render: children.Options{AgentImage: "agent:e2e", StrongSwanImage: "strongswan:e2e", UserspaceDataplane: true},
			// The e2e gateways are host-network ones in namespaces the test creates.
			HostNetworkNamespaces: labels.Everything(),
		},
		Concurrency: 4, MetricsAddr: "0", HealthAddr: "0",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code := m.Run()
	cancel()
	<-done
	return code
}

// apiProxy makes the API server reachable at 127.0.0.1:port inside a network namespace: a unix
// socket (which crosses namespaces) in front of the API server, and socat inside the namespace.
func apiProxy(t testing.TB, ns *netns.NS) (port int) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	host := env.Config.Host // https://127.0.0.1:PORT
	u, err := url(host)
	if err != nil {
		t.Fatal(err)
	}
	// Every proxied connection is closed when the test ends (the agent's watches are long-lived).
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				up, err := net.Dial("tcp", u)
				if err != nil {
					c.Close()
					return
				}
				mu.Lock()
				conns = append(conns, c, up)
				mu.Unlock()
				go io.Copy(up, c) //nolint:errcheck
				io.Copy(c, up)    //nolint:errcheck
			}()
		}
	}()
	_, p, _ := net.SplitHostPort(u)
	fmt.Sscan(p, &port)
	ns.Start("socat", fmt.Sprintf("TCP-LISTEN:%d,bind=127.0.0.1,reuseaddr,fork", port), "UNIX-CONNECT:"+sock)
	if err := netns.Eventually(10*time.Second, func() error {
		_, err := ns.Run("socat", "-u", "OPEN:/dev/null", fmt.Sprintf("TCP:127.0.0.1:%d", port))
		return err
	}); err != nil {
		t.Fatalf("API proxy in %s: %v", ns.Name, err)
	}
	return port
}

func url(host string) (string, error) {
	u, err := netip.ParseAddrPort(strings.TrimSuffix(trimScheme(host), "/"))
	if err != nil {
		return "", fmt.Errorf("API server address %q: %w", host, err)
	}
	return u.String(), nil
}

func trimScheme(s string) string {
	for _, p := range []string{"https://", "http://"} {
		if len(s) > len(p) && s[:len(p)] == p {
			return s[len(p):]
		}
	}
	return s
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the gateway's
// ServiceAccount (a real token from the TokenRequest API), so the agent has exactly the
// permissions of the Role the operator rendered.
func serviceAccountKubeconfig(t testing.TB, namespace, serviceAccount string, port int) string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	exp := int64(3600)
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, serviceAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("https://127.0.0.1:%d", port), CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "agent", Namespace: namespace}
	cfg.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// gatewayAgent runs the real gateway-agent binary inside ns as the gateway's ServiceAccount.
func gatewayAgent(t *testing.T, ns *netns.NS, namespace, gateway string, extra ...string) *netns.Process {
	t.Helper()
	port := apiProxy(t, ns)
	kubeconfig := serviceAccountKubeconfig(t, namespace, children.Name(gateway), port)
	args := append([]string{"env", "KUBECONFIG=" + kubeconfig, agentBin, "run", "--userspace-dataplane",
		"--gateway", gateway, "--namespace", namespace, "--metrics-addr", "127.0.0.1:9090", "--status-interval", "1s", "--teardown-wait", "5s"}, extra...)
	if slices.Contains(extra, "userspace") {
		removeUAPISocketAtCleanup(t, nft.WireGuardInterface, hostNetworkWGDevice(namespace, gateway))
	}
	return ns.Start(args...)
}

// createRendered creates objs and returns the gateway "gw" of namespace ns once its
// configuration is rendered and, when given, cond holds for it.
func createRendered(t testing.TB, ns string, objs []client.Object, cond func(*vpnv1.VPNGateway) error) *vpnv1.VPNGateway {
	t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	gateway := &vpnv1.VPNGateway{}
	waitFor(t, "gateway rendered", 20*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "gw"}, gateway); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(gateway.Status.Conditions, vpnv1.ConditionRendered) {
			return fmt.Errorf("not rendered: %+v", gateway.Status.Conditions)
		}
		if cond != nil {
			return cond(gateway)
		}
		return nil
	})
	return gateway
}

// tenantPod records a pod of the gateway's tenant with the given address (as the kubelet would
// report it): the address may reach the gateway's reverse exposures.
func tenantPod(t testing.TB, ns, name, ip string) {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{Name: "c", Image: "client:e2e"}}},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds; its last error explains a timeout.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	wait.For(t, what, timeout, cond)
}

// newNamespace creates a Kubernetes namespace for one test, named base-N.
func newNamespace(t testing.TB, base string) string {
	t.Helper()
	name := uniqueNamespace(base) // envtest never removes a namespace: a second -count run needs its own
	if err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}
