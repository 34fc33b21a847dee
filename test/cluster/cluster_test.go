// Package cluster is the cluster end-to-end suite: against the lab cluster
// hack/lab/cluster-up.sh started, it runs the lab (hack/lab/lab.sh: the operator from
// config/default, the sample client, two strongSwan sites on a host-network IPsec gateway, one
// WireGuard site on a gateway behind a LoadBalancer Service) and asserts, in order (one subtest
// per step):
// 0 NetworkPolicy enforced (netpol_test.go: the lab's enforcer, kube-router), 1 unprivileged,
// 2 connected, 2b across nodes (nodes_test.go: paths between the lab's nodes, a node lost),
// 3 authorization, 3b backend replaced, 3c kubectl vpn status and diagnose, 3d a
// proposal mismatch named, 4 a peer added live, 4b an overlapping dark peer, 4c a ServiceAccount
// token as PSK, 4d host network only where allowed, 4e a ConfigMap carrying more than the model,
// 4f reverse exposures from their tenant, 4g the node's traffic untouched, 4h a ClusterLink to a
// service cluster behind the node (clusterlink_test.go), 4i the agents' metrics port only from
// the selected namespaces (metricsport_test.go), 5 gateway pods deleted, 6 operator
// restart, 7 agent logs, 8 no secret outside its Secret, 8b the fault suite (faults_test.go), 9
// host-network gateway deleted, 10 status, 11 legacy IPsecGateway migrated, 12 an OpenStack
// gateway through its floating IP in the lab's cloud and 13 the VM cutover and the cloud's leak
// table (cloud_test.go), 14 the WireGuard gateway with a standby: its active pod, dataplane and
// node lost, its node drained, the API server frozen, an upgrade rolled through it; 14b an
// IPsec gateway with a standby on the host network, its VIP moving between nodes
// (standby_test.go).
//
// Skipped unless BNERD_LAB=1 (make e2e-cluster) and the lab's kubeconfig exists. Runs as root.
package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
)

var skipReason string

