package openstack_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/cloud/openstack"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// faultCase is one row of the fault table: a fault injected into the first Ensure (or into
// Delete), how the provider reports it, and what is left after the operator keeps retrying
// and finally deletes the gateway.
type faultCase struct {
	name   string
	pinned bool
	// setup breaks something before the first Ensure; heal repairs it before the retries
	// (faults are always cleared). inDelete injects into the first Delete instead.
	setup    func(e *env, req *cloud.Request)
	heal     func(e *env)
	badCreds bool
	inDelete []neutronfake.Fault
	// want is the reason of the first Ensure; wantReady whether retries get it Ready.
	want      string
	wantReady bool
}

func inject(fs ...neutronfake.Fault) func(e *env, req *cloud.Request) {
	return func(e *env, _ *cloud.Request) {
		for _, f := range fs {
			e.fake.Inject(f)
		}
	}
}

const callTimeout = 300 * time.Millisecond

// slow outlasts the client's call timeout; the server still carries the call out afterwards.
const slow = 900 * time.Millisecond

func faultCases() []faultCase {
	var cs []faultCase
	add := func(c faultCase) { cs = append(cs, c) }
	P := cloud.ReasonProvisioning

	// Every step of an Ensure: refused with 500, carried out with its answer lost (500 after
	// commit), and timed out (the call lands after the client gave up and retried).
	steps := []struct {
		method, res string
		pinned      bool
	}{
		{"GET", neutronfake.Networks, false},
		{"GET", neutronfake.FloatingIPs, true},
		{"GET", neutronfake.SecurityGroups, false},
		{"POST", neutronfake.SecurityGroups, false},
		{"PUT", neutronfake.SecurityGroups + neutronfake.Tags, false},
		{"POST", neutronfake.SecurityGroupRules, false},
		{"GET", neutronfake.Ports, false},
		{"POST", neutronfake.Ports, false},
		{"PUT", neutronfake.Ports + neutronfake.Tags, false},
		{"GET", neutronfake.FloatingIPs, false},
		{"POST", neutronfake.FloatingIPs, false},
		{"PUT", neutronfake.FloatingIPs + neutronfake.Tags, false},
		{"PUT", neutronfake.FloatingIPs + neutronfake.Tags, true},
		{"PUT", neutronfake.FloatingIPs, true},
		{"GET", neutronfake.Subnets, false},
	}
	for _, s := range steps {
		kind := "pool"
		if s.pinned {
			kind = "pinned"
		}
		target := s.method + " " + s.res
		add(faultCase{name: fmt.Sprintf("500 on %s (%s)", target, kind), pinned: s.pinned,
			setup: inject(neutronfake.Fault{Method: s.method, Resource: s.res, Status: 500}), want: P, wantReady: true})
		if s.method != "GET" {
			add(faultCase{name: fmt.Sprintf("500 after commit %s (%s)", target, kind), pinned: s.pinned,
				setup: inject(neutronfake.Fault{Method: s.method, Resource: s.res, Status: 500, Commit: true}), want: P, wantReady: true})
		}
		add(faultCase{name: fmt.Sprintf("timeout on %s (%s)", target, kind), pinned: s.pinned,
			setup: inject(neutronfake.Fault{Method: s.method, Resource: s.res, Delay: slow}), want: P, wantReady: true})
	}
	add(faultCase{name: "503 on every call, 3 times", setup: inject(neutronfake.Fault{Status: 503, Count: 3}), want: P, wantReady: true})
	add(faultCase{name: "502 on token call", setup: inject(neutronfake.Fault{Resource: neutronfake.Tokens, Status: 502}), want: P, wantReady: true})
	add(faultCase{name: "timeout on token call", setup: inject(neutronfake.Fault{Resource: neutronfake.Tokens, Delay: slow}), want: P, wantReady: true})
	add(faultCase{name: "token revoked (re-auth)", setup: func(e *env, _ *cloud.Request) { e.fake.RevokeTokens() }, want: cloud.ReasonReady, wantReady: true})
	// The token expires while a call is under way (Keystone's expiry, not a revocation): the
	// call is answered 401, the client logs in again and the Ensure goes on.
	add(faultCase{name: "token expires mid-reconcile (re-auth)", setup: func(e *env, _ *cloud.Request) {
		e.fake.SetTokenTTL(150 * time.Millisecond)
		e.fake.Inject(neutronfake.Fault{Method: "POST", Resource: neutronfake.Ports, Delay: 200 * time.Millisecond})
	}, heal: func(e *env) { e.fake.SetTokenTTL(0) }, want: cloud.ReasonReady, wantReady: true})

	// Terminal conditions: reported, not retried in a loop; fixed outside, then Ready.
	add(faultCase{name: "quota: floating IPs", setup: func(e *env, _ *cloud.Request) { e.fake.SetQuota("floatingip", e.baseline.FloatingIPs) },
		heal: func(e *env) { e.fake.SetQuota("floatingip", -1) }, want: cloud.ReasonQuotaExceeded, wantReady: true})
	add(faultCase{name: "quota: ports", setup: func(e *env, _ *cloud.Request) { e.fake.SetQuota("port", e.baseline.Ports) },
		heal: func(e *env) { e.fake.SetQuota("port", -1) }, want: cloud.ReasonQuotaExceeded, wantReady: true})
	add(faultCase{name: "quota: security groups", setup: func(e *env, _ *cloud.Request) { e.fake.SetQuota("security_group", 0) },
		heal: func(e *env) { e.fake.SetQuota("security_group", -1) }, want: cloud.ReasonQuotaExceeded, wantReady: true})
	add(faultCase{name: "quota: rules", setup: func(e *env, _ *cloud.Request) { e.fake.SetQuota("security_group_rule", 2) },
		heal: func(e *env) { e.fake.SetQuota("security_group_rule", -1) }, want: cloud.ReasonQuotaExceeded, wantReady: true})
	add(faultCase{name: "auth: wrong password", badCreds: true, want: cloud.ReasonAuthFailed, wantReady: true})
	add(faultCase{name: "auth: 403 creating port", setup: inject(neutronfake.Fault{Method: "POST", Resource: neutronfake.Ports, Status: 403}),
		want: cloud.ReasonAuthFailed, wantReady: true})
	add(faultCase{name: "external network not found", setup: func(_ *env, req *cloud.Request) { req.Endpoint.FloatingIPPool = "gone" },
		want: cloud.ReasonNotFound})
	add(faultCase{name: "pinned FIP not found", pinned: true,
		setup: func(_ *env, req *cloud.Request) { req.Endpoint.FloatingIP = netip.MustParseAddr("203.0.113.250") }, want: cloud.ReasonNotFound})
	add(faultCase{name: "pinned FIP on another port", pinned: true,
		setup: func(_ *env, req *cloud.Request) { req.Endpoint.FloatingIP = netip.MustParseAddr(foreignAddr) }, want: cloud.ReasonConflict})

	// Faults during Delete: retried until it returns nil.
	for _, d := range []struct {
		name string
		f    neutronfake.Fault
	}{
		{"500 on DELETE floatingips", neutronfake.Fault{Method: "DELETE", Resource: neutronfake.FloatingIPs, Status: 500}},
		{"timeout on DELETE floatingips", neutronfake.Fault{Method: "DELETE", Resource: neutronfake.FloatingIPs, Delay: slow}},
		{"500 after commit DELETE ports", neutronfake.Fault{Method: "DELETE", Resource: neutronfake.Ports, Status: 500, Commit: true}},
		{"409 on DELETE security-groups", neutronfake.Fault{Method: "DELETE", Resource: neutronfake.SecurityGroups, Status: 409}},
		{"500 on GET ports", neutronfake.Fault{Method: "GET", Resource: neutronfake.Ports, Status: 500}},
	} {
		add(faultCase{name: "delete: " + d.name, inDelete: []neutronfake.Fault{d.f}, want: cloud.ReasonReady, wantReady: true})
	}
	for _, d := range []struct {
		name string
		f    neutronfake.Fault
	}{
		{"500 on PUT floatingips (disassociate)", neutronfake.Fault{Method: "PUT", Resource: neutronfake.FloatingIPs, Status: 500}},
		{"timeout on PUT floatingips/tags (untag)", neutronfake.Fault{Method: "PUT", Resource: neutronfake.FloatingIPs + neutronfake.Tags, Delay: slow}},
		{"500 after commit PUT floatingips", neutronfake.Fault{Method: "PUT", Resource: neutronfake.FloatingIPs, Status: 500, Commit: true}},
	} {
		add(faultCase{name: "delete: " + d.name + " (pinned)", pinned: true, inDelete: []neutronfake.Fault{d.f}, want: cloud.ReasonReady, wantReady: true})
	}
	return cs
}

