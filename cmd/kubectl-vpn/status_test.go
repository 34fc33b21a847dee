package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/status"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/golden"
)

// The clock of the status and diagnose tests: the objects' times are set relative to it.
var testNow = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time {
	t := metav1.NewTime(testNow.Add(-d))
	return &t
}

// fakeAccess is the gateway pods' agents as the tests want them: metrics and logs by pod.
type fakeAccess struct {
	mu sync.Mutex
	// metrics returns the agent's /metrics text for the n-th read (0, 1, ...).
	metrics map[string]func(n int) string
	logs    map[string][]byte // pod/container
	reads   map[string]int
}

func (f *fakeAccess) Metrics(_ context.Context, ns, pod string, port int32) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.metrics[pod]
	if !ok || port != children.DefaultMetricsPort {
		return nil, fmt.Errorf("pods %q: the server is currently unable to handle the request", pod)
	}
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	n := f.reads[pod]
	f.reads[pod]++
	return []byte(m(n)), nil
}

func (f *fakeAccess) Logs(_ context.Context, ns, pod, container string, _ int64) ([]byte, error) {
	if l, ok := f.logs[pod+"/"+container]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("container %q in pod %q is waiting to start", container, pod)
}

// requestLog records the paths of the API requests made through a config.
type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(req *http.Request) (*http.Response, error) {
			l.mu.Lock()
			l.paths = append(l.paths, req.Method+" "+req.URL.Path)
			l.mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	return c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// runWith executes kubectl-vpn in-process with a fixed clock and the given pod access (nil:
// the API server's, as the plugin does), every request recorded in reqs.
func runWith(t *testing.T, access gateways.AgentAccess, reqs *requestLog, args ...string) (string, string, error) {
	t.Helper()
	if env == nil {
		t.Skip("no API server (KUBECTL_VPN_NO_ENVTEST)")
	}
	if reqs == nil {
		reqs = &requestLog{}
	}
	var out, errOut bytes.Buffer
	cmd := newRoot(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, func(o *options) {
		o.now = func() time.Time { return testNow }
		cfg := reqs.wrap(env.Config)
		o.newClient = func() (client.Client, error) { return client.New(cfg, client.Options{Scheme: kube.Scheme()}) }
		o.newAgentAccess = func() (gateways.AgentAccess, error) {
			if access != nil {
				return access, nil
			}
			cs, err := kubernetes.NewForConfig(cfg)
			return gateways.APIServerAccess(cs), err
		}
	})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

const labPSK = "status-test-pre-shared-key-9f8e7d"

// createLab creates, in namespace ns, what the lab has: an IPsec gateway acme-gw on host
// network with exposures web (a Service) and admin (an address) and a reverse exposure, its
// peers hq (granted web and the printer), branch (granted admin, its Secret missing), dark (no
// block: NoGrants, not yet reported by the operator), mismatch (granted web, its device
// proposes what the gateway does not allow); a WireGuard gateway acme-wg (not Ready: its pod is not
// available) with its one peer roam (DefaultAllow); statuses as the operator and the agent
// write them, the gateway pod of acme-gw, and Events in both APIs.
func createLab(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	c := env.Client
	namespace(t, ns)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ok := func(t, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: *at(time.Hour), ObservedGeneration: 1}
	}
	bad := func(t, reason, msg string) metav1.Condition {
		c := ok(t, reason, msg)
		c.Status = metav1.ConditionFalse
		return c
	}
	gwConds := func(last metav1.Condition) []metav1.Condition {
		ready := ok("Ready", "Ready", "gateway is serving")
		if last.Status != metav1.ConditionTrue {
			ready = bad("Ready", last.Reason, last.Type+": "+last.Message)
		}
		return []metav1.Condition{ready,
			ok("AddressesAllocated", "Allocated", "service CIDR allocated"), ok("ConfigValid", "Valid", "gateway and peers form a valid configuration"),
			ok("GrantsValid", "NoConflicts", "every grant can be honoured"), ok("KeyReady", "NotApplicable", "IPsec"),
			ok("EndpointReady", "Ready", "public address assigned"), ok("Rendered", "Applied", "children applied"), last}
	}

	gw := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "acme-gw", Namespace: ns},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: "node-1"}},
			Exposures: []vpnv1.Exposure{
				{Name: "web", Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "web"}, Ports: []intstr.IntOrString{intstr.FromInt32(8080)}}},
				{Name: "admin", Target: vpnv1.ExposureTarget{Address: "10.0.0.7", Ports: []intstr.IntOrString{intstr.FromInt32(8081), intstr.FromString("514/udp")}}},
			},
			ReverseExposures: []vpnv1.ReverseExposure{
				{Name: "printer", Target: vpnv1.ReverseExposureTarget{Address: "192.168.10.50", Ports: []intstr.IntOrString{intstr.FromInt32(9100)}}},
			},
		},
	}
	must(c.Create(ctx, gw))
	gw.Status = vpnv1.VPNGatewayStatus{ObservedGeneration: 1, PublicAddress: "192.0.2.1", ServiceCIDR: "100.64.12.0/24", Peers: 3, AuthorizedPeers: 2,
		Exposures:        []vpnv1.ExposureStatus{{Name: "web", VirtualIP: "100.64.12.10"}, {Name: "admin", VirtualIP: "100.64.12.11"}},
		ReverseExposures: []vpnv1.ExposureStatus{{Name: "printer", VirtualIP: "100.64.12.200"}},
		Conditions:       gwConds(ok("GatewayAvailable", "Available", "gateway pod is available"))}
	must(c.Status().Update(ctx, gw))

	wg := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "acme-wg", Namespace: ns},
		Spec: vpnv1.VPNGatewaySpec{Protocol: vpnv1.ProtocolWireGuard, Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{LoadBalancerClass: "lab.bnerd.net/static"}},
			Exposures:    []vpnv1.Exposure{{Name: "web", Target: vpnv1.ExposureTarget{Service: &vpnv1.ServiceRef{Name: "web"}, Ports: []intstr.IntOrString{intstr.FromInt32(8080)}}}},
			Availability: &vpnv1.Availability{Standby: ptr.To(true)}},
	}
	must(c.Create(ctx, wg))
	wg.Status = vpnv1.VPNGatewayStatus{ObservedGeneration: 1, PublicAddress: "192.0.2.2", ServiceCIDR: "100.64.13.0/24", Peers: 1, AuthorizedPeers: 1,
		WireGuardPublicKey: "GW1aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaE=",
		Exposures:          []vpnv1.ExposureStatus{{Name: "web", VirtualIP: "100.64.13.10"}},
		// its pair lost its active pod's node: the standby took over, no new standby yet
		Availability: &vpnv1.AvailabilityStatus{ActivePod: "acme-wg-gateway-5f7b2", LastTakeover: &vpnv1.Takeover{
			Time: metav1.NewMicroTime(testNow.Add(-90 * time.Second)), From: "acme-wg-gateway-9d41c", To: "acme-wg-gateway-5f7b2",
			Reason: vpnv1.TakeoverActiveGone, OutageMillis: 2150}},
		Conditions: gwConds(bad("GatewayAvailable", "Unavailable", "gateway pod is not available (0/1 ready)"))}
	must(c.Status().Update(ctx, wg))

	psk := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hq-psk", Namespace: ns}, StringData: map[string]string{"psk": labPSK}}
	must(c.Create(ctx, psk))
	ipsecPeer := func(name, addr, subnet string, auth *vpnv1.Authorization) *vpnv1.VPNPeer {
		return &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: vpnv1.VPNPeerSpec{
			GatewayRef: "acme-gw", Authorization: auth,
			IPsec: &vpnv1.IPsecPeer{Peer: vpnv1.IPsecRemote{Address: addr, ID: name + ".acme.example"}, RemoteSubnets: []string{subnet},
				PSKSecretRef: vpnv1.SecretKeyRef{Name: name + "-psk", Key: "psk"}}}}
	}
	peers := []struct {
		p      *vpnv1.VPNPeer
		status vpnv1.VPNPeerStatus
	}{
		{ipsecPeer("hq", "198.51.100.6", "192.168.10.0/24", &vpnv1.Authorization{Exposures: []string{"web"}, ReverseExposures: []string{"printer"}}),
			vpnv1.VPNPeerStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
				ok("Authorized", "Authorized", `granted exposures: "web"; reverse exposures: "printer"`),
				ok("CredentialsReady", "SecretsPresent", "referenced Secrets exist"), ok("Connected", "Established", "tunnel Established")},
				Tunnel: &vpnv1.TunnelStatus{EstablishedAt: at(2*time.Hour + 5*time.Minute), BytesIn: 9216, BytesOut: 3 << 20, PacketsIn: 90, PacketsOut: 3000, Rekeys: 4}}},
		{ipsecPeer("branch", "198.51.100.10", "203.0.113.32/28", &vpnv1.Authorization{Exposures: []string{"admin"}}),
			vpnv1.VPNPeerStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
				ok("Authorized", "Authorized", `granted exposures: "admin"; reverse exposures: none`),
				bad("CredentialsReady", "SecretNotFound", `Secret "branch-psk" does not exist`),
				bad("Connected", "MissingSecret", "the key's Secret is missing")}}},
		{ipsecPeer("dark", "198.51.100.14", "203.0.113.48/28", nil), vpnv1.VPNPeerStatus{}},
		{ipsecPeer("mismatch", "198.51.100.26", "203.0.113.96/28", &vpnv1.Authorization{Exposures: []string{"web"}}),
			vpnv1.VPNPeerStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
				ok("Authorized", "Authorized", `granted exposures: "web"; reverse exposures: none`),
				ok("CredentialsReady", "SecretsPresent", "referenced Secrets exist"),
				bad("Connected", "NoProposalChosen", "the peer accepts none of our proposals (charon: received NO_PROPOSAL_CHOSEN notify error)")}}},
		{&vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: "roam", Namespace: ns}, Spec: vpnv1.VPNPeerSpec{GatewayRef: "acme-wg",
			WireGuard: &vpnv1.WireGuardPeer{PublicKey: "PEERbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbE=", Subnets: []string{"203.0.113.64/28"}}}},
			vpnv1.VPNPeerStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
				ok("Authorized", "DefaultAllow", "single-peer gateway: reaches every exposure and reverse exposure"),
				ok("CredentialsReady", "SecretsPresent", "referenced Secrets exist"), ok("Connected", "Established", "tunnel Established")},
				Tunnel: &vpnv1.TunnelStatus{EstablishedAt: at(40 * time.Minute), LastHandshake: at(35 * time.Second), Endpoint: "198.51.100.18:41641", BytesIn: 512, BytesOut: 100}}},
	}
	for _, p := range peers {
		must(c.Create(ctx, p.p))
		if p.status.Conditions != nil {
			p.p.Status = p.status
			must(c.Status().Update(ctx, p.p))
		}
	}

	// acme-gw's pod (no kubelet runs it: its status is written here); acme-wg has none
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "acme-gw-gateway-7c9d5", Namespace: ns, Labels: children.Labels("acme-gw")},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{
			{Name: children.ContainerAgent, Image: "agent", Ports: []corev1.ContainerPort{{Name: children.PortMetrics, ContainerPort: children.DefaultMetricsPort}}},
			{Name: children.ContainerCharon, Image: "charon"},
		}},
	}
	must(c.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	must(c.Status().Update(ctx, pod))

	// Events: the agent's (core/v1) and the operator's (events.k8s.io/v1)
	must(c.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "acme-gw.rejected", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway", Namespace: ns, Name: "acme-gw"},
		Type:           corev1.EventTypeWarning, Reason: "ConfigRejected", Count: 2,
		Message:        "gateway configuration refused: ConfigMap acme-gw-gateway-config carries ruleset.nft besides model.json",
		FirstTimestamp: *at(20 * time.Minute), LastTimestamp: *at(15 * time.Minute), Source: corev1.EventSource{Component: "bnerd-vpn-gateway-agent"},
	}))
	must(c.Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "other.event", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "unrelated"},
		Type:           corev1.EventTypeWarning, Reason: "BackOff", Message: "not about the gateway", LastTimestamp: *at(time.Minute),
	}))
	must(c.Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "branch.credentials", Namespace: ns},
		EventTime:  metav1.NewMicroTime(testNow.Add(-10 * time.Minute)), ReportingController: "bnerd-vpn-operator", ReportingInstance: "bnerd-vpn-operator-0",
		Action: "Authorize", Reason: "SecretNotFound", Type: corev1.EventTypeWarning, Note: `Secret "branch-psk" does not exist`,
		Regarding: corev1.ObjectReference{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNPeer", Namespace: ns, Name: "branch"},
	}))
}