func TestMain(m *testing.M) {
	switch kc := filepath.Join(labState(), "pki", "admin.kubeconfig"); {
	case os.Getenv("BNERD_LAB") != "1":
		skipReason = "the cluster e2e needs the lab: make e2e-cluster (BNERD_LAB=1)"
	case fileMissing(kc):
		skipReason = "no lab: " + kc + " missing (make e2e-cluster)"
	default:
		var err error
		if L, err = newLab(); err != nil {
			fmt.Fprintln(os.Stderr, "the lab's client:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func fileMissing(p string) bool { _, err := os.Stat(p); return err != nil }

// the addresses the steps share, read once the lab is up
var vipWeb, vipAdmin, cidr, vipWGWeb string

func TestCluster(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if !t.Run("lab", testLab) {
		t.Log(L.kubectl("get", "pods", "-A", "-o", "wide"))
		t.FailNow()
	}
	steps := []struct {
		name string
		f    func(*testing.T)
	}{
		{"0 NetworkPolicy enforced", test0NetworkPolicy},
		{"1 unprivileged", test1Unprivileged},
		{"2 connected", test2Connected},
		{"2b across nodes", test2bAcrossNodes},
		{"3 authorization", test3Authorization},
		{"3b backend replaced", test3bBackendReplaced},
		{"3c kubectl vpn status and diagnose", test3cVPNStatusDiagnose},
		{"3d diagnose names a proposal mismatch", test3dProposalMismatch},
		{"3e the quick start's commands", test3eQuickStart},
		{"4 peer added live", test4PeerAddedLive},
		{"4b overlapping dark peer", test4bDarkPeer},
		{"4c ServiceAccount token as PSK", test4cTokenAsPSK},
		{"4d host network only where allowed", test4dHostNetworkNotPermitted},
		{"4e ConfigMap carrying more than the model", test4eConfigMapRefused},
		{"4f reverse exposures from their tenant", test4fReverseExposures},
		{"4g host-network gateway leaves the node's traffic alone", test4gNodeTrafficUntouched},
		{"4h ClusterLink: a service cluster behind the node", test4hClusterLink},
		{"4i agent metrics only from the selected namespaces", test4iMetricsPort},
		{"5 gateway pod deleted", test5GatewayPodDeleted},
		{"6 operator restart re-creates nothing", test6OperatorRestart},
		{"7 agent logs", test7AgentLogs},
		{"8 no secret outside its Secret", test8NoSecretLeaks},
		{"8b faults", testFaults},
		{"9 host-network gateway deleted", test9GatewayDeleted},
		{"10 status", test10Status},
		{"11 legacy IPsecGateway migrated", test11LegacyMigrated},
		{"12 OpenStack gateway through its floating IP", test12CloudGateway},
		{"13 VM cutover and no leaks", test13Cutover},
		{"14 active/standby", test14Standby},
		{"14b IPsec host-network gateway with a standby", test14bStandbyHostNetwork},
	}
	for _, s := range steps {
		t.Run(s.name, s.f)
	}
}

// lab: hack/lab/lab.sh installs the operator and the sample client and waits for live tunnels.
func testLab(t *testing.T) {
	// lab.sh's progress and its status tables, as they come
	if err := L.stream(10*time.Minute, `"$LAB_ROOT/hack/lab/lab.sh"`); err != nil {
		t.Fatalf("lab: no live tunnel: %v", err)
	}
	gw, err := L.gateway(labNS, ipsecGW)
	if err != nil {
		t.Fatal(err)
	}
	vipWeb, vipAdmin, cidr = exposureVIP(gw, "web"), exposureVIP(gw, "admin"), gw.Status.ServiceCIDR
	wg, err := L.gateway(labNS, wgGW)
	if err != nil {
		t.Fatal(err)
	}
	vipWGWeb = exposureVIP(wg, "web")
	if vipWeb == "" || vipAdmin == "" || vipWGWeb == "" {
		t.Fatalf("exposure virtual IPs missing: web %q admin %q wg web %q", vipWeb, vipAdmin, vipWGWeb)
	}
	t.Logf("service CIDR %s, web %s:8080, admin %s:8081, WireGuard web %s:8080", cidr, vipWeb, vipAdmin, vipWGWeb)
}

func urlWeb() string   { return "http://" + vipWeb + ":8080/" }
func urlAdmin() string { return "http://" + vipAdmin + ":8081/" }
func urlWGWeb() string { return "http://" + vipWGWeb + ":8080/" }

// 1: no container of either gateway pod is privileged; only the agent holds an API token.
func test1Unprivileged(t *testing.T) {
	for _, gw := range []string{ipsecGW, wgGW} {
		pod, err := L.gatewayPod(gw)
		if err != nil {
			t.Errorf("%s: %v", gw, err)
			continue
		}
		var privileged, withToken []string
		var desc []string
		for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
			priv, adds := false, []corev1.Capability(nil)
			if sc := c.SecurityContext; sc != nil {
				priv = sc.Privileged != nil && *sc.Privileged
				if sc.Capabilities != nil {
					adds = sc.Capabilities.Add
				}
			}
			desc = append(desc, fmt.Sprintf("%s=%v adds %v", c.Name, priv, adds))
			if priv {
				privileged = append(privileged, c.Name)
			}
			for _, m := range c.VolumeMounts {
				if m.MountPath == tokenPath {
					withToken = append(withToken, c.Name)
				}
			}
		}
		t.Logf("%s: %s", gw, strings.Join(desc, "; "))
		if len(privileged) > 0 {
			t.Errorf("a container of %s is privileged: %v", gw, privileged)
		} else {
			t.Logf("no container of %s is privileged", gw)
		}
		if len(withToken) == 1 && withToken[0] == "agent" {
			t.Logf("%s: only the agent container holds an API token", gw)
		} else {
			t.Errorf("%s: containers with an API token: %v (want only agent)", gw, withToken)
		}
	}
}

// connectedPeers lists the peers of the client's namespace whose Connected condition is True.
func connectedPeers() ([]string, error) {
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var peers vpnv1.VPNPeerList
	if err := L.c.List(c, &peers, client.InNamespace(labNS)); err != nil {
		return nil, err
	}
	var up []string
	for _, p := range peers.Items {
		if cond(p.Status.Conditions, "Connected").Status == metav1.ConditionTrue {
			up = append(up, p.Name)
		}
	}
	return up, nil
}

// 2: all three peers report Connected.
func test2Connected(t *testing.T) {
	var up []string
	err := eventually(60*time.Second, func() (err error) {
		if up, err = connectedPeers(); err != nil {
			return err
		}
		if len(up) != 3 {
			return fmt.Errorf("connected: %v", up)
		}
		return nil
	})
	if err != nil {
		t.Errorf("peers not Connected: %v", err)
		return
	}
	t.Logf("all three peers Connected: %v", up)
}

// 3: the granted peer reaches its exposure and the other does not (its drop counter rises); the
// WireGuard peer reaches its gateway's exposure and its status shows handshake and bytes.
func test3Authorization(t *testing.T) {
	before, err := L.nftDrops(siteLAN(1))
	if err != nil {
		t.Errorf("hq's drop counter: %v", err)
	}
	if _, err := L.curlFrom("hq", 1, 3, urlWeb()); err != nil {
		t.Errorf("hq cannot reach web: %v", err)
	} else {
		t.Log("hq reaches web (granted)")
	}
	if _, err := L.curlFrom("hq", 1, 2, urlAdmin()); err == nil {
		t.Error("hq reached admin (not granted)")
	} else {
		t.Log("hq cannot reach admin (not granted)")
	}
	after, err := L.nftDrops(siteLAN(1))
	if err != nil || after <= before {
		t.Errorf("hq's drop counter did not rise (%d -> %d, %v)", before, after, err)
	} else {
		t.Logf("hq's drop counter rose %d -> %d", before, after)
	}
	if _, err := L.curlFrom("branch", 2, 3, urlAdmin()); err != nil {
		t.Errorf("branch cannot reach admin: %v", err)
	} else {
		t.Log("branch reaches admin (granted)")
	}
	if _, err := L.curlFrom("roam", 4, 3, urlWGWeb()); err != nil {
		t.Errorf("roam cannot reach web over WireGuard: %v", err)
	} else {
		t.Log("roam reaches web over WireGuard (exposure of the Service web)")
	}
	var tun *vpnv1.TunnelStatus
	err = eventually(30*time.Second, func() error {
		p, err := L.peer("roam")
		if err != nil {
			return err
		}
		if tun = p.Status.Tunnel; tun == nil || tun.LastHandshake == nil || tun.BytesIn <= 0 {
			return fmt.Errorf("roam's tunnel status: %+v", tun)
		}
		return nil
	})
	if err != nil {
		t.Errorf("roam's status has no handshake or bytes: %v", err)
	} else {
		t.Logf("roam's status: last handshake %s, %d bytes in", tun.LastHandshake.UTC().Format(time.RFC3339), tun.BytesIn)
	}
}

// backendPods are the backend's pods (the Deployment has one replica).
func backendPods() ([]corev1.Pod, error) {
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var pods corev1.PodList
	err := L.c.List(c, &pods, client.InNamespace(labNS), client.MatchingLabels{"app": "backend"})
	return pods.Items, err
}

// 3b: the backend Deployment replaced: the host-network gateway follows the Service's endpoints.
func test3bBackendReplaced(t *testing.T) {
	pods, err := backendPods()
	if err != nil || len(pods) == 0 {
		t.Fatalf("the backend's pod: %v", err)
	}
	old := pods[0].Status.PodIP
	if err := L.rolloutRestart(labNS, "backend", 60*time.Second); err != nil {
		t.Errorf("rollout of the backend: %v", err)
	}
	if err := L.podsGone(labNS, client.MatchingLabels{"app": "backend"}, old, 60*time.Second); err != nil {
		t.Logf("the old backend pod: %v", err)
	}
	t0 := time.Now()
	err = eventually(60*time.Second, func() error { _, err := L.curlFrom("hq", 1, 2, urlWeb()); return err })
	if err != nil {
		t.Errorf("hq cannot reach web after the backend was replaced: %v", err)
		return
	}
	now := ""
	if pods, err := backendPods(); err == nil && len(pods) > 0 {
		now = pods[0].Status.PodIP
	}
	t.Logf("hq reaches web on the new backend %s (was %s) %.0fs after the rollout", now, old, time.Since(t0).Seconds())
}

// statusReport is the part of `kubectl vpn status -o json` the suite reads.
type statusReport struct {
	Gateways []struct {
		Name  string `json:"name"`
		Peers []struct {
			Name      string `json:"name"`
			Connected struct {
				Status string `json:"status"`
			} `json:"connected"`
			AuthorizationDrops *struct {
				In  int64 `json:"in"`
				Out int64 `json:"out"`
			} `json:"authorizationDrops"`
		} `json:"peers"`
		Exposures []struct {
			Name        string   `json:"name"`
			ReachableBy []string `json:"reachableBy"`
		} `json:"exposures"`
		Agent struct {
			Pod   string `json:"pod"`
			Error string `json:"error"`
		} `json:"agent"`
	} `json:"gateways"`
}

func vpnStatus(args ...string) (*statusReport, error) {
	out, err := L.vpn(append([]string{"status", "-o", "json"}, args...)...)
	if err != nil {
		return nil, err
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return nil, fmt.Errorf("kubectl vpn status -o json: %v", err)
	}
	return &r, nil
}

// diagnoseLines are the n lines after "VPNPeer <peer>" in kubectl vpn diagnose's output (the
// first is the verdict), trimmed and joined.
func diagnoseLines(out, peer string, n int) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if l == "VPNPeer "+peer {
			end := min(i+1+n, len(lines))
			var b []string
			for _, x := range lines[i+1 : end] {
				b = append(b, strings.TrimSpace(x))
			}
			return strings.Join(b, " ")
		}
	}
	return ""
}

// 3c: kubectl vpn status and diagnose on the live gateways.
func test3cVPNStatusDiagnose(t *testing.T) {
	out, err := L.vpn("status")
	t.Log("kubectl vpn status\n" + out)
	if err != nil {
		t.Error(err)
	}
	r, err := vpnStatus()
	if err != nil {
		t.Fatal(err)
	}
	var connected []string
	for _, g := range r.Gateways {
		for _, p := range g.Peers {
			connected = append(connected, p.Name+"="+p.Connected.Status)
		}
	}
	if got := strings.Join(connected, " "); got == "branch=True hq=True roam=True" {
		t.Logf("kubectl vpn status: the three peers Connected (%s)", got)
	} else {
		t.Errorf("kubectl vpn status: %s", got)
	}
	r, err = vpnStatus(ipsecGW)
	if err != nil || len(r.Gateways) == 0 {
		t.Fatalf("kubectl vpn status %s: %v", ipsecGW, err)
	}
	g := r.Gateways[0]
	var drops int64 = -1
	for _, p := range g.Peers {
		if p.Name == "hq" && p.AuthorizationDrops != nil {
			drops = p.AuthorizationDrops.In
		}
	}
	if drops > 0 {
		t.Logf("kubectl vpn status: hq's authorization drops (%d) read from the agent through the API server's pod proxy", drops)
	} else {
		t.Errorf("kubectl vpn status: hq's drops %d (%s)", drops, g.Agent.Error)
	}
	var reach []string
	for _, e := range g.Exposures {
		if e.Name == "admin" {
			reach = e.ReachableBy
		}
	}
	if len(reach) == 1 && reach[0] == "branch" {
		t.Log("kubectl vpn status: admin is reachable by branch alone")
	} else {
		t.Errorf("kubectl vpn status: admin reachable by %v", reach)
	}
	diag, err := L.vpn("diagnose", ipsecGW)
	t.Log("kubectl vpn diagnose " + ipsecGW + "\n" + diag)
	if err != nil {
		t.Error(err)
	}
	diagWG, err := L.vpn("diagnose", wgGW)
	t.Log("kubectl vpn diagnose " + wgGW + "\n" + diagWG)
	if err != nil {
		t.Error(err)
	}
	if v := diagnoseLines(diag, "hq", 1); regexp.MustCompile(`verdict: (OK Established|WARNING DeniedTraffic)`).MatchString(v) {
		t.Log("kubectl vpn diagnose: hq's tunnel established")
	} else {
		t.Errorf("kubectl vpn diagnose: hq: %s", v)
	}
}

var proposalsRe = regexp.MustCompile(`(?m)^( *)proposals = .*$`)

// 3d: kubectl vpn diagnose names a site's proposal mismatch; no PSK in kubectl vpn's output.
func test3dProposalMismatch(t *testing.T) {
	psk := "lab-mismatch-" + randomHex(12)
	if err := L.ipsecPeer("mismatch", 7, psk, []string{"web"}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// the site stops trying; the peer goes
		m := filepath.Join(L.state, "sites", "mismatch")
		conn, _ := os.ReadFile(filepath.Join(m, "child"))
		_ = os.WriteFile(filepath.Join(m, "none.conf"), []byte("connections {\n}\n"), 0o600)
		_, _ = L.swanctl("mismatch", "--load-conns", "--file", filepath.Join(m, "none.conf"))
		_, _ = L.swanctl("mismatch", "--terminate", "--ike", strings.TrimSpace(string(conn)), "--force")
		if err := L.deleteAndWait(&vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: "mismatch", Namespace: labNS}}, 60*time.Second); err != nil {
			t.Error(err)
		}
		_ = L.deleteAndWait(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mismatch-psk", Namespace: labNS}}, 30*time.Second)
	}()
	if out, err := L.sh(2*time.Minute, `"$LAB_ROOT/hack/lab/site.sh" mismatch 7`); err != nil {
		t.Fatalf("site mismatch: %v %s", err, out)
	}
	m := filepath.Join(L.state, "sites", "mismatch")
	conn, err := os.ReadFile(filepath.Join(m, "child"))
	if err != nil {
		t.Fatal(err)
	}
	// the device's first tunnel is up before its proposals change: a reload that catches the
	// IKE_SA half-way (CONNECTING) drops it without a DELETE while the gateway holds it as
	// established, and diagnose reports that stale SA instead of the mismatch
	if err := eventually(30*time.Second, func() error {
		L.siteEnsure("mismatch")
		if out, _ := L.swanctl("mismatch", "--list-sas"); !strings.Contains(out, "INSTALLED") {
			return fmt.Errorf("the mismatch site has no CHILD_SA yet")
		}
		return nil
	}); err != nil {
		t.Logf("before the proposals change: %v", err)
	}
	// the client's device now proposes only what the gateway does not allow (its first SA ends)
	conf := filepath.Join(m, "swanctl", "swanctl.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, proposalsRe.ReplaceAll(b, []byte("${1}proposals = aes128-sha1-modp1024")), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := L.swanctl("mismatch", "--load-all", "--file", conf); err != nil {
		t.Errorf("swanctl --load-all: %v %s", err, out)
	}
	_, _ = L.swanctl("mismatch", "--terminate", "--ike", strings.TrimSpace(string(conn)), "--force")
	const want = "verdict: ERROR NoProposalChosen: IKE: the client proposes aes128-sha1-modp1024; the gateway allows aes256gcm16-prfsha256-ecp256 "
	var diag string
	err = eventually(90*time.Second, func() error {
		L.siteEnsure("mismatch")
		diag, _ = L.vpn("diagnose", ipsecGW, "--interval", "0", "--tail", "1000")
		if v := diagnoseLines(diag+"\n", "mismatch", 1); !strings.Contains(v+" ", want) {
			return fmt.Errorf("mismatch: %s", v)
		}
		return nil
	})
	if err != nil {
		t.Errorf("kubectl vpn diagnose does not name the mismatch: %v", err)
	} else {
		t.Logf("kubectl vpn diagnose: %s", diagnoseLines(diag, "mismatch", 2))
	}
	var hq corev1.Secret
	if err := L.get(labNS, "hq-psk", &hq); err != nil {
		t.Fatalf("hq-psk: %v", err)
	}
	hqPSK := string(hq.Data["psk"])
	d, _ := L.vpn("diagnose", ipsecGW, "--interval", "0", "--tail", "1000")
	s, _ := L.vpn("status", "-o", "json")
	out := d + s
	if hqPSK != "" && !strings.Contains(out, psk) && !strings.Contains(out, hqPSK) {
		t.Log("no pre-shared key in kubectl vpn's output")
	} else {
		t.Error("a pre-shared key in kubectl vpn's output (or hq-psk unreadable)")
	}
}

