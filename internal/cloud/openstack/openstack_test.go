package openstack_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

func TestFreshFloatingIP(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	req := poolRequest()

	res := ensureReady(t, ctx, p, req)
	sg, port, fip := e.checkOne(t, req)
	if res.PublicAddress != fip.FloatingIPAddress || !netip.MustParsePrefix("203.0.113.0/24").Contains(netip.MustParseAddr(res.PublicAddress)) {
		t.Errorf("public address %q, floating IP %q", res.PublicAddress, fip.FloatingIPAddress)
	}
	if fip.FloatingNetworkID != e.extNet || fip.Description != openstack.NamePrefix+string(req.UID) {
		t.Errorf("floating IP: network %s description %q", fip.FloatingNetworkID, fip.Description)
	}
	if slices.Contains(fip.Tags, openstack.TagPinned) {
		t.Errorf("an allocated floating IP is tagged pinned: %v", fip.Tags)
	}
	if sg.Name != openstack.NamePrefix+string(req.UID) || port.Name != sg.Name || port.NetworkID != e.intNet {
		t.Errorf("names: group %q port %q on network %s", sg.Name, port.Name, port.NetworkID)
	}
	want := []string{"esp<-0.0.0.0/0", "udp:4500-4500<-0.0.0.0/0", "udp:500-500<-0.0.0.0/0"}
	if got := ingress(sg.Rules); !slices.Equal(got, want) {
		t.Errorf("ingress rules %v, want %v", got, want)
	}
	if got := e.leaked(); got != (neutronfake.Inventory{SecurityGroups: 1, Rules: 5, Ports: 1, FloatingIPs: 1}) {
		t.Errorf("inventory beyond baseline: %v (3 ingress + 2 default egress rules)", got)
	}

	// What the pod needs: the port as a Multus NIC.
	att := res.Pod.NetworkAttachment
	if att == nil || res.Pod.HostNetwork || res.Pod.NodeName != "" {
		t.Fatalf("pod network %+v", res.Pod)
	}
	if att.Name != "acme-gateway-uplink" || att.Namespace != "client-a" || att.PortID != port.ID || att.MAC != port.MACAddress || att.FixedIP != port.FixedIPs[0].IPAddress {
		t.Errorf("attachment %+v, port %+v", att, port)
	}
	if got := att.PodAnnotation(); got != `[{"interface":"net1","name":"acme-gateway-uplink","namespace":"client-a"}]` {
		t.Errorf("pod annotation %s", got)
	}
	// The default (trunk) binding: a VLAN interface on the node's NIC with the port's VLAN,
	// MAC and address.
	var conf struct {
		Name    string
		Plugins []struct {
			Type, Master, Mac string
			VlanID            int
			IPAM              struct {
				Addresses []struct{ Address, Gateway string }
			}
		}
	}
	if err := json.Unmarshal([]byte(att.Config), &conf); err != nil {
		t.Fatalf("NAD config is not JSON: %v\n%s", err, att.Config)
	}
	if len(conf.Plugins) != 2 {
		t.Fatalf("NAD config %s: want the vlan and tuning plugins", att.Config)
	}
	vlan, tuning := conf.Plugins[0], conf.Plugins[1]
	if conf.Name != att.Name || vlan.Type != "vlan" || vlan.Master != "eth1" || vlan.VlanID != openstack.MinVLAN ||
		!slices.Contains(port.Tags, openstack.TagVLANPrefix+strconv.Itoa(vlan.VlanID)) ||
		len(vlan.IPAM.Addresses) != 1 || vlan.IPAM.Addresses[0].Address != port.FixedIPs[0].IPAddress+"/24" || vlan.IPAM.Addresses[0].Gateway != "10.20.0.1" ||
		tuning.Type != "tuning" || tuning.Mac != port.MACAddress {
		t.Errorf("NAD config %s (port tags %v)", att.Config, port.Tags)
	}

	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := e.leaked(); got.Total() != 0 {
		t.Errorf("after Delete: %v left", got)
	}
	if _, ok := e.fake.FloatingIPByAddress(res.PublicAddress); ok {
		t.Errorf("allocated floating IP %s not released", res.PublicAddress)
	}
	// Delete again: nothing to do, no error.
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
}

