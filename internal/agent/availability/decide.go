// Package availability runs a gateway pod's side of an active/standby pair: two pods of one
// gateway on different nodes, one of them active (carrying the tunnels), the other fully
// configured but fenced (an nftables table dropping IKE, ESP and WireGuard in and out of the
// pod) until it takes over.
//
// Who is active is a coordination.k8s.io/v1 Lease in the gateway's namespace (the operator
// creates it; the agents write it): its holder is the active pod, which renews it every
// 500 ms. The standby also probes the active directly (GET /availability on the active's
// metrics port every 200 ms), so that neither an API server outage nor a partition between
// the active and the API alone moves the tunnels: the standby takes over only when the active
// answered none of its probes for ProbeGrace and the Lease was not renewed for LeaseDuration
// (the active's node is gone or cut off), or when the active itself reports its dataplane
// unhealthy or that it is handing over. The active steps down when the Lease names another
// holder, or when it reached neither the API nor heard the standby for LeaseDuration.
//
// Decide is the whole policy, a pure function of what the agent observed; Elector does the
// I/O: the Lease, the probes, the fence, and the dataplane's TakeOver and StepDown hooks.
package availability

import (
	"time"
)

// Role is what a gateway pod does in its pair.
type Role string

const (
	// Standby: configured, fenced, not reporting tunnel state.
	Standby Role = "standby"
	// Active: carries the gateway's tunnels.
	Active Role = "active"
)

// Takeover reasons (the Lease's last-takeover annotation, the TookOver Event and
// bnerd_vpn_gateway_takeovers_total's reason label).
const (
	// ReasonInitial: the Lease had no holder.
	ReasonInitial = "Initial"
	// ReasonActiveGone: the active answered no probe and did not renew the Lease.
	ReasonActiveGone = "ActiveGone"
	// ReasonActiveUnhealthy: the active reported its dataplane (charon's VICI or the
	// WireGuard device) not answering.
	ReasonActiveUnhealthy = "ActiveUnhealthy"
	// ReasonHandedOver: the active handed the Lease over (a planned switchover: it stops).
	ReasonHandedOver = "HandedOver"
	// ReasonResumed: the agent restarted in the active pod; the pod stays active. Not a
	// takeover: the Lease's last-takeover annotation is left as it is.
	ReasonResumed = "Resumed"
)

// Step-down reasons (logs only).
const (
	// StepDownOtherHolder: the Lease names another holder.
	StepDownOtherHolder = "OtherHolder"
	// StepDownIsolated: neither the API nor the standby was reached for LeaseDuration.
	StepDownIsolated = "Isolated"
	// StepDownTimeJumped: the agent did not run for longer than JumpThreshold (its node or
	// process was frozen); the standby may have taken over meanwhile.
	StepDownTimeJumped = "TimeJumped"
)

// Kind is what to do.
type Kind int

const (
	// Stay keeps the role.
	Stay Kind = iota
	// TakeOver makes the pod active (a CAS write of the Lease naming it, unless it already
	// does), drops the fence and re-establishes the tunnels.
	TakeOver
	// StepDown makes the pod standby: fenced first, then its SAs terminated.
	StepDown
	// HandOver writes the Lease naming Action.To, then steps down (a stopping active).
	HandOver
)

func (k Kind) String() string {
	switch k {
	case TakeOver:
		return "TakeOver"
	case StepDown:
		return "StepDown"
	case HandOver:
		return "HandOver"
	default:
		return "Stay"
	}
}

// Action is Decide's answer.
type Action struct {
	Kind Kind
	// Reason: a Reason* constant for TakeOver and HandOver, a StepDown* constant for StepDown,
	// empty for Stay.
	Reason string
	// To is the pod a HandOver names.
	To string
}

// LeaseView is the Lease as this agent last read it.
type LeaseView struct {
	// Known: the Lease was read at least once.
	Known bool
	// Holder is spec.holderIdentity ("" = none).
	Holder string
	// Observed is the local time at which this agent saw spec.renewTime (or the holder)
	// change last: the Lease's age on this agent's clock, whatever the writer's clock says.
	Observed time.Time
	// Members maps pod names to pod IPs (the members annotation).
	Members map[string]string
}

// Probe is what the standby's probes of the active told.
type Probe struct {
	// Answered is the local time of the last answer (zero: never).
	Answered time.Time
	// Identity is the pod that answered last.
	Identity string
	// Healthy and HandingOver are that answer's; Standby: it said its role is standby (the
	// holder stepped down, and has not written the Lease since).
	Healthy     bool
	HandingOver bool
	Standby     bool
}

// Timing are the pair's intervals; zero values take the defaults.
type Timing struct {
	// LeaseDuration: the Lease is expired when not renewed for this long (2 s).
	LeaseDuration time.Duration
	// ProbeGrace: the active is unreachable when it answered no probe for this long (1 s).
	ProbeGrace time.Duration
	// JumpThreshold: a gap between two of the agent's heartbeats longer than this means it
	// was frozen (1 s).
	JumpThreshold time.Duration
}