// 4: a peer added live comes up and reaches its grant; hq's IKE SA undisturbed.
func test4PeerAddedLive(t *testing.T) {
	saBefore := L.ikeSA("hq")
	t0 := time.Now()
	if err := L.ipsecPeer("newsite", 3, "lab-new-"+randomHex(12), []string{"web"}); err != nil {
		t.Fatal(err)
	}
	if out, err := L.sh(2*time.Minute, `"$LAB_ROOT/hack/lab/site.sh" newsite 3`); err != nil {
		t.Fatalf("site newsite: %v %s", err, out)
	}
	err := eventually(90*time.Second, func() error {
		L.siteEnsure("newsite")
		_, err := L.curlFrom("newsite", 3, 2, urlWeb())
		return err
	})
	if err != nil {
		t.Errorf("new peer has no tunnel: %v", err)
	} else {
		t.Logf("new peer reaches web after %.0fs", time.Since(t0).Seconds())
	}
	if _, err := L.peerCondition("newsite", "Connected", "True", 30*time.Second); err != nil {
		t.Errorf("new peer not Connected: %v", err)
	} else {
		t.Log("new peer Connected")
	}
	if saAfter := L.ikeSA("hq"); saBefore != "" && saBefore == saAfter {
		t.Logf("hq's IKE SA undisturbed (%s)", saAfter)
	} else {
		t.Errorf("hq's IKE SA changed (%s -> %s)", saBefore, saAfter)
	}
}

