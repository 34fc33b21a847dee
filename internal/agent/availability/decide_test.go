package availability

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	members := map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}
	lease := func(holder string, observed time.Duration) LeaseView {
		return LeaseView{Known: true, Holder: holder, Observed: ago(observed), Members: members}
	}
	// standby "b" watching active "a"; active "a" probed by standby "b".
	standby := func(mod func(*Inputs)) Inputs {
		in := Inputs{Self: "b", Role: Standby, Now: now, Lease: lease("a", 100*time.Millisecond),
			APIContact: ago(100 * time.Millisecond), Healthy: true,
			Active: Probe{Answered: ago(100 * time.Millisecond), Identity: "a", Healthy: true}}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	active := func(mod func(*Inputs)) Inputs {
		in := Inputs{Self: "a", Role: Active, Now: now, Lease: lease("a", 100*time.Millisecond),
			APIContact: ago(100 * time.Millisecond), Healthy: true,
			Heard: map[string]time.Time{"b": ago(100 * time.Millisecond)}}
		if mod != nil {
			mod(&in)
		}
		return in
	}
	apiDown := func(in *Inputs) { in.APIContact = ago(10 * time.Second); in.Lease.Observed = ago(10 * time.Second) }

	for _, tc := range []struct {
		name string
		in   Inputs
		want Action
	}{
		{"standby: active renewing and answering", standby(nil), Action{}},
		{"standby: lease not read yet", standby(func(in *Inputs) { in.Lease = LeaseView{} }), Action{}},
		{"standby: no holder", standby(func(in *Inputs) { in.Lease.Holder = "" }), Action{Kind: TakeOver, Reason: ReasonInitial}},
		{"standby: no holder, own dataplane unhealthy", standby(func(in *Inputs) { in.Lease.Holder = ""; in.Healthy = false }), Action{}},
		{"standby: no holder, stopping", standby(func(in *Inputs) { in.Lease.Holder = ""; in.Stopping = true }), Action{}},

		// API outage for both: the standby sees the Lease age, but cannot tell; probes answer.
		{"standby: API outage, active probed", standby(apiDown), Action{}},
		// API outage for both and the active's probes unanswered too: still no takeover
		// (the write could not happen; the active may be fine).
		{"standby: API outage, active not probed", standby(func(in *Inputs) { apiDown(in); in.Active.Answered = ago(5 * time.Second) }), Action{}},
		// The active is cut off from the API (the Lease ages) but answers the probes.
		{"standby: active partitioned from the API, probed", standby(func(in *Inputs) { in.Lease.Observed = ago(10 * time.Second) }), Action{}},
		// The active's node is frozen: no answers, Lease expired.
		{"standby: active node frozen", standby(func(in *Inputs) {
			in.Lease.Observed = ago(2100 * time.Millisecond)
			in.Active.Answered = ago(2100 * time.Millisecond)
		}), Action{Kind: TakeOver, Reason: ReasonActiveGone}},
		{"standby: probes lost for 1.5 s, Lease still fresh", standby(func(in *Inputs) {
			in.Lease.Observed = ago(1500 * time.Millisecond)
			in.Active.Answered = ago(1500 * time.Millisecond)
		}), Action{}},
		{"standby: Lease expired, probes lost for only 0.5 s", standby(func(in *Inputs) {
			in.Lease.Observed = ago(3 * time.Second)
			in.Active.Answered = ago(500 * time.Millisecond)
		}), Action{}},
		{"standby: never probed the active, Lease expired", standby(func(in *Inputs) {
			in.Lease.Observed = ago(3 * time.Second)
			in.Active = Probe{}
		}), Action{Kind: TakeOver, Reason: ReasonActiveGone}},
		{"standby: answers from another pod than the holder do not count", standby(func(in *Inputs) {
			in.Lease.Observed = ago(3 * time.Second)
			in.Active.Identity = "c"
		}), Action{Kind: TakeOver, Reason: ReasonActiveGone}},
		{"standby: active's charon dead", standby(func(in *Inputs) { in.Active.Healthy = false }), Action{Kind: TakeOver, Reason: ReasonActiveUnhealthy}},
		{"standby: active's charon dead, own too", standby(func(in *Inputs) { in.Active.Healthy = false; in.Healthy = false }), Action{}},
		{"standby: an old unhealthy answer does not count", standby(func(in *Inputs) {
			in.Active.Healthy = false
			in.Active.Answered = ago(1500 * time.Millisecond)
		}), Action{}},
		{"standby: the holder answers as a standby (it stepped down)", standby(func(in *Inputs) { in.Active.Standby = true }), Action{Kind: TakeOver, Reason: ReasonActiveGone}},
		{"standby: an old answer as a standby does not count", standby(func(in *Inputs) {
			in.Active.Standby = true
			in.Active.Answered = ago(1500 * time.Millisecond)
		}), Action{}},
		{"standby: active handing over", standby(func(in *Inputs) { in.Active.HandingOver = true }), Action{Kind: TakeOver, Reason: ReasonHandedOver}},
		{"standby: Lease handed to it", standby(func(in *Inputs) {
			in.Lease.Holder = "b"
			in.SteppedDown = ago(time.Hour)
		}), Action{Kind: TakeOver, Reason: ReasonHandedOver}},
		{"standby: agent restarted in the active pod", standby(func(in *Inputs) { in.Lease.Holder = "b" }), Action{Kind: TakeOver, Reason: ReasonResumed}},
		{"standby: stepped down just now, Lease still names it", standby(func(in *Inputs) {
			in.Lease.Holder = "b"
			in.Lease.Observed = ago(3 * time.Second)
			in.SteppedDown = ago(time.Second)
		}), Action{}},
		{"standby: stepped down, nobody took the Lease", standby(func(in *Inputs) {
			in.Lease.Holder = "b"
			in.Lease.Observed = ago(6 * time.Second)
			in.SteppedDown = ago(5 * time.Second)
		}), Action{Kind: TakeOver, Reason: ReasonActiveGone}},
		// The standby itself was frozen: what it saw before says nothing about the pause.
		{"standby: thawed, heartbeat gap", standby(func(in *Inputs) {
			in.Jumped = true
			in.Lease.Observed = ago(10 * time.Second)
			in.Active.Answered = ago(10 * time.Second)
		}), Action{}},
		{"standby: thawed 0.5 s ago, old observations count from the thaw", standby(func(in *Inputs) {
			in.Resumed = ago(500 * time.Millisecond)
			in.Lease.Observed = ago(10 * time.Second)
			in.Active.Answered = ago(10 * time.Second)
		}), Action{}},
		{"standby: thawed 2.5 s ago, active still silent", standby(func(in *Inputs) {
			in.Resumed = ago(2500 * time.Millisecond)
			in.Lease.Observed = ago(10 * time.Second)
			in.Active.Answered = ago(10 * time.Second)
		}), Action{Kind: TakeOver, Reason: ReasonActiveGone}},

		{"active: renewing, standby probing", active(nil), Action{}},
		{"active: API outage, standby probing", active(apiDown), Action{}},
		{"active: API outage, no standby known", active(func(in *Inputs) { apiDown(in); in.Heard = nil }), Action{}},
		{"active: standby silent, API fine", active(func(in *Inputs) { in.Heard["b"] = ago(time.Minute) }), Action{}},
		{"active: cut off from API and standby", active(func(in *Inputs) { apiDown(in); in.Heard["b"] = ago(3 * time.Second) }), Action{Kind: StepDown, Reason: StepDownIsolated}},
		{"active: cut off for 1.5 s only", active(func(in *Inputs) {
			in.APIContact = ago(1500 * time.Millisecond)
			in.Heard["b"] = ago(1500 * time.Millisecond)
		}), Action{}},
		{"active: probes from a non-member do not count", active(func(in *Inputs) {
			apiDown(in)
			in.Heard = map[string]time.Time{"c": ago(100 * time.Millisecond), "b": ago(3 * time.Second)}
		}), Action{Kind: StepDown, Reason: StepDownIsolated}},
		{"active: another holder", active(func(in *Inputs) { in.Lease.Holder = "b" }), Action{Kind: StepDown, Reason: StepDownOtherHolder}},
		{"active: another holder, even while unhealthy", active(func(in *Inputs) { in.Lease.Holder = "b"; in.Healthy = false }), Action{Kind: StepDown, Reason: StepDownOtherHolder}},
		{"active: own dataplane unhealthy stays (the standby takes over)", active(func(in *Inputs) { in.Healthy = false }), Action{}},
		{"active: thawed after a freeze", active(func(in *Inputs) { in.Jumped = true }), Action{Kind: StepDown, Reason: StepDownTimeJumped}},
		{"active: stopping with a ready standby", active(func(in *Inputs) { in.Stopping = true }), Action{Kind: HandOver, Reason: ReasonHandedOver, To: "b"}},
		{"active: stopping, standby silent", active(func(in *Inputs) { in.Stopping = true; in.Heard["b"] = ago(2 * time.Second) }), Action{}},
		{"active: stopping, no standby", active(func(in *Inputs) { in.Stopping = true; in.Heard = nil }), Action{}},
		{"active: stopping, hands over to the standby heard last", active(func(in *Inputs) {
			in.Stopping = true
			in.Lease.Members = map[string]string{"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.0.0.3"}
			in.Heard["c"] = ago(50 * time.Millisecond)
		}), Action{Kind: HandOver, Reason: ReasonHandedOver, To: "c"}},
		{"active: stopping, Lease already another's", active(func(in *Inputs) { in.Stopping = true; in.Lease.Holder = "b" }), Action{Kind: StepDown, Reason: StepDownOtherHolder}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.in); got != tc.want {
				t.Errorf("Decide = %+v (%s), want %+v (%s)", got, got.Kind, tc.want, tc.want.Kind)
			}
		})
	}
}