func TestPoolByNetworkID(t *testing.T) {
	e := newEnv(t)
	req := poolRequest()
	req.Endpoint.FloatingIPPool = e.extNet
	ensureReady(t, e.ctx(), e.provider(t), req)
	e.checkOne(t, req)
}

func TestPinnedFloatingIP(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	req := pinnedRequest()

	res := ensureReady(t, ctx, p, req)
	if res.PublicAddress != pinnedAddr {
		t.Fatalf("public address %s, want the pinned %s", res.PublicAddress, pinnedAddr)
	}
	_, port, fip := e.checkOne(t, req)
	if fip.ID != e.pinnedID {
		t.Fatalf("adopted floating IP %s, want the pinned one %s", fip.ID, e.pinnedID)
	}
	if !slices.Contains(fip.Tags, openstack.TagPinned) || !slices.Contains(fip.Tags, "customer-x") {
		t.Errorf("pinned floating IP tags %v: want %q and its own tag kept", fip.Tags, openstack.TagPinned)
	}
	if got := e.leaked(); got != (neutronfake.Inventory{SecurityGroups: 1, Rules: 5, Ports: 1}) {
		t.Errorf("inventory beyond baseline: %v (no floating IP allocated)", got)
	}

	e.fake.ResetCalls()
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	after, ok := e.fake.FloatingIPByAddress(pinnedAddr)
	if !ok {
		t.Fatalf("pinned floating IP %s was released", pinnedAddr)
	}
	if after.ID != e.pinnedID || after.PortID != nil {
		t.Errorf("pinned floating IP after Delete: id %s port %v, want %s unassociated", after.ID, after.PortID, e.pinnedID)
	}
	if !slices.Equal(after.Tags, []string{"customer-x"}) {
		t.Errorf("pinned floating IP tags after Delete %v, want only its own [customer-x]", after.Tags)
	}
	for _, c := range e.fake.Calls() {
		if c.Method == "DELETE" && c.Resource == neutronfake.FloatingIPs {
			t.Errorf("Delete sent %s %s: a pinned floating IP must never be released", c.Method, c.Path)
		}
	}
	if _, ok := e.fake.FloatingIPByAddress(foreignAddr); !ok {
		t.Error("someone else's floating IP disappeared")
	}
	if got := e.leaked(); got.Total() != 0 {
		t.Errorf("after Delete: %v left (port %s)", got, port.ID)
	}
}

func TestIdempotent(t *testing.T) {
	for _, mk := range []func() cloud.Request{poolRequest, pinnedRequest} {
		req := mk()
		t.Run(string(req.Endpoint.Kind), func(t *testing.T) {
			e := newEnv(t)
			ctx := e.ctx()
			first := ensureReady(t, ctx, e.provider(t), req)
			sg, port, fip := e.checkOne(t, req)
			inv := e.fake.Inventory()
			for i := range 3 {
				e.fake.ResetCalls()
				// The same instance and a fresh one (an operator restart).
				p := e.provider(t)
				res := ensureReady(t, ctx, p, req)
				if res.PublicAddress != first.PublicAddress || res.Pod.NetworkAttachment.PortID != port.ID || res.Pod.NetworkAttachment.Config != first.Pod.NetworkAttachment.Config {
					t.Errorf("Ensure %d: %+v, first %+v", i+2, res, first)
				}
				if w := writes(e.fake.Calls()); len(w) != 0 {
					t.Errorf("Ensure %d of a converged gateway wrote: %+v", i+2, w)
				}
				sg2, port2, fip2 := e.checkOne(t, req)
				if sg2.ID != sg.ID || port2.ID != port.ID || fip2.ID != fip.ID {
					t.Errorf("Ensure %d changed resources", i+2)
				}
				if got := e.fake.Inventory(); got != inv {
					t.Errorf("Ensure %d: inventory %v, was %v", i+2, got, inv)
				}
			}
		})
	}
}