// 4b: a hostile, overlapping dark peer (no grant, a subnet inside hq's LAN that its device
// claims too) reaches nothing, from the overlap or from its own LAN; hq keeps its access.
func test4bDarkPeer(t *testing.T) {
	const overlap, overlapHost = "203.0.113.16/29", "203.0.113.18" // inside hq's LAN (siteLAN(1))
	if err := L.ipsecPeer("intruder", 5, "lab-intruder-"+randomHex(12), nil, overlap); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := L.deleteAndWait(&vpnv1.VPNPeer{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: labNS}}, 60*time.Second); err != nil {
			t.Error(err)
		}
		_ = L.deleteAndWait(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "intruder-psk", Namespace: labNS}}, 30*time.Second)
	}()
	if out, err := L.sh(2*time.Minute, `"$LAB_ROOT/hack/lab/site.sh" intruder 5`, "SITE_EXTRA_TS="+overlap); err != nil {
		t.Fatalf("site intruder: %v %s", err, out)
	}
	if _, err := L.run(10*time.Second, "ip", "-n", "lab-site-intruder", "addr", "add", overlapHost+"/32", "dev", "lo"); err != nil {
		t.Error(err)
	}
	if c, err := L.peerCondition("intruder", "Authorized", "SubnetConflict", 30*time.Second); err != nil {
		t.Errorf("intruder's Authorized reason: %v", err)
	} else {
		t.Logf("intruder: Authorized=False/SubnetConflict: %s", c.Message)
	}
	err := eventually(60*time.Second, func() error {
		L.siteEnsure("intruder")
		if out, _ := L.swanctl("intruder", "--list-sas"); !strings.Contains(out, "INSTALLED") {
			return fmt.Errorf("no CHILD_SA installed")
		}
		return nil
	})
	if err != nil {
		t.Errorf("the intruder's own subnet got no tunnel: %v", err)
	} else {
		sas, _ := L.swanctl("intruder", "--list-sas")
		var local []string
		for _, l := range strings.Split(sas, "\n") {
			if strings.Contains(l, " local ") {
				local = append(local, strings.Join(strings.Fields(l), " "))
			}
		}
		if strings.Contains(sas, overlap) {
			t.Errorf("the intruder's CHILD_SA carries %s: %v", overlap, local)
		} else if len(local) > 0 {
			t.Logf("the intruder's tunnel carries only its own LAN: %s", local[0])
		} else {
			t.Log("the intruder's tunnel carries only its own LAN")
		}
	}
	var breach []string
	for range 3 {
		if _, err := L.curlFromAddr("intruder", overlapHost, 2, urlWeb()); err == nil {
			breach = append(breach, "tcp-from-overlap")
		}
		if _, err := L.curlFrom("intruder", 5, 2, urlWeb()); err == nil {
			breach = append(breach, "tcp-from-own-lan")
		}
	}
	if len(breach) == 0 {
		t.Log("the intruder reaches nothing (from the overlap and from its own LAN)")
	} else {
		t.Errorf("the intruder got through: %v", breach)
	}
	if _, err := L.curlFrom("hq", 1, 3, urlWeb()); err != nil {
		t.Errorf("hq lost web to the intruder: %v", err)
	} else {
		t.Log("hq still reaches web")
	}
}

