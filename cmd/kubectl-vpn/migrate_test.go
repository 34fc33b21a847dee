package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/migrate"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
)

// createLegacy creates gen.ReconciledIPsecGateway's IPsecGateway in ns with the status the
// operator would have written.
func createLegacy(t *testing.T, ns string, tunnels ...string) *ipsecv1.IPsecGateway {
	t.Helper()
	ctx := context.Background()
	want := gen.ReconciledIPsecGateway(tunnels...)
	g := want.DeepCopy()
	g.Namespace, g.UID, g.Generation, g.Status = ns, "", 0, ipsecv1.IPsecGatewayStatus{}
	if err := env.Client.Create(ctx, g); err != nil {
		t.Fatal(err)
	}
	g.Status = want.Status
	g.Status.ObservedGeneration = g.Generation
	if err := env.Client.Status().Update(ctx, g); err != nil {
		t.Fatal(err)
	}
	return g
}

// markUp writes what the operator and the gateway agent would: the gateway Ready, each peer
// Authorized (with reason) and Connected.
func markUp(t *testing.T, ns, gateway string, authorized map[string]string) {
	t.Helper()
	ctx := context.Background()
	var gw vpnv1.VPNGateway
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: gateway}, &gw); err != nil {
		t.Fatal(err)
	}
	gw.Status.ObservedGeneration = gw.Generation
	meta.SetStatusCondition(&gw.Status.Conditions, metav1.Condition{Type: vpnv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", Message: "gateway is serving"})
	if err := env.Client.Status().Update(ctx, &gw); err != nil {
		t.Fatal(err)
	}
	for name, reason := range authorized {
		var p vpnv1.VPNPeer
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &p); err != nil {
			t.Fatal(err)
		}
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: vpnv1.ConditionAuthorized, Status: metav1.ConditionTrue, Reason: reason, Message: "granted"})
		meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: vpnv1.ConditionConnected, Status: metav1.ConditionTrue, Reason: "Established", Message: "tunnel up"})
		if err := env.Client.Status().Update(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMigrateIPsecGateway(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	ctx := context.Background()
	c := env.Client
	namespace(t, "mig")
	legacy := createLegacy(t, "mig", "hq", "branch")

	// --dry-run (the default): the objects, nothing applied
	out, stderr, err := run(t, "", "-n", "mig", "migrate", "ipsecgateway", "acme")
	t.Logf("--dry-run:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "the floating IP 198.51.100.7 was allocated from pool \"public\"") {
		t.Errorf("no warning about the adopted floating IP: %q", stderr)
	}
	docs := strings.Split(strings.TrimPrefix(out, "---\n"), "---\n")
	if len(docs) != 3 {
		t.Fatalf("%d documents:\n%s", len(docs), out)
	}
	var gw vpnv1.VPNGateway
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &gw); err != nil {
		t.Fatal(err)
	}
	if gw.Name != "acme" || gw.Spec.Endpoint.FloatingIP != "198.51.100.7" || gw.Spec.ServiceCIDR != "100.64.7.0/24" ||
		gw.Spec.IPsec.LocalID != "198.51.100.7" || gw.Spec.Exposures[0].VirtualIP != "100.64.7.10" || gw.Spec.ReverseExposures[0].VirtualIP != "100.64.7.200" {
		t.Errorf("gateway:\n%s", docs[0])
	}
	peers := map[string]vpnv1.VPNPeer{}
	for _, d := range docs[1:] {
		var p vpnv1.VPNPeer
		if err := yaml.UnmarshalStrict([]byte(d), &p); err != nil {
			t.Fatal(err)
		}
		peers[p.Name] = p
	}
	if a := peers["hq"].Spec.Authorization; a == nil || strings.Join(a.Exposures, ",") != "web,db" || strings.Join(a.ReverseExposures, ",") != "printer" {
		t.Errorf("hq's grants %+v", a)
	}
	if a := peers["branch"].Spec.Authorization; a == nil || strings.Join(a.Exposures, ",") != "web,db" || len(a.ReverseExposures) != 0 {
		t.Errorf("branch's grants %+v", a)
	}
	if strings.Contains(out, "status:") || strings.Contains(out, "uid:") {
		t.Errorf("status or server fields printed:\n%s", out)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "mig", Name: "acme"}, &vpnv1.VPNGateway{}); !apierrors.IsNotFound(err) {
		t.Fatalf("--dry-run created the gateway: %v", err)
	}

	// -o json: a List of the same objects, through the alias
	out, _, err = run(t, "", "-n", "mig", "migrate", "ipsecgw", "acme", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string
		Items []map[string]any
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || list.Kind != "List" || len(list.Items) != 3 {
		t.Fatalf("%v %s", err, out)
	}

	// --dry-run=client: the same objects without the API server's checks; bad values refused
	clientOut, _, err := run(t, "", "-n", "mig", "migrate", "ipsecgateway", "acme", "--dry-run=client")
	if err != nil {
		t.Fatal(err)
	}
	serverOut, _, err := run(t, "", "-n", "mig", "migrate", "ipsecgateway", "acme", "--dry-run=server")
	if err != nil || clientOut != serverOut {
		t.Fatalf("--dry-run=client and --dry-run=server print different objects (%v):\n%s\n---\n%s", err, clientOut, serverOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dry-run=maybe"}, `--dry-run "maybe": none, client or server`},
		{[]string{"--dry-run=client", "--apply"}, "--dry-run=client and --apply: choose one"},
	} {
		_, _, err := run(t, "", append([]string{"-n", "mig", "migrate", "ipsecgateway", "acme"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}

	// refused: a VPNGateway of the name that differs, another peer on the new gateway
	taken := &vpnv1.VPNGateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mig", Name: "taken"},
		Spec:       vpnv1.VPNGatewaySpec{Protocol: vpnv1.ProtocolIPsec, Endpoint: vpnv1.Endpoint{LoadBalancer: &vpnv1.LoadBalancerEndpoint{}}},
	}
	stray := &vpnv1.VPNPeer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mig", Name: "stray"},
		Spec: vpnv1.VPNPeerSpec{GatewayRef: "taken", IPsec: &vpnv1.IPsecPeer{
			Peer: vpnv1.IPsecRemote{Address: "203.0.113.50"}, RemoteSubnets: []string{"10.50.0.0/16"}, PSKSecretRef: vpnv1.SecretKeyRef{Name: "stray-psk", Key: "psk"},
		}},
	}
	for _, obj := range []client.Object{taken, stray} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = run(t, "", "-n", "mig", "migrate", "ipsecgateway", "acme", "--gateway", "taken", "--apply")
	for _, want := range []string{"vpngateway/taken exists and is not the migrated one (spec.endpoint.floatingIP, spec.endpoint.loadBalancer,",
		"vpnpeer/stray references VPNGateway taken already"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no %q in %v", want, err)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil || legacy.Annotations[ipsecv1.AnnotationMigratedTo] != "" {
		t.Fatalf("a refused migration touched the IPsecGateway: %v %v", err, legacy.Annotations)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "mig", Name: "hq"}, &vpnv1.VPNPeer{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused migration applied a peer: %v", err)
	}

	// --apply: applied, handed over; the test plays operator and agent once it sees the handover
	type result struct {
		out, stderr string
		err         error
	}
	// the agent keeps writing the tunnels' counters meanwhile: the handover must not trip on it
	stopChurn := make(chan struct{})
	churned := make(chan int)
	legacyKey := client.ObjectKeyFromObject(legacy) // (read once: the test goroutine rewrites legacy)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for {
			select {
			case <-stopChurn:
				return
			default:
			}
			var g ipsecv1.IPsecGateway
			if err := c.Get(ctx, legacyKey, &g); err != nil {
				return
			}
			g.Status.Tunnels[0].BytesIn++
			if c.Status().Update(ctx, &g) == nil {
				n++
			}
		}
	}()
	done := make(chan result, 1)
	go func() {
		out, stderr, err := run(t, "", "-n", "mig", "migrate", "ipsecgateway", "acme", "--apply", "--timeout", "20s")
		done <- result{out, stderr, err}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
			t.Fatal(err)
		}
		if legacy.Annotations[ipsecv1.AnnotationMigratedTo] == "acme" {
			close(stopChurn)
			t.Logf("%d status writes during the apply", <-churned)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the IPsecGateway was never handed over")
		}
		select {
		case res := <-done:
			t.Fatalf("the command ended before the handover: %v\n%s\n%s", res.err, res.out, res.stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// the objects were applied before the handover
	if err := c.Get(ctx, client.ObjectKey{Namespace: "mig", Name: "acme"}, &gw); err != nil {
		t.Fatal(err)
	}
	managed := false
	for _, f := range gw.ManagedFields {
		managed = managed || (f.Manager == migrate.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply)
	}
	if !managed || gw.Annotations[migrate.AnnotationMigratedFrom] != "acme" {
		t.Errorf("gateway not server-side applied by %s: %v %v", migrate.FieldManager, gw.ManagedFields, gw.Annotations)
	}
	time.Sleep(300 * time.Millisecond) // a measurable outage
	// the operator releases the legacy gateway; kubectl vpn migrate then stamps the new one
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&legacy.Status.Conditions, metav1.Condition{Type: vpnv1.ConditionReady, Status: metav1.ConditionFalse, Reason: "Migrated", Message: "migrated"})
	if err := c.Status().Update(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: "mig", Name: "acme"}, &gw); err != nil {
			t.Fatal(err)
		}
		if gw.Annotations[migrate.AnnotationHandover] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new gateway was not stamped once the legacy one was released: %v", gw.Annotations)
		}
	}
	markUp(t, "mig", "acme", map[string]string{"hq": "Authorized", "branch": "Authorized"})
	res := <-done
	t.Logf("stdout:\n%s\nstderr:\n%s", res.out, res.stderr)
	if res.err != nil {
		t.Fatalf("%v\n%s\n%s", res.err, res.out, res.stderr)
	}
	for _, want := range []string{
		"vpngateway.vpn.bnerd.net/acme applied", "vpnpeer.vpn.bnerd.net/hq applied", "vpnpeer.vpn.bnerd.net/branch applied",
		"ipsecgateway.ipsec.bnerd.net/acme annotated vpn.bnerd.net/migrated-to=acme",
		"ipsecgateway.ipsec.bnerd.net/acme released by the operator (",
		"s waiting for VPNGateway acme Ready (now ", // the cutover's timeline
		"outage: ",
		"vpnpeer/hq", "True (Established)", "True (Authorized)",
		"ipsecgateway.ipsec.bnerd.net/acme deleted",
	} {
		if !strings.Contains(res.out, want) {
			t.Errorf("no %q in\n%s", want, res.out)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); !apierrors.IsNotFound(err) {
		t.Errorf("the IPsecGateway is not deleted: %v", err)
	}
}