func TestCacheSkipsNeutron(t *testing.T) {
	e := newEnv(t)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := e.provider(t, func(c *openstack.Config) { c.CacheTTL = time.Minute; c.Now = func() time.Time { return now } })
	req := poolRequest()
	ensureReady(t, e.ctx(), p, req)
	e.fake.ResetCalls()
	ensureReady(t, e.ctx(), p, req)
	if n := len(e.fake.Calls()); n != 0 {
		t.Errorf("a cached Ensure made %d calls", n)
	}
	now = now.Add(2 * time.Minute)
	ensureReady(t, e.ctx(), p, req)
	if n := len(e.fake.Calls()); n == 0 {
		t.Error("an expired cache entry was used")
	}
}

// A ready endpoint asks to be ensured again when its cache entry expires (the resync), and
// that Ensure repairs what was changed in the cloud meanwhile: here its floating IP
// disassociated by someone, with nothing in the cluster changed.
func TestReadyEndpointResyncsWithTheCloud(t *testing.T) {
	e := newEnv(t)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	p := e.provider(t, func(c *openstack.Config) { c.CacheTTL = time.Minute; c.Now = func() time.Time { return now } })
	req := poolRequest()
	if res := ensureReady(t, e.ctx(), p, req); res.RetryAfter != time.Minute {
		t.Errorf("a fresh Ready result asks to be ensured again after %s, want the cache TTL %s", res.RetryAfter, time.Minute)
	}
	now = now.Add(20 * time.Second)
	if res := ensureReady(t, e.ctx(), p, req); res.RetryAfter != 41*time.Second {
		t.Errorf("a cached Ready result asks to be ensured again after %s, want when its entry expires (41s)", res.RetryAfter)
	}
	_, _, fip := e.checkOne(t, req)
	e.fake.DisassociateFloatingIP(fip.ID)
	now = now.Add(41 * time.Second)
	ensureReady(t, e.ctx(), p, req)
	if _, port, fip := e.checkOne(t, req); fip.PortID == nil || *fip.PortID != port.ID {
		t.Errorf("the resync left the floating IP %s off its port %s", fip.FloatingIPAddress, port.ID)
	}
}

func TestSecurityGroupFollowsPeers(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	req := poolRequest()
	req.Protocol, req.WireGuardPort = model.ProtocolWireGuard, 51821
	req.PeerAddresses = []netip.Addr{netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8")}
	ensureReady(t, ctx, p, req)
	sg, _, _ := e.checkOne(t, req)
	want := []string{"udp:51821-51821<-198.51.100.7/32", "udp:51821-51821<-198.51.100.8/32"}
	if got := ingress(sg.Rules); !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}

	req.PeerAddresses = []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8::7")}
	ensureReady(t, ctx, p, req)
	sg, _, _ = e.checkOne(t, req)
	want = []string{"udp:51821-51821<-198.51.100.7/32", "udp:51821-51821<-2001:db8::7/128"}
	if got := ingress(sg.Rules); !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}

	req.PeerAddresses = nil
	ensureReady(t, ctx, p, req)
	sg, _, _ = e.checkOne(t, req)
	want = []string{"udp:51821-51821<-0.0.0.0/0"}
	if got := ingress(sg.Rules); !slices.Equal(got, want) {
		t.Errorf("rules %v, want %v", got, want)
	}
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := e.leaked(); got.Total() != 0 {
		t.Errorf("after Delete: %v left", got)
	}
}