// 4c: the tenant (the shipped role) creates a peer naming a ServiceAccount token Secret as its
// PSK: refused; the gateway may not read the Secret.
func test4cTokenAsPSK(t *testing.T) {
	tenant, err := L.tenant(labNS)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	tok := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "borrowed-token", Namespace: labNS,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}},
		Type: corev1.SecretTypeServiceAccountToken,
	}
	if err := tenant.Create(c, tok); err != nil {
		t.Fatal(err)
	}
	borrower := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Name: "borrower", Namespace: labNS},
		Spec: vpnv1.VPNPeerSpec{
			GatewayRef: ipsecGW,
			IPsec: &vpnv1.IPsecPeer{
				Peer:          vpnv1.IPsecRemote{Address: "198.51.100.99", ID: "borrower.acme.example"},
				RemoteSubnets: []string{"203.0.113.224/28"},
				PSKSecretRef:  vpnv1.SecretKeyRef{Name: "borrowed-token", Key: "token"},
			},
			Authorization: &vpnv1.Authorization{Exposures: []string{"web"}},
		},
	}
	if err := tenant.Create(c, borrower); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := L.deleteAndWait(borrower, 60*time.Second); err != nil {
			t.Error(err)
		}
		_ = L.deleteAndWait(tok, 30*time.Second)
	}()
	if _, err := L.peerCondition("borrower", "CredentialsReady", "SecretTypeNotAllowed", 30*time.Second); err != nil {
		t.Errorf("borrower's CredentialsReady: %v", err)
	} else {
		p, _ := L.peer("borrower")
		t.Logf("borrower: CredentialsReady=False/SecretTypeNotAllowed, Authorized=%s", cond(p.Status.Conditions, "Authorized").Reason)
	}
	err = eventually(30*time.Second, func() error {
		var cm corev1.ConfigMap
		if err := L.get(labNS, ipsecGW+"-gateway-config", &cm); err != nil {
			return err
		}
		if !strings.Contains(cm.Data["model.json"], `"name": "borrower"`) {
			return fmt.Errorf("no borrower in model.json")
		}
		return nil
	})
	if err != nil {
		t.Errorf("the gateway's configuration never included the borrower: %v", err)
	}
	var role rbacv1.Role
	if err := L.get(labNS, ipsecGW+"-gateway", &role); err != nil {
		t.Fatal(err)
	}
	granted := false
	for _, r := range role.Rules {
		for _, n := range r.ResourceNames {
			granted = granted || n == "borrowed-token"
		}
	}
	if granted {
		t.Error("the gateway's Role grants the ServiceAccount token")
	} else {
		t.Log("the gateway's Role does not grant the ServiceAccount token")
	}
}

