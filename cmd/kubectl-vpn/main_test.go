package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
	buildversion "github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// env is a real kube-apiserver with the CRDs; no operator runs, so tests write the gateways'
// status themselves (through the status subresource, as the operator does).
var (
	env        *testenv.Env
	kubeconfig string
)

func TestMain(m *testing.M) {
	if os.Getenv("KUBECTL_VPN_NO_ENVTEST") != "" {
		os.Exit(m.Run())
	}
	os.Exit(testenv.Main(m, func(e *testenv.Env) {
		env = e
		dir, err := os.MkdirTemp("", "kubectl-vpn-test-")
		if err != nil {
			panic(err)
		}
		kubeconfig = filepath.Join(dir, "kubeconfig")
		cfg := clientcmdapi.NewConfig()
		cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
		cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData, Token: e.Config.BearerToken}
		cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
		cfg.CurrentContext = "envtest"
		if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
			panic(err)
		}
	}))
}

// run executes kubectl-vpn in-process against the test API server.
func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	if env == nil {
		t.Skip("no API server (KUBECTL_VPN_NO_ENVTEST)")
	}
	var out, errOut bytes.Buffer
	cmd := newRootCommand(genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

func namespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
}

// createIPsec creates a gateway with its status, a peer and the peer's Secret.
func createIPsec(t *testing.T, ns, psk string) (*vpnv1.VPNGateway, *vpnv1.VPNPeer) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: ns},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}},
			IPsec: &vpnv1.IPsecGatewaySettings{IKE: vpnv1.IKESettings{
				Proposals: []string{"aes256gcm16-prfsha384-ecp384", "aes256-sha256-modp2048"},
			}},
		},
	}
	if err := c.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status = vpnv1.VPNGatewayStatus{PublicAddress: "198.51.100.10", ServiceCIDR: "100.64.12.0/24"}
	if err := c.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	peer := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "hq", Namespace: ns},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: "acme",
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: "203.0.113.10", ID: "hq.acme.example"},
				RemoteSubnets: []string{"192.168.10.0/24"},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"},
			},
		},
	}
	if err := c.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hq-psk", Namespace: ns}, Data: map[string][]byte{"psk": []byte(psk)}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	// what the API server stored, defaults included
	if err := c.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(peer), peer); err != nil {
		t.Fatal(err)
	}
	return gw, peer
}

func TestPeerConfig(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	namespace(t, "pc")
	const psk = "api-server-pre-shared-key"
	gw, peer := createIPsec(t, "pc", psk)
	for _, f := range deviceconfig.FormatNames() {
		if f == "wg-quick" {
			continue
		}
		t.Run(f, func(t *testing.T) {
			out, stderr, err := run(t, "", "-n", "pc", "peer-config", "hq", "--format", f)
			if err != nil {
				if strings.Contains(err.Error(), "cannot do any") {
					want, rerr := deviceconfig.RenderInput(deviceconfig.Input{Gateway: gw, Peer: peer}, f)
					if rerr == nil {
						t.Fatalf("the command refused, the library rendered:\n%s", want)
					}
					return
				}
				t.Fatalf("%v\n%s", err, stderr)
			}
			want, err := deviceconfig.RenderInput(deviceconfig.Input{Gateway: gw, Peer: peer}, f)
			if err != nil {
				t.Fatal(err)
			}
			if out != want {
				t.Fatalf("output differs from the library's for the same objects:\n%s", out)
			}
			if strings.Contains(out+stderr, psk) {
				t.Fatalf("the key is in the output without --include-secrets")
			}
			with, _, err := run(t, "", "-n", "pc", "peer-config", "hq", "--format", f, "--include-secrets")
			if err != nil {
				t.Fatal(err)
			}
			wantWith, _ := deviceconfig.RenderInput(deviceconfig.Input{Gateway: gw, Peer: peer, PSK: psk}, f)
			if with != wantWith || !strings.Contains(with, psk) {
				t.Fatalf("--include-secrets output differs or lacks the key:\n%s", with)
			}
		})
	}
	t.Run("to-file", func(t *testing.T) {
		// an existing world-readable file: the key must not land in it readable by others
		file := filepath.Join(t.TempDir(), "hq.conf")
		if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, 0o644); err != nil {
			t.Fatal(err)
		}
		out, _, err := run(t, "", "-n", "pc", "peer-config", "hq", "--format", "strongswan", "--include-secrets", "--output-file", file)
		if err != nil || out != "" {
			t.Fatalf("%v %q", err, out)
		}
		st, err := os.Stat(file)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("file mode %v, %v", st.Mode(), err)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"-n", "pc", "peer-config", "nope", "--format", "strongswan"}, "VPNPeer pc/nope not found"},
			{[]string{"-n", "pc", "peer-config", "hq"}, "--format is required"},
			{[]string{"-n", "pc", "peer-config", "hq", "--format", "wg-quick"}, "is for WireGuard peers"},
			{[]string{"-n", "pc", "peer-config", "hq", "--format", "vyos"}, `unknown format "vyos"`},
		} {
			_, _, err := run(t, "", tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
			}
		}
	})
}