// acmeMetrics is acme-gw's agent: hq up with drops rising between the two reads.
func acmeMetrics(ns string) func(n int) string {
	return func(n int) string {
		l := fmt.Sprintf(`gateway="acme-gw",namespace=%q`, ns)
		return fmt.Sprintf(`# HELP bnerd_vpn_peer_up 1 when the peer's tunnel is established.
# TYPE bnerd_vpn_peer_up gauge
bnerd_vpn_peer_up{%[1]s,peer="hq"} 1
bnerd_vpn_peer_up{%[1]s,peer="branch"} 0
bnerd_vpn_peer_up{%[1]s,peer="dark"} 0
bnerd_vpn_peer_up{%[1]s,peer="mismatch"} 0
bnerd_vpn_peer_rekeys_total{%[1]s,peer="hq"} 2
bnerd_vpn_peer_authorization_drops_total{%[1]s,direction="in",peer="hq"} %[2]d
bnerd_vpn_peer_authorization_drops_total{%[1]s,direction="out",peer="hq"} 0
bnerd_vpn_peer_authorization_drops_total{%[1]s,direction="in",peer="dark"} 0
bnerd_vpn_ruleset_repairs_total{%[1]s} 0
bnerd_vpn_config_rejected_total{%[1]s} 2
`, l, 12+5*n)
	}
}