// 4d: the tenant asks for a host-network gateway in a namespace the admin did not label:
// NotPermitted, no pod.
func test4dHostNetworkNotPermitted(t *testing.T) {
	const tenant = "lab-tenant-b"
	c, cancel := ctx(30 * time.Second)
	defer cancel()
	var nodes corev1.NodeList
	if err := L.c.List(c, &nodes); err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}
	if err := L.c.Create(c, nsObj); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := L.deleteAndWait(nsObj, 60*time.Second); err != nil {
			t.Error(err)
		}
	}()
	tc, err := L.tenant(tenant)
	if err != nil {
		t.Fatal(err)
	}
	sneaky := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Name: "sneaky", Namespace: tenant},
		Spec: vpnv1.VPNGatewaySpec{
			Protocol: vpnv1.ProtocolIPsec,
			Endpoint: vpnv1.Endpoint{HostNetwork: &vpnv1.HostNetworkEndpoint{NodeName: nodes.Items[0].Name}},
		},
	}
	if err := tc.Create(c, sneaky); err != nil {
		t.Fatal(err)
	}
	var ready metav1.Condition
	err = eventually(30*time.Second, func() error {
		gw, err := L.gateway(tenant, "sneaky")
		if err != nil {
			return err
		}
		if ready = cond(gw.Status.Conditions, "EndpointReady"); ready.Reason != "NotPermitted" {
			return fmt.Errorf("EndpointReady=%s/%s: %s", ready.Status, ready.Reason, ready.Message)
		}
		return nil
	})
	if err != nil {
		t.Errorf("sneaky's EndpointReady: %v", err)
	} else {
		t.Logf("a host-network gateway in an unlabelled namespace: EndpointReady=False/NotPermitted: %s", ready.Message)
	}
	var deps appsv1.DeploymentList
	var pods corev1.PodList
	if err := L.c.List(c, &deps, client.InNamespace(tenant)); err != nil {
		t.Fatal(err)
	}
	if err := L.c.List(c, &pods, client.InNamespace(tenant)); err != nil {
		t.Fatal(err)
	}
	if len(deps.Items)+len(pods.Items) == 0 {
		t.Log("and it has no Deployment and no pod")
	} else {
		t.Errorf("%s runs %d Deployments and %d pods", tenant, len(deps.Items), len(pods.Items))
	}
}

// 4e: a gateway's ConfigMap edited to carry an nft table. The tenant may not edit it at all
// (Forbidden). Edited by someone who may (an admin), the operator restores it (ChildRestored);
// whatever the agent saw of it, it applies only the model: the node never has the table, and
// the last good configuration stays.
func test4eConfigMapRefused(t *testing.T) {
	tenant, err := L.tenant(labNS)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := ctx(60 * time.Second)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ipsecGW + "-gateway-config", Namespace: labNS}}
	evil := client.RawPatch(types.MergePatchType, []byte(`{"data":{"ruleset.nft":"table ip lab_evil { chain input { type filter hook input priority -500; policy drop; } }"}}`))
	if err := tenant.Patch(c, cm.DeepCopy(), evil); !apierrors.IsForbidden(err) {
		t.Errorf("the tenant's edit of the gateway's ConfigMap: %v, want Forbidden", err)
	} else {
		t.Log("the tenant may not edit the gateway's ConfigMap: Forbidden")
	}

	t0 := time.Now()
	if err := L.c.Patch(c, cm.DeepCopy(), evil); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Should the operator not have restored it, the next steps must not inherit the edit.
		c, cancel := ctx(30 * time.Second)
		defer cancel()
		rm := client.RawPatch(types.MergePatchType, []byte(`{"data":{"ruleset.nft":null}}`))
		if err := L.c.Patch(c, cm.DeepCopy(), rm); err != nil {
			t.Errorf("removing ruleset.nft: %v", err)
		}
	}()
	err = eventually(30*time.Second, func() error {
		var live corev1.ConfigMap
		if err := L.get(labNS, cm.Name, &live); err != nil {
			return err
		}
		if _, ok := live.Data["ruleset.nft"]; ok {
			return fmt.Errorf("the ConfigMap still carries ruleset.nft")
		}
		return nil
	})
	if err != nil {
		t.Errorf("the operator did not restore the edited ConfigMap: %v", err)
	} else {
		t.Logf("the operator restored the ConfigMap %.1fs after the edit", time.Since(t0).Seconds())
	}
	err = eventually(30*time.Second, func() error {
		var evs eventsv1.EventList
		if err := L.c.List(c, &evs, client.InNamespace(labNS)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.Reason == "ChildRestored" && e.Related != nil && e.Related.Name == cm.Name {
				return nil
			}
		}
		return fmt.Errorf("no ChildRestored event for %s", cm.Name)
	})
	if err != nil {
		t.Error(err)
	}
	if tables, err := L.run(10*time.Second, "nft", "list", "tables"); err != nil || strings.Contains(tables, "lab_evil") {
		t.Errorf("the node has the ConfigMap's nft table (%v): %s", err, tables)
	} else {
		t.Log("the node has no such table")
	}
	if _, err := L.curlFrom("hq", 1, 3, urlWeb()); err != nil {
		t.Errorf("hq lost web after the ConfigMap edit: %v", err)
	} else {
		t.Log("hq still reaches web on the last good configuration")
	}
}

// deleteGatewayPod deletes a gateway's running pod and waits for it to be gone.
func deleteGatewayPod(t *testing.T, gw string) {
	old, err := L.gatewayPod(gw)
	if err != nil {
		t.Fatal(err)
	}
	if err := L.deleteAndWait(old, 60*time.Second); err != nil {
		t.Errorf("the old pod %s: %v", old.Name, err)
	}
}