func TestPeerConfigWireGuard(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	ctx := context.Background()
	namespace(t, "wg")
	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "wg", Namespace: "wg"},
		Spec:       vpnv1.VPNGatewaySpec{Protocol: vpnv1.ProtocolWireGuard, Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}},
	}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	gw.Status = vpnv1.VPNGatewayStatus{PublicAddress: "198.51.100.20", ServiceCIDR: "100.64.13.0/24", WireGuardPublicKey: "GW1aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaE="}
	if err := env.Client.Status().Update(ctx, gw); err != nil {
		t.Fatal(err)
	}
	peer := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "wg"},
		Spec: vpnv1.VPNPeerSpec{GatewayRef: "wg", WireGuard: &vpnv1.WireGuardPeer{
			PublicKey: "PEERbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbE=", Subnets: []string{"192.168.50.0/24"}}},
	}
	if err := env.Client.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, "", "-n", "wg", "peer-config", "shop", "--format", "wg-quick")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PublicKey = GW1aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaE=", "Endpoint = 198.51.100.20:51820", "AllowedIPs = 100.64.13.0/24"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

const sheet = `
gateway:
  name: imported
  endpoint: loadBalancer
  serviceCIDR: 100.64.20.0/24
peer:
  name: hq
  address: 203.0.113.10
  id: hq.example.net
  networks: 192.168.10.0/24
ike:
  encryption: AES256-GCM-16
  prf: SHA2-256
  dhGroups: 19
  lifetime: 8h
esp:
  encryption: aes-gcm-256
  pfsGroups: group 19
psk: imported-pre-shared-key
`

func TestImport(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	ctx := context.Background()
	namespace(t, "imp")
	file := filepath.Join(t.TempDir(), "sheet.yaml")
	if err := os.WriteFile(file, []byte(sheet), 0o600); err != nil {
		t.Fatal(err)
	}

	// stdout: three manifests that the API server accepts as they are (dry run)
	out, _, err := run(t, "", "-n", "imp", "import", file)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(strings.TrimPrefix(out, "---\n"), "---\n")
	if len(docs) != 3 {
		t.Fatalf("%d documents:\n%s", len(docs), out)
	}
	for _, d := range docs {
		var u map[string]any
		if err := yaml.Unmarshal([]byte(d), &u); err != nil {
			t.Fatal(err)
		}
		if _, ok := u["status"]; ok {
			t.Errorf("status in the manifest:\n%s", d)
		}
	}
	var gw vpnv1.VPNGateway
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &gw); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &gw, client.DryRunAll); err != nil {
		t.Fatalf("the API server refuses the gateway: %v", err)
	}
	var peer vpnv1.VPNPeer
	if err := yaml.UnmarshalStrict([]byte(docs[2]), &peer); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &peer, client.DryRunAll); err != nil {
		t.Fatalf("the API server refuses the peer: %v", err)
	}

	// --apply creates them
	out, _, err = run(t, "", "-n", "imp", "import", file, "--apply")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"secret/hq-psk created", "vpngateway.vpn.bnerd.net/imported created", "vpnpeer.vpn.bnerd.net/hq created"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in %q", want, out)
		}
	}
	var got vpnv1.VPNPeer
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "imp", Name: "hq"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.IPsec.ESP.Proposals[0] != "aes256gcm16-ecp256" || got.Spec.IPsec.Peer.ID != "hq.example.net" {
		t.Errorf("peer spec %+v", got.Spec.IPsec)
	}
	var s corev1.Secret
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "imp", Name: "hq-psk"}, &s); err != nil || string(s.Data["psk"]) != "imported-pre-shared-key" {
		t.Fatalf("secret %v %v", s.Data, err)
	}

	// again: nothing changes
	out, _, err = run(t, "", "-n", "imp", "import", file, "--apply")
	if err != nil || !strings.Contains(out, "vpnpeer.vpn.bnerd.net/hq unchanged") {
		t.Fatalf("%v %q", err, out)
	}

	// another key for the same Secret: refused without printing either
	_, _, err = run(t, strings.Replace(sheet, "imported-pre-shared-key", "other-pre-shared-key", 1), "-n", "imp", "import", "-", "--apply")
	if err == nil || !strings.Contains(err.Error(), "exists with another value") || strings.Contains(err.Error(), "pre-shared-key\"") {
		t.Fatalf("error %v", err)
	}

	// other IKE settings for the existing gateway: refused
	_, _, err = run(t, strings.Replace(sheet, "dhGroups: 19", "dhGroups: 20", 1), "-n", "imp", "import", "-", "--apply")
	if err == nil || !strings.Contains(err.Error(), "other IKE settings") {
		t.Fatalf("error %v", err)
	}

	// a peer sheet for an existing gateway (no endpoint) whose IKE matches: applied
	peerOnly := strings.NewReplacer("  endpoint: loadBalancer\n", "", "name: hq", "name: branch", "192.168.10.0/24", "10.30.0.0/16",
		"hq.example.net", "branch.example.net", "imported-pre-shared-key", "branch-pre-shared-key").Replace(sheet)
	out, stderr, err := run(t, peerOnly, "-n", "imp", "import", "-", "--apply")
	if err != nil || !strings.Contains(out, "vpnpeer.vpn.bnerd.net/branch created") || strings.Contains(out, "vpngateway") {
		t.Fatalf("%v %q %q", err, out, stderr)
	}

	// a bad field is refused by name
	_, _, err = run(t, strings.Replace(sheet, "dhGroups: 19", "dhGroups: 1", 1), "-n", "imp", "import", "-")
	if err == nil || !strings.Contains(err.Error(), "ike.dhGroups[0]") {
		t.Fatalf("error %v", err)
	}
}