// WithDefaults fills the zero values.
func (t Timing) WithDefaults() Timing {
	if t.LeaseDuration <= 0 {
		t.LeaseDuration = 2 * time.Second
	}
	if t.ProbeGrace <= 0 {
		t.ProbeGrace = time.Second
	}
	if t.JumpThreshold <= 0 {
		t.JumpThreshold = time.Second
	}
	return t
}

// Inputs are everything Decide looks at.
type Inputs struct {
	// Self is this pod's name.
	Self string
	Role Role
	Now  time.Time
	// Lease is the Lease as last read.
	Lease LeaseView
	// APIContact is the local time of the last successful request to the API server.
	APIContact time.Time
	// Active is the standby's view of the active's probe answers.
	Active Probe
	// Heard is the active's view: when each member last probed it (by pod name, accepted only
	// from the address the members annotation gives for that pod).
	Heard map[string]time.Time
	// Healthy: this pod's own dataplane answers.
	Healthy bool
	// Stopping: the agent is shutting down (SIGTERM).
	Stopping bool
	// Jumped: the agent's heartbeat found a gap longer than Timing.JumpThreshold since the
	// last decision (the process or its node was frozen).
	Jumped bool
	// Resumed is when the last such gap ended: observations older than it say nothing about
	// the time the agent did not run, and ages are counted from it.
	Resumed time.Time
	// SteppedDown is when this agent last stepped down (zero: never, in this process).
	SteppedDown time.Time
	Timing      Timing
}

// age is how long ago t was, counted from Resumed when t is older.
func (in *Inputs) age(t time.Time) time.Duration {
	if t.Before(in.Resumed) {
		t = in.Resumed
	}
	if t.IsZero() {
		return time.Duration(1<<63 - 1)
	}
	return in.Now.Sub(t)
}

// Decide is the pair's policy; see the package comment.
func Decide(in Inputs) Action {
	in.Timing = in.Timing.WithDefaults()
	if in.Role == Active {
		return decideActive(&in)
	}
	return decideStandby(&in)
}

func decideActive(in *Inputs) Action {
	t := in.Timing
	if in.Jumped {
		return Action{Kind: StepDown, Reason: StepDownTimeJumped}
	}
	if in.Lease.Known && in.Lease.Holder != "" && in.Lease.Holder != in.Self {
		return Action{Kind: StepDown, Reason: StepDownOtherHolder}
	}
	standby, heard := lastHeard(in)
	if in.Stopping {
		if standby != "" && in.age(heard) <= t.ProbeGrace {
			return Action{Kind: HandOver, Reason: ReasonHandedOver, To: standby}
		}
		return Action{}
	}
	// Cut off from everything while a standby was known: the standby takes over (the Lease
	// expires and its probes go unanswered), so this pod stops carrying the tunnels.
	if standby != "" && in.age(in.APIContact) > t.LeaseDuration && in.age(heard) > t.LeaseDuration {
		return Action{Kind: StepDown, Reason: StepDownIsolated}
	}
	return Action{}
}

// lastHeard is the member other than Self that probed this pod last, and when.
func lastHeard(in *Inputs) (string, time.Time) {
	var who string
	var at time.Time
	for name, t := range in.Heard {
		if name == in.Self {
			continue
		}
		if _, member := in.Lease.Members[name]; !member {
			continue
		}
		if who == "" || t.After(at) || t.Equal(at) && name < who {
			who, at = name, t
		}
	}
	return who, at
}

func decideStandby(in *Inputs) Action {
	t := in.Timing
	if in.Jumped || in.Stopping || !in.Healthy || !in.Lease.Known {
		return Action{}
	}
	switch in.Lease.Holder {
	case "":
		return Action{Kind: TakeOver, Reason: ReasonInitial}
	case in.Self:
		switch {
		case in.SteppedDown.IsZero():
			// The agent restarted in the active pod.
			return Action{Kind: TakeOver, Reason: ReasonResumed}
		case in.Lease.Observed.After(in.SteppedDown):
			// Written since this pod stepped down, naming it: handed over.
			return Action{Kind: TakeOver, Reason: ReasonHandedOver}
		case in.age(in.APIContact) <= t.LeaseDuration && in.age(in.Lease.Observed) > t.LeaseDuration &&
			in.age(in.SteppedDown) > 2*t.LeaseDuration:
			// This pod stepped down and nobody took the Lease since: take it again.
			return Action{Kind: TakeOver, Reason: ReasonActiveGone}
		}
		return Action{}
	}
	// Another pod holds the Lease: only what this pod saw of it after it last ran counts.
	fresh := in.Active.Identity == in.Lease.Holder && in.age(in.Active.Answered) <= t.ProbeGrace
	if fresh && in.Active.HandingOver {
		return Action{Kind: TakeOver, Reason: ReasonHandedOver}
	}
	if fresh && !in.Active.Healthy {
		return Action{Kind: TakeOver, Reason: ReasonActiveUnhealthy}
	}
	if fresh && in.Active.Standby {
		return Action{Kind: TakeOver, Reason: ReasonActiveGone}
	}
	// Without the API this pod cannot tell the Lease's age (nor write it).
	if in.age(in.APIContact) > t.LeaseDuration {
		return Action{}
	}
	if !fresh && in.age(in.Lease.Observed) > t.LeaseDuration {
		return Action{Kind: TakeOver, Reason: ReasonActiveGone}
	}
	return Action{}
}