// 5: deleting a gateway pod brings a new one and the tunnel back (time printed), for both.
func test5GatewayPodDeleted(t *testing.T) {
	t0 := time.Now()
	deleteGatewayPod(t, ipsecGW) // the old pod's charon is gone
	t.Logf("old pod gone after %.0fs", time.Since(t0).Seconds())
	err := eventually(120*time.Second, func() error { _, err := L.curlFrom("hq", 1, 2, urlWeb()); return err })
	if err != nil {
		t.Errorf("IPsec tunnel not back after deleting the gateway pod: %v", err)
	} else {
		t.Logf("IPsec tunnel back %.0fs after deleting the gateway pod (new pod %s)", time.Since(t0).Seconds(), L.gatewayPodName(ipsecGW))
	}
	t0 = time.Now()
	deleteGatewayPod(t, wgGW)
	err = eventually(120*time.Second, func() error { _, err := L.curlFrom("roam", 4, 2, urlWGWeb()); return err })
	if err != nil {
		t.Errorf("WireGuard tunnel not back after deleting the gateway pod: %v", err)
	} else {
		// the new pod handshakes with roam at the endpoint roam's VPNPeer status recorded; without
		// it roam would send on its old session until 15 s pass without an answer
		t.Logf("WireGuard tunnel back %.0fs after deleting the gateway pod (new pod %s)", time.Since(t0).Seconds(), L.gatewayPodName(wgGW))
	}
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var pods corev1.PodList
	if err := L.c.List(c, &pods, client.InNamespace(labNS)); err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodFailed {
			failed = append(failed, p.Name)
		}
	}
	if len(failed) == 0 {
		t.Log("no failed pods left behind by the replacements")
	} else {
		t.Errorf("failed pods: %v", failed)
	}
}

// gatewayState is what an operator restart must leave alone.
type gatewayState struct {
	generation int64
	pod        string
	configMaps string
}

func readGatewayState(t *testing.T) gatewayState {
	var d appsv1.Deployment
	if err := L.get(labNS, ipsecGW+"-gateway", &d); err != nil {
		t.Fatal(err)
	}
	c, cancel := ctx(20 * time.Second)
	defer cancel()
	var cms corev1.ConfigMapList
	if err := L.c.List(c, &cms, client.InNamespace(labNS), client.MatchingLabels{gatewayKey: ipsecGW}); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, cm := range cms.Items {
		fmt.Fprintf(&b, "%s=%s ", cm.Name, cm.ResourceVersion)
	}
	return gatewayState{d.Generation, L.gatewayPodName(ipsecGW), b.String()}
}

// leaderIP is the pod address of the operator replica the leader Lease names.
func leaderIP() (string, error) {
	var lease coordinationv1.Lease
	if err := L.get(operatorNS, "bnerd-vpn-operator.vpn.bnerd.net", &lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("no leader")
	}
	holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	var pod corev1.Pod
	if err := L.get(operatorNS, holder, &pod); err != nil {
		return "", err
	}
	if pod.Status.PodIP == "" {
		return "", fmt.Errorf("leader %s has no address", holder)
	}
	return pod.Status.PodIP, nil
}

var queueEmptyRe = regexp.MustCompile(`(?m)^workqueue_depth\{controller="vpngateway",name="vpngateway"(,priority="-?[0-9]+")?\} 0$`)

// 6: restarting the operator re-creates nothing (gateway Deployment generation, pod, ConfigMaps).
func test6OperatorRestart(t *testing.T) {
	before := readGatewayState(t)
	if err := L.rolloutRestart(operatorNS, operatorDep, 120*time.Second); err != nil {
		t.Errorf("operator rollout: %v", err)
	}
	// the new leader has reconciled every gateway and peer once (its initial sync) and has
	// nothing queued: read from its metrics (plain HTTP on the pod's port 8080)
	var opIP, m string
	err := eventually(90*time.Second, func() (err error) {
		if opIP, err = leaderIP(); err != nil {
			return err
		}
		if m, err = metrics("http://" + opIP + ":8080/metrics"); err != nil {
			return err
		}
		gws, _ := metricValue(m, `controller_runtime_reconcile_total{controller="vpngateway",result="success"}`)
		peers, _ := metricValue(m, `controller_runtime_reconcile_total{controller="vpnpeer",result="success"}`)
		if gws < 2 || peers < 4 || !queueEmptyRe.MatchString(m) {
			return fmt.Errorf("leader %s: %v gateway and %v peer reconciles, queue not empty or not reported", opIP, gws, peers)
		}
		return nil
	})
	if err != nil {
		t.Errorf("the new operator (%s) did not report its initial sync: %v", opIP, err)
	}
	var ready []string
	for _, l := range strings.Split(m, "\n") {
		if strings.HasPrefix(l, "bnerd_vpn_gateway_ready{") && strings.Contains(l, `namespace="`+labNS+`"`) {
			ready = append(ready, l)
		}
	}
	n := 0
	for _, l := range ready {
		if strings.HasSuffix(l, `reason="Ready"} 1`) {
			n++
		}
	}
	if n == 2 {
		t.Log("the operator exports both gateways Ready for alerting")
	} else {
		t.Errorf("bnerd_vpn_gateway_ready: %v", ready)
	}
	after := readGatewayState(t)
	if before == after {
		t.Logf("nothing re-created (Deployment generation %d, pod %s, ConfigMaps %s)", before.generation, before.pod, before.configMaps)
	} else {
		t.Errorf("operator restart changed things: generation %d->%d pod %s->%s configmaps '%s'->'%s'",
			before.generation, after.generation, before.pod, after.pod, before.configMaps, after.configMaps)
	}
}