// Both sides of the same situations: an outage of the API alone moves nothing; a node cut
// off from everything loses the role on both sides.
func TestDecidePairs(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	members := map[string]string{"a": "10.0.0.1", "b": "10.0.0.2"}
	for _, tc := range []struct {
		name                  string
		apiA, apiB            time.Duration // age of each side's last API contact
		observedA, observedB  time.Duration // age of each side's last Lease change seen
		probesOK              bool
		wantActive, wantStand Kind
	}{
		{"healthy", 0, 0, 0, 0, true, Stay, Stay},
		{"API outage for both", 30 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second, true, Stay, Stay},
		{"API outage for the active only", 30 * time.Second, 0, 30 * time.Second, 30 * time.Second, true, Stay, Stay},
		{"active cut off from everything", 30 * time.Second, 0, 30 * time.Second, 30 * time.Second, false, StepDown, TakeOver},
		{"pods cannot reach each other, API fine", 0, 0, 0, 0, false, Stay, Stay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			heard, answered := ago(100*time.Millisecond), ago(100*time.Millisecond)
			if !tc.probesOK {
				heard, answered = ago(30*time.Second), ago(30*time.Second)
			}
			a := Decide(Inputs{Self: "a", Role: Active, Now: now, Healthy: true, APIContact: ago(tc.apiA),
				Lease: LeaseView{Known: true, Holder: "a", Observed: ago(tc.observedA), Members: members},
				Heard: map[string]time.Time{"b": heard}})
			b := Decide(Inputs{Self: "b", Role: Standby, Now: now, Healthy: true, APIContact: ago(tc.apiB),
				Lease:  LeaseView{Known: true, Holder: "a", Observed: ago(tc.observedB), Members: members},
				Active: Probe{Answered: answered, Identity: "a", Healthy: true}})
			if a.Kind != tc.wantActive || b.Kind != tc.wantStand {
				t.Errorf("active %s (%s), standby %s (%s); want %s, %s", a.Kind, a.Reason, b.Kind, b.Reason, tc.wantActive, tc.wantStand)
			}
		})
	}
}

// The active drops the members that have not probed it for a minute of its being active
// (pods a rollout replaced); itself and a standby that probes stay.
func TestPruneMembers(t *testing.T) {
	now := time.Now()
	e := &Elector{Identity: "a", activeSince: now.Add(-2 * time.Minute),
		heard: map[string]time.Time{"b": now.Add(-10 * time.Second), "d": now.Add(-90 * time.Second)}}
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationMembers: `{"a":"10.0.0.1","b":"10.0.0.2","c":"10.0.0.3","d":"10.0.0.4"}`}}}
	e.prune(l)
	if got := l.Annotations[AnnotationMembers]; got != `{"a":"10.0.0.1","b":"10.0.0.2"}` {
		t.Errorf("members after pruning: %s", got)
	}
	// Active for less than a minute: nobody is dropped yet.
	e.activeSince = now.Add(-30 * time.Second)
	l.Annotations[AnnotationMembers] = `{"a":"10.0.0.1","c":"10.0.0.3"}`
	e.prune(l)
	if got := l.Annotations[AnnotationMembers]; got != `{"a":"10.0.0.1","c":"10.0.0.3"}` {
		t.Errorf("members pruned too early: %s", got)
	}
}