type faultRow struct {
	name, first string
	retries     int
	dupes       int
	ready       string
	deletes     int
	leaked      neutronfake.Inventory
	pinnedKept  string
}

// TestFaultTable tries every fault: Ensure with the fault, then retries as the operator
// would (each with a fresh provider: the worst case, a restart), then Delete (retried), and
// counts what leaked. It prints the table; every count must be zero.
func TestFaultTable(t *testing.T) {
	var rows []faultRow
	for _, c := range faultCases() {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := e.ctx()
			req := poolRequest()
			if c.pinned {
				req = pinnedRequest()
			}
			// A short call timeout only where a timeout is the fault (so a slow machine
			// does not turn other rows into timeouts); generous for the retries.
			timeout := 10 * time.Second
			shortFirst := strings.Contains(c.name, "timeout")
			if shortFirst && len(c.inDelete) == 0 {
				timeout = callTimeout
			}
			prov := func() *openstack.Provider {
				return e.provider(t, func(cfg *openstack.Config) { cfg.CallTimeout = timeout })
			}
			if c.setup != nil {
				c.setup(e, &req)
			}
			first := prov()
			if c.badCreds {
				first = e.providerWith(t, "wrong")
			}
			res, err := first.Ensure(ctx, req)
			timeout = 10 * time.Second
			row := faultRow{name: c.name, first: res.Reason}
			if err != nil {
				row.first += " (error, retry)"
				if res.Terminal {
					t.Errorf("transient error with a terminal result: %+v", res)
				}
			} else if res.Terminal {
				row.first += " (terminal)"
			}
			if res.Reason != c.want {
				t.Errorf("first Ensure: %+v, %v; want reason %s", res, err, c.want)
			}
			if c.want == cloud.ReasonProvisioning && err == nil {
				t.Errorf("a transient fault must be returned as an error")
			}
			if c.want != cloud.ReasonProvisioning && c.want != cloud.ReasonReady && (err != nil || !res.Terminal || res.RetryAfter == 0) {
				t.Errorf("a terminal condition must be a Result with Terminal and a slow RetryAfter: %+v, %v", res, err)
			}
			if c.want != cloud.ReasonReady && c.setup != nil && !c.badCreds && len(c.inDelete) == 0 && e.fake.FaultsHit() == 0 && !strings.HasPrefix(c.name, "quota") &&
				!strings.Contains(c.name, "not found") && !strings.Contains(c.name, "another port") {
				t.Errorf("the fault was never hit")
			}

			// The operator retries: faults gone, whatever was broken outside repaired.
			e.fake.ClearFaults()
			if c.heal != nil {
				c.heal(e)
			}
			ready := res.Ready
			for i := 0; i < 5 && !ready; i++ {
				row.retries++
				res, err = prov().Ensure(ctx, req)
				if err == nil && res.Ready {
					ready = true
				} else if err == nil && res.Terminal {
					break // a terminal condition the operator cannot fix
				}
				if i == 0 {
					e.fake.WaitIdle() // late calls of the faulted attempt land now
				}
			}
			e.fake.WaitIdle()
			if ready {
				// Once more after every late call landed: duplicates go, exactly one remains.
				ensureReady(t, ctx, prov(), req)
				e.checkOne(t, req)
				row.ready = "yes"
			} else {
				row.ready = "no: " + res.Reason
			}
			if ready != c.wantReady {
				t.Errorf("ready after retries = %v, want %v (%+v, %v)", ready, c.wantReady, res, err)
			}

			// Duplicates (late creates) the retries removed.
			for _, call := range e.fake.Calls() {
				if call.Method == "DELETE" && call.Status < 300 {
					row.dupes++
				}
			}

			// Delete, retried like the finalizer would.
			for _, f := range c.inDelete {
				e.fake.Inject(f)
			}
			if shortFirst && len(c.inDelete) > 0 {
				timeout = callTimeout
			}
			for {
				row.deletes++
				err := prov().Delete(ctx, req)
				timeout = 10 * time.Second
				e.fake.WaitIdle()
				if err == nil {
					break
				}
				if ce, ok := cloud.AsError(err); ok && ce.Terminal {
					t.Fatalf("Delete: terminal %v", err)
				}
				if row.deletes > 5 {
					t.Fatalf("Delete keeps failing: %v", err)
				}
			}
			if len(c.inDelete) > 0 && row.deletes < 2 {
				t.Errorf("the Delete fault was not hit")
			}
			row.leaked = e.leaked()
			if row.leaked.Total() != 0 {
				t.Errorf("leaked after cleanup: %v", row.leaked)
			}
			row.pinnedKept = "yes"
			if f, ok := e.fake.FloatingIPByAddress(pinnedAddr); !ok || f.ID != e.pinnedID || f.PortID != nil {
				row.pinnedKept = "NO"
				t.Errorf("the pinned floating IP was released or left associated: %+v %v", f, ok)
			}
			if f, ok := e.fake.FloatingIPByAddress(foreignAddr); !ok || f.PortID == nil || *f.PortID != e.vmPort {
				t.Errorf("the VM's floating IP was touched: %+v %v", f, ok)
			}
			for _, call := range e.fake.Calls() {
				if call.Method == "DELETE" && (call.ID == e.pinnedID || call.ID == e.foreignFIP) {
					t.Errorf("%s %s: a floating IP the operator did not allocate was deleted", call.Method, call.Path)
				}
			}
			rows = append(rows, row)
		})
	}

	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "FAULT\tFIRST ENSURE\tRETRIES\tDUPLICATES REMOVED\tREADY\tDELETE CALLS\tLEAKED SG\tRULES\tPORTS\tFIPS\tPINNED FIP KEPT")
	total := 0
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", r.name, r.first, r.retries, r.dupes, r.ready, r.deletes,
			r.leaked.SecurityGroups, r.leaked.Rules, r.leaked.Ports, r.leaked.FloatingIPs, r.pinnedKept)
		total += r.leaked.Total()
	}
	_ = w.Flush()
	summary := fmt.Sprintf("%d faults tried, %d resources leaked in total", len(rows), total)
	t.Logf("fault table:\n%s%s", b.String(), summary)
	fmt.Printf("\nOpenStack endpoint fault table (Ensure with fault -> retries -> Delete):\n%s%s\n\n", b.String(), summary)
	if total != 0 {
		t.Errorf("%s", summary)
	}
	_ = model.EndpointFloatingIP
}
