package openstack_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// password is distinctive, and has characters JSON escapes, so a leak is found whether it
// appears raw or inside an echoed JSON document.
const password = `Hunter2-"S3cr3t"\-zq9xw`

const appCredSecret = "appcred-S3CRET-7f3b0e1d9a"

// pinnedAddr is the migrated client's address; foreignAddr sits on someone else's VM.
const (
	pinnedAddr  = "203.0.113.77"
	foreignAddr = "203.0.113.88"
)

// env is one fake cloud: an external network (the pool), a transit network for gateway
// ports, an unassociated floating IP to pin, and a VM port holding another floating IP.
type env struct {
	fake                 *neutronfake.Server
	extNet, intNet       string
	intSubnet            string
	pinnedID, foreignFIP string
	vmPort               string
	baseline             neutronfake.Inventory

	logs *logSink
}

func newEnv(t testing.TB) *env {
	t.Helper()
	f := neutronfake.New()
	t.Cleanup(f.Close)
	f.AddUser("vpn-operator", password)
	f.AddApplicationCredential("ac-1", appCredSecret)
	e := &env{fake: f, logs: &logSink{}}
	e.extNet, _ = f.AddNetwork("public", true, "203.0.113.0/24")
	e.intNet, e.intSubnet = f.AddNetwork("vpn-transit", false, "10.20.0.0/24")
	e.vmPort = f.AddPort(e.intNet, "legacy-vpn-vm")
	e.pinnedID = f.AddFloatingIP(e.extNet, pinnedAddr, "")
	e.foreignFIP = f.AddFloatingIP(e.extNet, foreignAddr, e.vmPort)
	e.baseline = f.Inventory()
	return e
}

func (e *env) cloudsYAML(pw string) []byte {
	return fmt.Appendf(nil, `clouds:
  test:
    auth:
      auth_url: %s
      username: vpn-operator
      password: '%s'
      project_name: vpn
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: public
`, e.fake.AuthURL(), strings.ReplaceAll(pw, "'", "''"))
}

// provider is a fresh provider instance (a restarted operator): no cache, short timeouts.
func (e *env) provider(t testing.TB, mut ...func(*openstack.Config)) *openstack.Provider {
	return e.providerWith(t, password, mut...)
}

func (e *env) providerWith(t testing.TB, pw string, mut ...func(*openstack.Config)) *openstack.Provider {
	t.Helper()
	cfg := openstack.Config{NetworkID: e.intNet, CallTimeout: 2 * time.Second, CacheTTL: -1}
	for _, m := range mut {
		m(&cfg)
	}
	p, err := openstack.NewFromCloudsYAML(e.cloudsYAML(pw), "test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// ctx carries a logger writing into e.logs.
func (e *env) ctx() context.Context {
	return log.IntoContext(context.Background(), logr.Logger(funcr.New(e.logs.write, funcr.Options{Verbosity: 10})))
}

type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logSink) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

var uidSeq int

func poolRequest() cloud.Request {
	uidSeq++
	return cloud.Request{
		Namespace: "client-a", Name: "acme",
		UID:      types.UID(fmt.Sprintf("0b7c2f4e-1111-4a5b-9c3d-%012d", uidSeq)),
		Protocol: model.ProtocolIPsec,
		Endpoint: model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: "public"},
	}
}

func pinnedRequest() cloud.Request {
	r := poolRequest()
	r.Name = "acme-migrated"
	r.Endpoint = model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: netip.MustParseAddr(pinnedAddr)}
	return r
}

// leaked is what exists beyond the env's baseline.
func (e *env) leaked() neutronfake.Inventory {
	return e.fake.Inventory().Sub(e.baseline)
}

// checkOne asserts exactly one security group, port and floating IP of the gateway exist
// (the pinned address counts as its floating IP), with their tags, and returns them.
func (e *env) checkOne(t testing.TB, req cloud.Request) (neutronfake.SecurityGroup, neutronfake.Port, neutronfake.FloatingIP) {
	t.Helper()
	gwTag := openstack.TagGatewayPrefix + string(req.UID)
	var sgs []neutronfake.SecurityGroup
	for _, g := range e.fake.SecurityGroupList() {
		if g.Name == openstack.NamePrefix+string(req.UID) || slices.Contains(g.Tags, gwTag) {
			sgs = append(sgs, g)
		}
	}
	var ports []neutronfake.Port
	for _, p := range e.fake.PortList() {
		if p.Name == openstack.NamePrefix+string(req.UID) || slices.Contains(p.Tags, gwTag) {
			ports = append(ports, p)
		}
	}
	var fips []neutronfake.FloatingIP
	for _, f := range e.fake.FloatingIPList() {
		if f.Description == openstack.NamePrefix+string(req.UID) || slices.Contains(f.Tags, gwTag) {
			fips = append(fips, f)
		}
	}
	if len(sgs) != 1 || len(ports) != 1 || len(fips) != 1 {
		t.Fatalf("gateway %s: want exactly 1 security group, port and floating IP, have %d, %d, %d", req.UID, len(sgs), len(ports), len(fips))
	}
	owner := openstack.TagOwnerPrefix + req.Namespace + "/" + req.Name
	for what, tags := range map[string][]string{"security group": sgs[0].Tags, "port": ports[0].Tags, "floating IP": fips[0].Tags} {
		if !slices.Contains(tags, gwTag) || !slices.Contains(tags, owner) {
			t.Errorf("%s tags %v: want %q and %q", what, tags, gwTag, owner)
		}
	}
	if !slices.Equal(ports[0].SecurityGroups, []string{sgs[0].ID}) {
		t.Errorf("port security groups %v, want [%s]", ports[0].SecurityGroups, sgs[0].ID)
	}
	if fips[0].PortID == nil || *fips[0].PortID != ports[0].ID {
		t.Errorf("floating IP %s is not associated with port %s", fips[0].FloatingIPAddress, ports[0].ID)
	}
	return sgs[0], ports[0], fips[0]
}

// ingress describes a group's ingress rules as sorted "proto:min-max<-prefix" strings.
func ingress(rules []*neutronfake.Rule) []string {
	var out []string
	for _, r := range rules {
		if r.Direction != "ingress" {
			continue
		}
		s := deref(r.Protocol)
		if r.PortRangeMin != nil {
			s += fmt.Sprintf(":%d-%d", *r.PortRangeMin, *r.PortRangeMax)
		}
		s += "<-" + deref(r.RemoteIPPrefix)
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ensureReady calls Ensure and fails unless the endpoint is ready.
func ensureReady(t testing.TB, ctx context.Context, p cloud.Provider, req cloud.Request) cloud.Result {
	t.Helper()
	res, err := p.Ensure(ctx, req)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !res.Ready || res.Reason != cloud.ReasonReady {
		t.Fatalf("Ensure: not ready: %+v", res)
	}
	return res
}

// writes are the mutating calls among calls.
func writes(calls []neutronfake.Call) []neutronfake.Call {
	var out []neutronfake.Call
	for _, c := range calls {
		if c.Method != "GET" && c.Resource != neutronfake.Tokens {
			out = append(out, c)
		}
	}
	return out
}