// A wait that times out leaves the objects and the handover in place and says how to roll
// back; a second run takes what exists and finishes.
func TestMigrateTimeoutAndResume(t *testing.T) {
	if env == nil {
		t.Skip("no API server")
	}
	ctx := context.Background()
	c := env.Client
	namespace(t, "mig-slow")
	legacy := createLegacy(t, "mig-slow", "hq")

	_, stderr, err := run(t, "", "-n", "mig-slow", "migrate", "ipsecgateway", "acme", "--apply", "--timeout", "1s")
	t.Logf("%v\n%s", err, stderr)
	if err == nil || !strings.Contains(err.Error(), "timed out after 1s waiting for VPNGateway acme Ready (now not reported), VPNPeer hq Connected (now not reported)") {
		t.Fatalf("error %v", err)
	}
	for _, want := range []string{
		"vpngateway.vpn.bnerd.net/acme\n", "vpnpeer.vpn.bnerd.net/hq\n",
		"ipsecgateway.ipsec.bnerd.net/acme: released (annotated vpn.bnerd.net/migrated-to=acme), kept",
		"kubectl --kubeconfig " + kubeconfig + " -n mig-slow delete vpnpeer hq\n",
		"kubectl --kubeconfig " + kubeconfig + " -n mig-slow delete vpngateway acme\n",
		"kubectl --kubeconfig " + kubeconfig + " -n mig-slow annotate ipsecgateway acme vpn.bnerd.net/migrated-to-\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("no %q in\n%s", want, stderr)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil || legacy.Annotations[ipsecv1.AnnotationMigratedTo] != "acme" {
		t.Fatalf("the IPsecGateway after a timeout: %v %v", err, legacy.Annotations)
	}
	var peer vpnv1.VPNPeer
	if err := c.Get(ctx, client.ObjectKey{Namespace: "mig-slow", Name: "hq"}, &peer); err != nil || peer.Spec.Authorization != nil {
		t.Fatalf("the single tunnel's peer: %v %+v (want no authorization block: DefaultAllow)", err, peer.Spec.Authorization)
	}

	// the operator catches up; the run again finds everything in place, keeps the legacy object
	markUp(t, "mig-slow", "acme", map[string]string{"hq": "DefaultAllow"})
	out, _, err := run(t, "", "-n", "mig-slow", "migrate", "ipsecgateway", "acme", "--apply", "--keep-legacy")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vpngateway.vpn.bnerd.net/acme unchanged", "vpnpeer.vpn.bnerd.net/hq unchanged",
		"was handed over to VPNGateway acme before this run", "True (DefaultAllow)", "ipsecgateway.ipsec.bnerd.net/acme kept"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "outage:") {
		t.Errorf("an outage measured without a handover in this run:\n%s", out)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(legacy), legacy); err != nil {
		t.Errorf("--keep-legacy deleted the IPsecGateway: %v", err)
	}
}