func TestStatus(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	const ns = "status"
	createLab(t, ns)
	access := &fakeAccess{metrics: map[string]func(int) string{"acme-gw-gateway-7c9d5": acmeMetrics(ns)}}
	reqs := &requestLog{}

	out, stderr, err := runWith(t, access, reqs, "-n", ns, "status")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	golden.Assert(t, "status", []byte(out))

	js, _, err := runWith(t, access, reqs, "-n", ns, "status", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, "status.json", []byte(js))
	var rep status.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Gateways) != 2 || rep.Gateways[0].Name != "acme-gw" {
		t.Fatalf("%v %+v", err, rep)
	}

	ym, _, err := runWith(t, access, reqs, "-n", ns, "status", "acme-wg", "-o", "yaml")
	if err != nil || !strings.Contains(ym, "kind: VPNStatus") || strings.Contains(ym, "acme-gw\n") {
		t.Fatalf("%v\n%s", err, ym)
	}

	jp, _, err := runWith(t, access, reqs, "-n", ns, "status", "-o", `jsonpath={range .gateways[*].peers[*]}{.name}={.connected.status} {end}`)
	if err != nil || jp != "branch=False dark=Unknown hq=True mismatch=False roam=True " {
		t.Fatalf("%v %q", err, jp)
	}

	// -A lists this namespace's gateways among the others'
	all, _, err := runWith(t, access, reqs, "status", "-A", "--metrics=false")
	if err != nil || !strings.Contains(all, "VPNGateway "+ns+"/acme-gw\n") || !strings.Contains(all, "VPNGateway "+ns+"/acme-wg\n") {
		t.Fatalf("%v\n%s", err, all)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", ns, "status", "nope"}, "VPNGateway status/nope not found"},
		{[]string{"-n", ns, "status", "-o", "wide"}, `-o "wide": use json, yaml or jsonpath=TEMPLATE`},
		{[]string{"status", "-A", "acme-gw"}, "use -n with GATEWAY, not -A"},
	} {
		if _, _, err := runWith(t, access, reqs, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	empty, stderr, err := runWith(t, access, reqs, "-n", "default", "status")
	if err != nil || empty != "" || !strings.Contains(stderr, "No VPNGateways found in namespace default.") {
		t.Errorf("%v %q %q", err, empty, stderr)
	}
	assertNoSecrets(t, reqs, out+js+ym)
}

// Without a fake: the API server's pod proxy has no pod to reach (no kubelet, no pod IP):
// the drops are "-" and the table says why.
func TestStatusWithoutAgent(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	const ns = "status-noagent"
	createLab(t, ns)
	reqs := &requestLog{}
	out, stderr, err := runWith(t, nil, reqs, "-n", ns, "status", "acme-gw")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	golden.Assert(t, "status-noagent", []byte(out))
	proxied := false
	for _, p := range reqs.paths {
		if p == "GET /api/v1/namespaces/"+ns+"/pods/acme-gw-gateway-7c9d5:9090/proxy/metrics" {
			proxied = true
		}
	}
	if !proxied {
		t.Errorf("no request through the pod proxy: %v", reqs.paths)
	}
	assertNoSecrets(t, reqs, out)
}

// assertNoSecrets: no Secret was read, and the key is in no output.
func assertNoSecrets(t *testing.T, reqs *requestLog, out string) {
	t.Helper()
	reqs.mu.Lock()
	defer reqs.mu.Unlock()
	for _, p := range reqs.paths {
		if strings.Contains(p, "/secrets") {
			t.Errorf("a Secret was read: %s", p)
		}
	}
	if strings.Contains(out, labPSK) {
		t.Errorf("the pre-shared key is in the output")
	}
}

// hostAddress is an IPv4 address of this machine the API server may proxy to (not loopback,
// not link-local); empty when there is none.
func hostAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// The metrics through the real pod proxy: the gateway pod's IP is an address of this machine
// where a test server answers /metrics on the pod's "metrics" port.
func TestStatusThroughPodProxy(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	ip := hostAddress()
	if ip == "" {
		t.Skip("no address of this machine the API server could proxy to")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	const ns = "status-proxy"
	var hits atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		fmt.Fprint(w, acmeMetrics(ns)(0))
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // closed below
	defer srv.Close()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	ctx := context.Background()
	namespace(t, ns)
	gw := &vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: "acme-gw", Namespace: ns},
		Spec: vpnv1.VPNGatewaySpec{Protocol: vpnv1.ProtocolIPsec, Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}}}
	if err := env.Client.Create(ctx, gw); err != nil {
		t.Fatal(err)
	}
	peer := &vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: "hq", Namespace: ns}, Spec: vpnv1.VPNPeerSpec{GatewayRef: "acme-gw",
		IPsec: &vpnv1.IPsecPeer{Peer: vpnv1.IPsecRemote{Address: "198.51.100.6"}, RemoteSubnets: []string{"192.168.10.0/24"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "hq-psk", Key: "psk"}}}}
	if err := env.Client.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "acme-gw-gateway-1", Namespace: ns, Labels: children.Labels("acme-gw")},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: children.ContainerAgent, Image: "agent",
			Ports: []corev1.ContainerPort{{Name: children.PortMetrics, ContainerPort: port}}}}}}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	js, stderr, err := runWith(t, nil, nil, "-n", ns, "status", "-o", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatal(err)
	}
	g := rep.Gateways[0]
	if !g.Agent.Metrics || g.Agent.ConfigRejected == nil || *g.Agent.ConfigRejected != 2 || g.Peers[0].AuthorizationDrops == nil || g.Peers[0].AuthorizationDrops.In != 12 || hits.Load() != 1 {
		t.Fatalf("metrics through the pod proxy (%d requests): %s", hits.Load(), js)
	}
}