// TestCrashBetweenCreateAndStatusWrite: every write of an Ensure is carried out but its
// answer is lost (the operator dies right after); a restarted operator's Ensure adopts what
// exists: exactly one group, port and floating IP.
func TestCrashBetweenCreateAndStatusWrite(t *testing.T) {
	steps := []struct{ method, resource string }{
		{"POST", neutronfake.SecurityGroups},
		{"PUT", neutronfake.SecurityGroups + neutronfake.Tags},
		{"POST", neutronfake.SecurityGroupRules},
		{"POST", neutronfake.Ports},
		{"PUT", neutronfake.Ports + neutronfake.Tags},
		{"POST", neutronfake.FloatingIPs},
		{"PUT", neutronfake.FloatingIPs + neutronfake.Tags},
		{"PUT", neutronfake.FloatingIPs}, // associating the pinned address
		{"GET", neutronfake.Subnets},     // everything created, the last read fails
	}
	for _, mk := range []func() cloud.Request{poolRequest, pinnedRequest} {
		for _, st := range steps {
			req := mk()
			if req.Endpoint.Kind == model.EndpointFloatingIP && st.method == "POST" && st.resource == neutronfake.FloatingIPs {
				continue // nothing is allocated for a pinned address
			}
			if req.Endpoint.Kind == model.EndpointFloatingIPPool && st.method == "PUT" && st.resource == neutronfake.FloatingIPs {
				continue // an allocated address is created on the port
			}
			t.Run(string(req.Endpoint.Kind)+"/"+st.method+"_"+strings.ReplaceAll(st.resource, "/", "_"), func(t *testing.T) {
				e := newEnv(t)
				ctx := e.ctx()
				e.fake.Inject(neutronfake.Fault{Method: st.method, Resource: st.resource, Status: 500, Commit: true})
				res, err := e.provider(t).Ensure(ctx, req)
				if err == nil || res.Terminal || res.Reason != cloud.ReasonProvisioning {
					t.Fatalf("Ensure with a lost %s %s answer: %+v, %v; want a transient error", st.method, st.resource, res, err)
				}
				if e.fake.FaultsHit() != 1 {
					t.Fatalf("the fault was not hit")
				}
				// Restart: a new provider, nothing remembered.
				res = ensureReady(t, ctx, e.provider(t), req)
				e.checkOne(t, req)
				if req.Endpoint.Kind == model.EndpointFloatingIP && res.PublicAddress != pinnedAddr {
					t.Errorf("public address %s", res.PublicAddress)
				}
				if got := e.leaked(); got.SecurityGroups != 1 || got.Ports != 1 || got.Rules != 5 {
					t.Errorf("inventory beyond baseline %v", got)
				}
				if err := e.provider(t).Delete(ctx, req); err != nil {
					t.Fatal(err)
				}
				if got := e.leaked(); got.Total() != 0 {
					t.Errorf("after Delete: %v left", got)
				}
				if _, ok := e.fake.FloatingIPByAddress(pinnedAddr); !ok {
					t.Error("pinned floating IP released")
				}
			})
		}
	}
}