// Round trip through the cluster: the sheet exported by peer-config, imported into another
// namespace, gives a peer whose configuration is the same.
func TestRoundTripThroughCluster(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	namespace(t, "rt1")
	namespace(t, "rt2")
	createIPsec(t, "rt1", "round-trip-pre-shared-key")
	exported, _, err := run(t, "", "-n", "rt1", "peer-config", "hq", "--format", "sheet", "--include-secrets")
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(exported, "namespace: rt1", "namespace: rt2", 1)
	if _, _, err := run(t, moved, "-n", "rt2", "import", "-", "--apply"); err != nil {
		t.Fatal(err)
	}
	// the operator would write the status; here the test does
	ctx := context.Background()
	var gw vpnv1.VPNGateway
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "rt2", Name: "acme"}, &gw); err != nil {
		t.Fatal(err)
	}
	gw.Status = vpnv1.VPNGatewayStatus{PublicAddress: "198.51.100.10", ServiceCIDR: "100.64.12.0/24"}
	if err := env.Client.Status().Update(ctx, &gw); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"strongswan", "fortigate", "junos"} {
		a, _, err := run(t, "", "-n", "rt1", "peer-config", "hq", "--format", f, "--include-secrets")
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := run(t, "", "-n", "rt2", "peer-config", "hq", "--format", f, "--include-secrets")
		if err != nil {
			t.Fatal(err)
		}
		if strings.ReplaceAll(a, "rt1", "rt2") != b {
			t.Errorf("%s differs after the round trip:\n%s\n---\n%s", f, a, b)
		}
	}
}

// --version prints the shared version (internal/version), or main.version when a build set it
// with -X main.version (older Makefiles).
func TestVersion(t *testing.T) {
	defer func(v, shared string) { version, buildversion.Version = v, shared }(version, buildversion.Version)
	for _, tc := range []struct{ main, shared, want string }{
		{"", "", "kubectl vpn version " + buildversion.Get() + "\n"},
		{"", "v1.2.3-shared", "kubectl vpn version v1.2.3-shared\n"},
		{"v1.2.3-main", "v1.2.3-shared", "kubectl vpn version v1.2.3-main\n"},
	} {
		version, buildversion.Version = tc.main, tc.shared
		var out bytes.Buffer
		cmd := newRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs([]string{"--version"})
		if err := cmd.Execute(); err != nil || out.String() != tc.want {
			t.Errorf("main.version %q, version.Version %q: %v %q, want %q", tc.main, tc.shared, err, out.String(), tc.want)
		}
	}
}

// The plugin links none of the operator's reconcilers, cloud clients or dataplane code.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, forbidden := range []string{"/internal/controller", "/internal/operator", "/internal/cloud", "/internal/agent",
		"gophercloud", "govici", "vishvananda", "wireguard"} {
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep, forbidden) {
				t.Errorf("kubectl-vpn links %s", dep)
			}
		}
	}
}