// A gateway with a standby has two pods: status reads the active one's agent, whichever is
// newer.
func TestStatusReadsTheActivePod(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	// a namespace of its own per run: envtest deletes none (-count=5)
	ns := fmt.Sprintf("status-pair-%d", time.Now().UnixNano()%1e9)
	createLab(t, ns)
	ctx := context.Background()
	for i, name := range []string{"acme-wg-gateway-5f7b2", "acme-wg-gateway-9d41c"} {
		labels := children.Labels("acme-wg")
		if i == 0 {
			labels[children.LabelRole] = children.RoleActive
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", i+2), Containers: []corev1.Container{
				{Name: children.ContainerAgent, Image: "agent", Ports: []corev1.ContainerPort{{Name: children.PortMetrics, ContainerPort: children.DefaultMetricsPort}}},
			}},
		}
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		if err := env.Client.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // creation timestamps have a resolution of one second
	}
	js, _, err := runWith(t, &fakeAccess{}, &requestLog{}, "-n", ns, "status", "acme-wg", "-o", "json", "--metrics=false")
	if err != nil {
		t.Fatal(err)
	}
	var rep status.Report
	if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Gateways) != 1 {
		t.Fatalf("%v %s", err, js)
	}
	g := rep.Gateways[0]
	if g.Agent.Pod != "acme-wg-gateway-5f7b2" {
		t.Errorf("status read %q, not the active (older) pod acme-wg-gateway-5f7b2", g.Agent.Pod)
	}
	if g.Availability == nil || g.Availability.ActivePod != "acme-wg-gateway-5f7b2" || g.Availability.LastTakeover == nil || g.Availability.LastTakeover.Reason != vpnv1.TakeoverActiveGone {
		t.Errorf("availability: %+v", g.Availability)
	}
}