func TestFaults(t *testing.T) {
	t.Run("5xx is transient", func(t *testing.T) {
		e := newEnv(t)
		e.fake.Inject(neutronfake.Fault{Method: "GET", Resource: neutronfake.Ports, Status: 503})
		res, err := e.provider(t).Ensure(e.ctx(), poolRequest())
		ce, ok := cloud.AsError(err)
		if !ok || ce.Terminal || ce.Reason != cloud.ReasonProvisioning || res.Terminal || res.Reason != cloud.ReasonProvisioning {
			t.Fatalf("got %+v, %v; want a transient *cloud.Error", res, err)
		}
		if !strings.Contains(err.Error(), "HTTP 503") {
			t.Errorf("error %q does not say what happened", err)
		}
	})
	t.Run("client timeout is transient", func(t *testing.T) {
		e := newEnv(t)
		e.fake.Inject(neutronfake.Fault{Method: "POST", Resource: neutronfake.Ports, Delay: 800 * time.Millisecond})
		p := e.provider(t, func(c *openstack.Config) { c.CallTimeout = 200 * time.Millisecond })
		req := poolRequest()
		_, err := p.Ensure(e.ctx(), req)
		ce, ok := cloud.AsError(err)
		if !ok || ce.Terminal || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("got %v; want a transient timeout", err)
		}
		// The late create lands after the client gave up; the next Ensure adopts it.
		e.fake.WaitIdle()
		ensureReady(t, e.ctx(), p, req)
		e.checkOne(t, req)
	})
	t.Run("floating IP quota", func(t *testing.T) {
		e := newEnv(t)
		e.fake.SetQuota("floatingip", e.baseline.FloatingIPs)
		req := poolRequest()
		res, err := e.provider(t).Ensure(e.ctx(), req)
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonQuotaExceeded || res.RetryAfter != openstack.DefaultSlowRetry || res.Ready {
			t.Fatalf("got %+v, %v; want terminal QuotaExceeded retried after %s", res, err, openstack.DefaultSlowRetry)
		}
		if !strings.Contains(res.Message, "Quota exceeded") {
			t.Errorf("message %q does not carry Neutron's reason", res.Message)
		}
		e.fake.SetQuota("floatingip", -1)
		ensureReady(t, e.ctx(), e.provider(t), req)
		e.checkOne(t, req)
	})
	t.Run("port quota", func(t *testing.T) {
		e := newEnv(t)
		e.fake.SetQuota("port", e.baseline.Ports)
		res, err := e.provider(t).Ensure(e.ctx(), poolRequest())
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonQuotaExceeded {
			t.Fatalf("got %+v, %v", res, err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		e := newEnv(t)
		res, err := e.providerWith(t, "not-the-password").Ensure(e.ctx(), poolRequest())
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonAuthFailed {
			t.Fatalf("got %+v, %v; want terminal AuthFailed", res, err)
		}
		if got := e.leaked(); got.Total() != 0 {
			t.Errorf("created %v without credentials", got)
		}
	})
	t.Run("rejected credentials are not retried at once", func(t *testing.T) {
		e := newEnv(t)
		now := time.Now()
		p := e.providerWith(t, "not-the-password", func(c *openstack.Config) { c.Now = func() time.Time { return now } })
		for range 5 {
			if res, err := p.Ensure(e.ctx(), poolRequest()); err != nil || res.Reason != cloud.ReasonAuthFailed {
				t.Fatalf("got %+v, %v", res, err)
			}
		}
		tokens := 0
		for _, c := range e.fake.Calls() {
			if c.Resource == neutronfake.Tokens {
				tokens++
			}
		}
		if tokens != 1 {
			t.Errorf("%d logins with rejected credentials within the backoff, want 1", tokens)
		}
		now = now.Add(openstack.DefaultAuthBackoff + time.Second)
		if res, _ := p.Ensure(e.ctx(), poolRequest()); res.Reason != cloud.ReasonAuthFailed {
			t.Errorf("after the backoff: %+v", res)
		}
		if n := len(e.fake.Calls()); n != 2 {
			t.Errorf("%d calls, want a second login after the backoff", n)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		e := newEnv(t)
		e.fake.Inject(neutronfake.Fault{Method: "POST", Resource: neutronfake.SecurityGroups, Status: 403,
			Body: `{"NeutronError": {"type": "PolicyNotAuthorized", "message": "rule:create_security_group is disallowed by policy", "detail": ""}}`})
		res, err := e.provider(t).Ensure(e.ctx(), poolRequest())
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonAuthFailed {
			t.Fatalf("got %+v, %v; want terminal AuthFailed", res, err)
		}
	})
	t.Run("application credential", func(t *testing.T) {
		e := newEnv(t)
		p, err := openstack.NewFromApplicationCredential(openstack.ApplicationCredential{AuthURL: e.fake.AuthURL(), ID: "ac-1", Secret: appCredSecret, Region: "RegionOne"},
			openstack.Config{NetworkID: e.intNet, CacheTTL: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Check(e.ctx()); err != nil {
			t.Fatal(err)
		}
		ensureReady(t, e.ctx(), p, poolRequest())
		bad, _ := openstack.NewFromApplicationCredential(openstack.ApplicationCredential{AuthURL: e.fake.AuthURL(), ID: "ac-1", Secret: "wrong-secret"},
			openstack.Config{NetworkID: e.intNet})
		res, err := bad.Ensure(e.ctx(), poolRequest())
		if err != nil || res.Reason != cloud.ReasonAuthFailed {
			t.Fatalf("got %+v, %v; want AuthFailed", res, err)
		}
	})
	t.Run("token revoked mid-run", func(t *testing.T) {
		e := newEnv(t)
		p := e.provider(t)
		ensureReady(t, e.ctx(), p, poolRequest())
		e.fake.RevokeTokens()
		ensureReady(t, e.ctx(), p, poolRequest())
	})
	t.Run("external network not found", func(t *testing.T) {
		e := newEnv(t)
		req := poolRequest()
		req.Endpoint.FloatingIPPool = "no-such-net"
		res, err := e.provider(t).Ensure(e.ctx(), req)
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonNotFound || !strings.Contains(res.Message, "no-such-net") {
			t.Fatalf("got %+v, %v; want terminal NotFound", res, err)
		}
		if got := e.leaked(); got.Total() != 0 {
			t.Errorf("created %v for a pool that does not exist", got)
		}
	})
	t.Run("pool is not external", func(t *testing.T) {
		e := newEnv(t)
		req := poolRequest()
		req.Endpoint.FloatingIPPool = e.intNet
		res, err := e.provider(t).Ensure(e.ctx(), req)
		if err != nil || res.Reason != cloud.ReasonNotFound {
			t.Fatalf("got %+v, %v; want NotFound", res, err)
		}
	})
	t.Run("pinned floating IP does not exist", func(t *testing.T) {
		e := newEnv(t)
		req := pinnedRequest()
		req.Endpoint.FloatingIP = netip.MustParseAddr("203.0.113.99")
		res, err := e.provider(t).Ensure(e.ctx(), req)
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonNotFound {
			t.Fatalf("got %+v, %v; want terminal NotFound", res, err)
		}
	})
	t.Run("pinned floating IP in use by another port", func(t *testing.T) {
		e := newEnv(t)
		req := pinnedRequest()
		req.Endpoint.FloatingIP = netip.MustParseAddr(foreignAddr)
		p := e.provider(t)
		res, err := p.Ensure(e.ctx(), req)
		if err != nil || !res.Terminal || res.Reason != cloud.ReasonConflict || !strings.Contains(res.Message, e.vmPort) {
			t.Fatalf("got %+v, %v; want terminal Conflict naming port %s", res, err, e.vmPort)
		}
		// a cutover: the VM's port lets go of the address any moment; waiting minutes would be
		// the client's outage
		if res.RetryAfter != openstack.DefaultCutoverRetry {
			t.Errorf("rechecked after %s, want %s", res.RetryAfter, openstack.DefaultCutoverRetry)
		}
		if got := e.leaked(); got.Total() != 0 {
			t.Errorf("created %v although the address is taken", got)
		}
		if err := p.Delete(e.ctx(), req); err != nil {
			t.Fatal(err)
		}
		f, ok := e.fake.FloatingIPByAddress(foreignAddr)
		if !ok || f.PortID == nil || *f.PortID != e.vmPort {
			t.Errorf("the VM's floating IP was touched: %+v", f)
		}
	})
	t.Run("pinned floating IP of another gateway", func(t *testing.T) {
		e := newEnv(t)
		first := pinnedRequest()
		ensureReady(t, e.ctx(), e.provider(t), first)
		second := pinnedRequest()
		second.Name = "other"
		res, err := e.provider(t).Ensure(e.ctx(), second)
		if err != nil || res.Reason != cloud.ReasonConflict {
			t.Fatalf("got %+v, %v; want Conflict", res, err)
		}
		if err := e.provider(t).Delete(e.ctx(), second); err != nil {
			t.Fatal(err)
		}
		e.checkOne(t, first) // the first gateway still holds it
	})
	t.Run("security group in use during delete", func(t *testing.T) {
		e := newEnv(t)
		p := e.provider(t)
		req := poolRequest()
		ensureReady(t, e.ctx(), p, req)
		e.fake.Inject(neutronfake.Fault{Method: "DELETE", Resource: neutronfake.SecurityGroups, Status: 409,
			Body: `{"NeutronError": {"type": "SecurityGroupInUse", "message": "Security Group in use.", "detail": ""}}`})
		err := p.Delete(e.ctx(), req)
		if ce, ok := cloud.AsError(err); !ok || ce.Terminal {
			t.Fatalf("Delete: %v; want a transient error", err)
		}
		if err := p.Delete(e.ctx(), req); err != nil {
			t.Fatal(err)
		}
		if got := e.leaked(); got.Total() != 0 {
			t.Errorf("after Delete: %v left", got)
		}
	})
}

// TestSwitchingEndpoint: a gateway moving from an allocated address to a pinned one releases
// the allocated one; moving back unpins (never releases) the pinned one.
func TestSwitchingEndpoint(t *testing.T) {
	e := newEnv(t)
	ctx := e.ctx()
	p := e.provider(t)
	req := poolRequest()
	allocated := ensureReady(t, ctx, p, req).PublicAddress

	req.Endpoint = model.Endpoint{Kind: model.EndpointFloatingIP, FloatingIP: netip.MustParseAddr(pinnedAddr)}
	if got := ensureReady(t, ctx, p, req).PublicAddress; got != pinnedAddr {
		t.Fatalf("public address %s", got)
	}
	if _, ok := e.fake.FloatingIPByAddress(allocated); ok {
		t.Errorf("the previously allocated %s was not released", allocated)
	}
	e.checkOne(t, req)

	req.Endpoint = model.Endpoint{Kind: model.EndpointFloatingIPPool, FloatingIPPool: "public"}
	ensureReady(t, ctx, p, req)
	e.checkOne(t, req)
	f, ok := e.fake.FloatingIPByAddress(pinnedAddr)
	if !ok || f.PortID != nil || slices.Contains(f.Tags, openstack.TagPinned) {
		t.Errorf("the formerly pinned address: %+v, %v", f, ok)
	}
	if err := p.Delete(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := e.leaked(); got.Total() != 0 {
		t.Errorf("after Delete: %v left", got)
	}
}

// TestCredentialsNeverLeak: a distinctive password (and an application credential secret)
// must not appear in any error, condition message or log line — not even when a server
// echoes the login request back in its error.
func TestCredentialsNeverLeak(t *testing.T) {
	e := newEnv(t)
	e.fake.EchoAuthBody(true)
	ctx := e.ctx()
	var texts []string
	collect := func(res cloud.Result, err error) {
		texts = append(texts, res.Message)
		if err != nil {
			texts = append(texts, err.Error())
		}
	}

	// The server echoes the rejected request (password inside) — scrubbed.
	e.fake.AddUser("vpn-operator", "something-else")
	collect(e.provider(t).Ensure(ctx, poolRequest()))
	if !strings.Contains(texts[0], "[redacted]") {
		t.Errorf("expected the echoed request to be redacted: %q", texts[0])
	}
	e.fake.AddUser("vpn-operator", password)

	// Every fault, every step.
	for _, f := range []neutronfake.Fault{
		{Resource: neutronfake.Tokens, Status: 500},
		{Method: "POST", Resource: neutronfake.Ports, Status: 500},
		{Method: "POST", Resource: neutronfake.FloatingIPs, Status: 409, Body: `{"NeutronError": {"type": "OverQuota", "message": "Quota exceeded for resources: ['floatingip'].", "detail": ""}}`},
		{Method: "GET", Resource: neutronfake.SecurityGroups, Status: 401},
		{Method: "POST", Resource: neutronfake.SecurityGroupRules, Delay: 300 * time.Millisecond},
	} {
		e.fake.ClearFaults()
		e.fake.Inject(f)
		p := e.provider(t, func(c *openstack.Config) { c.CallTimeout = 100 * time.Millisecond })
		collect(p.Ensure(ctx, poolRequest()))
		e.fake.WaitIdle()
	}
	e.fake.ClearFaults()

	// Application credential rejected, with the echo.
	bad, err := openstack.NewFromApplicationCredential(openstack.ApplicationCredential{AuthURL: e.fake.AuthURL(), ID: "ac-1", Secret: appCredSecret + "-old"},
		openstack.Config{NetworkID: e.intNet})
	if err != nil {
		t.Fatal(err)
	}
	collect(bad.Ensure(ctx, poolRequest()))

	// Configuration errors.
	for _, doc := range []string{
		"clouds: {test: {auth: {password: [" + password + "}}}",
		"clouds:\n  test:\n    auth:\n      password: {nested: '" + strings.ReplaceAll(password, "'", "''") + "'}\n",
		"clouds:\n  test:\n    auth:\n      username: u\n      password: '" + strings.ReplaceAll(password, "'", "''") + "'\n",
	} {
		_, err := openstack.NewFromCloudsYAML([]byte(doc), "test", openstack.Config{NetworkID: "n"})
		if err == nil {
			t.Errorf("clouds.yaml %q accepted", doc)
			continue
		}
		texts = append(texts, err.Error())
	}

	texts = append(texts, e.logs.all()...)
	if len(texts) < 10 {
		t.Fatalf("only %d texts collected", len(texts))
	}
	for _, s := range texts {
		for _, secret := range []string{password, `Hunter2-\"S3cr3t\"`, "S3cr3t", appCredSecret} {
			if strings.Contains(s, secret) {
				t.Errorf("secret %q leaked in %q", secret, s)
			}
		}
	}
	t.Logf("%d errors, messages and log lines checked", len(texts))
}

func TestBadTemplate(t *testing.T) {
	e := newEnv(t)
	if _, err := openstack.NewFromCloudsYAML(e.cloudsYAML(password), "test", openstack.Config{NetworkID: e.intNet, NADConfigTemplate: "{{"}); err == nil {
		t.Error("an unparsable template was accepted")
	}
	p := e.provider(t, func(c *openstack.Config) { c.NADConfigTemplate = `{"type": "host-device", "device": {{.MAC}}}` })
	res, err := p.Ensure(e.ctx(), poolRequest())
	if err != nil || res.Reason != cloud.ReasonInvalidConfiguration || !res.Terminal {
		t.Fatalf("got %+v, %v; want InvalidConfiguration (template output is not JSON)", res, err)
	}
	p = e.provider(t, func(c *openstack.Config) {
		c.NADConfigTemplate = `{"cniVersion": "0.4.0", "type": "host-device", "name": {{json .Name}}, "hwaddr": {{json .MAC}}, "ipam": {"type": "static", "addresses": [{"address": {{json .Address}}}]}}`
	})
	res = ensureReady(t, e.ctx(), p, poolRequest())
	if !strings.Contains(res.Pod.NetworkAttachment.Config, `"host-device"`) || !strings.Contains(res.Pod.NetworkAttachment.Config, res.Pod.NetworkAttachment.MAC) {
		t.Errorf("config %s", res.Pod.NetworkAttachment.Config)
	}
}