// 7: the agents' logs show no failure to cut revoked connections (netlink conntrack in a pod).
func test7AgentLogs(t *testing.T) {
	for _, gw := range []string{ipsecGW, wgGW} {
		pod, err := L.gatewayPod(gw)
		if err != nil {
			t.Errorf("%s: %v", gw, err)
			continue
		}
		logs := L.logs(labNS, pod, "agent")
		lines := strings.Split(strings.TrimSpace(logs), "\n")
		applied := strings.Count(logs, `"configuration applied"`)
		var cut string
		for _, l := range lines {
			if strings.Contains(l, "could not be cut") {
				cut = l
				break
			}
		}
		switch {
		case cut != "":
			t.Errorf("%s's agent cannot cut revoked connections: %s", gw, cut)
		case applied == 0:
			t.Errorf("%s's agent log shows no applied configuration: %s", gw, strings.Join(lines[max(0, len(lines)-2):], "\n"))
		default:
			t.Logf("%s's agent applied its configuration (%d times) and its conntrack cuts worked", gw, applied)
		}
	}
}

// 8: no PSK or private key in any log, event, ConfigMap, Deployment, Service or status.
func test8NoSecretLeaks(t *testing.T) {
	// every PSK and the WireGuard gateway's private key, as the Secrets hold them
	var secrets []string
	for _, name := range []string{"hq-psk", "branch-psk", "newsite-psk", wgGW + "-wireguard-key"} {
		var s corev1.Secret
		if err := L.get(labNS, name, &s); err != nil {
			t.Errorf("secret %s: %v", name, err)
			continue
		}
		for _, v := range s.Data {
			for _, line := range strings.Split(string(v), "\n") {
				if line != "" {
					secrets = append(secrets, line)
				}
			}
		}
	}
	var hay strings.Builder
	c, cancel := ctx(2 * time.Minute)
	defer cancel()
	for _, ns := range []string{labNS, operatorNS} {
		var pods corev1.PodList
		if err := L.c.List(c, &pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for i := range pods.Items {
			hay.WriteString(L.logs(ns, &pods.Items[i], ""))
		}
	}
	lists := []client.ObjectList{&corev1.EventList{}, &corev1.ConfigMapList{}, &vpnv1.VPNGatewayList{},
		&vpnv1.VPNPeerList{}, &appsv1.DeploymentList{}, &corev1.ServiceList{}}
	for _, list := range lists {
		if err := L.c.List(c, list); err != nil {
			t.Fatal(err)
		}
		y, err := yaml.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		hay.Write(y)
	}
	h := hay.String()
	_ = os.WriteFile(filepath.Join(L.state, "haystack"), []byte(h), 0o600)
	var leaks []string
	for _, s := range secrets {
		if i := strings.Index(h, s); i >= 0 {
			start := strings.LastIndexByte(h[:i], '\n') + 1
			leaks = append(leaks, h[start:min(start+80, len(h))])
		}
	}
	if len(secrets) >= 4 && len(leaks) == 0 {
		t.Logf("none of %d secret values in %d lines of logs, events, ConfigMaps, Deployments, Services and statuses", len(secrets), strings.Count(h, "\n"))
	} else {
		t.Errorf("secret values: %d; found in: %v", len(secrets), leaks[:min(3, len(leaks))])
	}
}

// 9: deleting the host-network gateway leaves nothing of it on the node (ruleset, gate, address,
// tunnel device) and its peers reach nothing.
func test9GatewayDeleted(t *testing.T) {
	t.Log("kubectl -n " + labNS + " get vpngw,vpnpeer -o wide\n" + L.kubectl("-n", labNS, "get", "vpngw,vpnpeer", "-o", "wide"))
	t0 := time.Now()
	if err := L.deleteAndWait(&vpnv1.VPNGateway{ObjectMeta: metav1.ObjectMeta{Name: ipsecGW, Namespace: labNS}}, 60*time.Second); err != nil {
		t.Errorf("deleting %s: %v", ipsecGW, err)
	}
	_ = L.podsGone(labNS, client.MatchingLabels{gatewayKey: ipsecGW}, "", 60*time.Second)
	var left []string
	tables, _ := L.run(10*time.Second, "nft", "list", "tables")
	for _, l := range strings.Split(tables, "\n") {
		if strings.TrimSpace(l) == "table ip bnerd_vpn" {
			left = append(left, "ruleset")
		}
	}
	if strings.Contains(tables, "bnerd_vpn_gate") {
		left = append(left, "gate")
	}
	if out, _ := L.run(10*time.Second, "ip", "-4", "addr", "show", "dev", "lo", "label", "lo:bnerd-vpn"); strings.TrimSpace(out) != "" {
		left = append(left, "lo-address")
	}
	if _, err := L.run(10*time.Second, "ip", "link", "show", "ipsec0"); err == nil {
		left = append(left, "ipsec0")
	}
	if len(left) == 0 {
		t.Logf("gateway deleted in %.0fs; nothing of it left on the node", time.Since(t0).Seconds())
	} else {
		t.Errorf("left on the node after the gateway was deleted: %v", left)
	}
	if _, err := L.curlFrom("hq", 1, 2, urlWeb()); err == nil {
		t.Error("hq still reaches web through the deleted gateway")
	} else {
		t.Log("hq no longer reaches web")
	}
	t.Run("the node's routes are those it had with the gateway", compareNodeRoutes)
}

// 10: the status, as a user sees it.
func test10Status(t *testing.T) {
	t.Log("\n" + L.kubectl("-n", labNS, "get", "vpngw,vpnpeer", "-o", "wide") +
		L.kubectl("-n", labNS, "get", "vpnpeer", "-o", `custom-columns=PEER:.metadata.name,CONNECTED:.status.conditions[?(@.type=="Connected")].status,AUTHORIZED:.status.conditions[?(@.type=="Authorized")].status,BYTES-IN:.status.tunnel.bytesIn,BYTES-OUT:.status.tunnel.bytesOut`))
}
