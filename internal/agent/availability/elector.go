package availability

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Lease annotations (written by the agents).
const (
	// AnnotationMembers: JSON {"<pod name>": "<pod IP>", ...}, each agent adding itself, so
	// the standby knows where to probe the active and the active which address its standby
	// probes from.
	AnnotationMembers = "vpn.bnerd.net/members"
	// AnnotationLastTakeover: JSON Takeover, written by the pod that took over (or, for a
	// handover, by the pod that handed over).
	AnnotationLastTakeover = "vpn.bnerd.net/last-takeover"
)

// ReasonTookOver is the Event reason of a takeover (type Normal, on the gateway).
const ReasonTookOver = "TookOver"

// Takeover is the last-takeover annotation's value. Names and times only.
type Takeover struct {
	Time         string `json:"time"`
	From         string `json:"from"`
	To           string `json:"to"`
	Reason       string `json:"reason"`
	OutageMillis int64  `json:"outageMillis"`
}

// Status is what GET /availability answers (JSON).
type Status struct {
	Identity    string `json:"identity"`
	Role        Role   `json:"role"`
	Healthy     bool   `json:"healthy"`
	HandingOver bool   `json:"handingOver"`
	// Heard is the member the answering pod took the request for (by its address in the
	// members annotation); empty when it knows no member at that address yet.
	Heard string `json:"heard,omitempty"`
}

// TakeOverer is a dataplane driver that can re-establish its tunnels at once when its pod
// becomes active (agent drivers implement it optionally).
type TakeOverer interface {
	TakeOver(ctx context.Context) error
}

// StepDowner is a dataplane driver that ends its tunnels when its pod becomes standby, while
// the fence is in place (so nothing reaches the sites).
type StepDowner interface {
	StepDown(ctx context.Context) error
}

// FenceControl is the fence as the Elector uses it (Fence).
type FenceControl interface {
	Install(ctx context.Context, wgPort uint16) error
	Follow(ctx context.Context, wgPort uint16) error
	Remove(ctx context.Context) error
}

// EventRecorder records an Event on the gateway (status.Events).
type EventRecorder interface {
	GatewayEvent(namespace, name, eventType, reason, message string)
}

// Elector runs one pod's side of the pair; see the package comment. Set the fields, call
// Start (the first role, before the dataplane is configured), then Run; after Run returned,
// Shutdown hands over when this pod is active and its standby ready.
type Elector struct {
	// Leases is the coordination/v1 client of the gateway's namespace.
	Leases coordinationclient.LeasesGetter
	// Namespace and Lease name the Lease; Gateway is the gateway's name (Events).
	Namespace, Lease, Gateway string
	// Identity is this pod's name, Address its IP (the members annotation; the probes' source).
	Identity, Address string
	// ProbePort is the metrics port the agents serve /availability on.
	ProbePort int
	// Fence is the standby's fence.
	Fence FenceControl
	// Announcer, when set, moves the gateway's address with the role (a host-network
	// gateway's VIP): claimed on becoming active, released on becoming standby.
	Announcer Announcer
	// Dataplane returns the driver (nil before the first configuration); its TakeOver and
	// StepDown run when implemented.
	Dataplane func() any
	// Healthy reports whether this pod's dataplane answers (charon's VICI, the WireGuard
	// device); nil: always.
	Healthy func(ctx context.Context) bool
	// Events may be nil.
	Events EventRecorder
	Log    logr.Logger
	Timing Timing
	// RenewEvery (500 ms): the active renews the Lease, the standby reads it, this often.
	RenewEvery time.Duration
	// ProbeEvery (200 ms) and ProbeTimeout (300 ms): the standby's probes of the active.
	ProbeEvery, ProbeTimeout time.Duration
	// TickEvery (100 ms): decisions and the heartbeat that finds freezes.
	TickEvery time.Duration
	// HealthEvery (500 ms): the own dataplane's check; two failures in a row make it unhealthy.
	HealthEvery time.Duration
	// AnnounceEvery (1 s): the active checks that it holds the gateway's address (an
	// Announcer that is a Holder).
	AnnounceEvery time.Duration
	// RequestTimeout (1 s) bounds each API request.
	RequestTimeout time.Duration
	// StartGrace (15 s): an agent restarted in the active pod reports its dataplane healthy
	// until the first check succeeds or this long after Start — its charon or device runs on,
	// only the agent is loading its configuration — so the standby does not take over.
	StartGrace time.Duration

	client *http.Client
	// announceMu orders the Announcer's claims and releases with the role they follow.
	announceMu sync.Mutex

	mu          sync.Mutex
	role        Role
	lease       *coordinationv1.Lease
	view        LeaseView
	renewSeen   string // holder and renewTime last seen, to tell a change
	apiContact  time.Time
	probe       Probe
	lastHealthy time.Time // the last probe answer that said healthy
	recognized  time.Time // the last probe answer that named this pod as the member it heard
	heard       map[string]time.Time
	healthy     bool
	failures    int
	handingOver bool
	activeSince time.Time
	graceUntil  time.Time
	steppedDown time.Time
	jumped      bool
	resumed     time.Time
	wgPort      uint16
	takeovers   map[string]uint64
}

func (e *Elector) defaults() {
	e.Timing = e.Timing.WithDefaults()
	if e.RenewEvery <= 0 {
		e.RenewEvery = 500 * time.Millisecond
	}
	if e.ProbeEvery <= 0 {
		e.ProbeEvery = 200 * time.Millisecond
	}
	if e.ProbeTimeout <= 0 {
		e.ProbeTimeout = 300 * time.Millisecond
	}
	if e.TickEvery <= 0 {
		e.TickEvery = 100 * time.Millisecond
	}
	if e.HealthEvery <= 0 {
		e.HealthEvery = 500 * time.Millisecond
	}
	if e.RequestTimeout <= 0 {
		e.RequestTimeout = time.Second
	}
	if e.AnnounceEvery <= 0 {
		e.AnnounceEvery = time.Second
	}
	if e.StartGrace <= 0 {
		e.StartGrace = 15 * time.Second
	}
	if e.client == nil {
		dialer := &net.Dialer{Timeout: e.ProbeTimeout}
		// The probes leave from the pod's own address: the one the active checks them against.
		if ip := net.ParseIP(e.Address); ip != nil {
			dialer.LocalAddr = &net.TCPAddr{IP: ip}
		}
		e.client = &http.Client{Timeout: e.ProbeTimeout, Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 1}}
	}
	if e.heard == nil {
		e.heard = map[string]time.Time{}
	}
	if e.takeovers == nil {
		e.takeovers = map[string]uint64{}
	}
}

// Start takes the first role before the dataplane is configured: active when the Lease
// already names this pod (the agent restarted in the active pod), else standby, fenced — also
// when the Lease cannot be read (the decisions take over from there).
func (e *Elector) Start(ctx context.Context) error {
	e.mu.Lock()
	e.defaults()
	e.healthy = e.Healthy == nil
	e.mu.Unlock()
	e.readLease(ctx)
	e.mu.Lock()
	holder, known := e.view.Holder, e.view.Known
	wgPort := e.wgPort
	switch {
	case known && holder == e.Identity:
		e.role, e.activeSince = Active, time.Now()
		e.healthy, e.graceUntil = true, time.Now().Add(e.StartGrace)
	case known:
		// Standby as of now: a Lease naming this pod later was handed to it.
		e.role, e.steppedDown = Standby, time.Now()
	default:
		e.role = Standby
	}
	role := e.role
	e.mu.Unlock()
	e.Log.Info("availability: first role", "role", role, "holder", holder, "leaseRead", known)
	if role == Active {
		if err := e.Fence.Remove(ctx); err != nil {
			return err
		}
		return e.claim(ctx)
	}
	if err := e.release(ctx); err != nil {
		return err
	}
	return e.Fence.Install(ctx, wgPort)
}

// Holder is an Announcer that can tell whether it holds the address (VIP.Held): the active
// checks it every AnnounceEvery and claims the address again when it is gone (a claim that
// failed, an address someone else removed from the node).
type Holder interface {
	Held() (bool, error)
}

// announceLoop keeps the active's address claimed (see Holder).
func (e *Elector) announceLoop(ctx context.Context) {
	h := e.Announcer.(Holder)
	every(ctx, e.AnnounceEvery, func() {
		if ctx.Err() != nil || !e.IsActive() {
			return
		}
		// Under announceMu a step-down's release cannot come between the check and the claim.
		e.announceMu.Lock()
		defer e.announceMu.Unlock()
		e.mu.Lock()
		active := e.role == Active && !e.handingOver
		e.mu.Unlock()
		if !active {
			return
		}
		if held, err := h.Held(); err != nil || held {
			return
		}
		e.Log.Info("availability: active without the gateway's address; claiming it again")
		if err := e.Announcer.Claim(ctx); err != nil {
			e.Log.Error(err, "availability: claiming the gateway's address again")
		}
	})
}

// claim and release run the Announcer's hooks, when there is one, one at a time.
func (e *Elector) claim(ctx context.Context) error {
	if e.Announcer == nil {
		return nil
	}
	e.announceMu.Lock()
	defer e.announceMu.Unlock()
	return e.Announcer.Claim(ctx)
}

func (e *Elector) release(ctx context.Context) error {
	if e.Announcer == nil {
		return nil
	}
	e.announceMu.Lock()
	defer e.announceMu.Unlock()
	return e.Announcer.Release(ctx)
}

// ReleaseAddress gives the gateway's address up when the pod goes (agent.Engine's OnTearDown,
// once its tunnels are gone): an active pod that had no standby to hand over to — the gateway
// deleted, its last pod stopped — leaves no VIP on its node. Nothing without an Announcer.
func (e *Elector) ReleaseAddress(ctx context.Context) error {
	return e.release(ctx)
}

// Prepare follows the gateway's model before the driver applies it (agent.Engine's
// BeforeDriver): the fence drops the model's WireGuard listen port.
func (e *Elector) Prepare(ctx context.Context, m *model.Gateway) error {
	var port uint16
	if m != nil && m.Protocol == model.ProtocolWireGuard && m.WireGuard != nil {
		port = m.WireGuard.ListenPort
	}
	e.mu.Lock()
	e.wgPort = port
	e.mu.Unlock()
	return e.Fence.Follow(ctx, port)
}

// Run keeps the Lease, the probes, the own health and the decisions going until ctx ends.
func (e *Elector) Run(ctx context.Context) error {
	e.mu.Lock()
	e.defaults()
	e.mu.Unlock()
	var wg sync.WaitGroup
	loops := []func(context.Context){e.heartbeat, e.leaseLoop, e.probeLoop, e.healthLoop, e.decideLoop}
	if _, ok := e.Announcer.(Holder); ok {
		loops = append(loops, e.announceLoop)
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			loop(ctx)
		}()
	}
	wg.Wait()
	return nil
}

func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// heartbeat finds the times the agent did not run (its process or node frozen): a gap
// between two beats longer than Timing.JumpThreshold, on the monotonic or the wall clock.
func (e *Elector) heartbeat(ctx context.Context) {
	last := time.Now()
	every(ctx, e.TickEvery, func() {
		now := time.Now()
		gap := max(now.Sub(last), now.Round(0).Sub(last.Round(0)))
		last = now
		if gap > e.Timing.JumpThreshold {
			e.mu.Lock()
			e.jumped, e.resumed = true, now
			e.mu.Unlock()
			e.Log.Info("availability: the agent did not run for a while", "gap", gap.String())
		}
	})
}

func (e *Elector) leaseLoop(ctx context.Context) {
	every(ctx, e.RenewEvery, func() {
		e.mu.Lock()
		renew := e.role == Active && !e.handingOver && (e.view.Holder == e.Identity || e.view.Holder == "")
		e.mu.Unlock()
		if renew {
			e.renew(ctx)
		} else {
			e.readLease(ctx)
		}
	})
}

// readLease reads the Lease and adds this pod to its members when it is missing.
func (e *Elector) readLease(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, e.RequestTimeout)
	defer cancel()
	l, err := e.Leases.Leases(e.Namespace).Get(rctx, e.Lease, metav1.GetOptions{})
	if err != nil {
		e.logAPI(ctx, "reading the Lease", err)
		return
	}
	e.observe(l)
	if next, changed := e.withMember(l); changed {
		if l, err = e.Leases.Leases(e.Namespace).Update(rctx, next, metav1.UpdateOptions{}); err != nil {
			e.logAPI(ctx, "adding this pod to the Lease's members", err)
			return
		}
		e.observe(l)
	}
}

// renew writes the Lease naming this pod with a new renew time (CAS on resourceVersion).
func (e *Elector) renew(ctx context.Context) {
	e.mu.Lock()
	l := e.lease
	e.mu.Unlock()
	if l == nil {
		e.readLease(ctx)
		return
	}
	next, _ := e.withMember(l)
	e.prune(next)
	now := metav1.NewMicroTime(time.Now())
	next.Spec.HolderIdentity = &e.Identity
	next.Spec.RenewTime = &now
	if next.Spec.LeaseDurationSeconds == nil {
		d := int32(e.Timing.LeaseDuration / time.Second)
		next.Spec.LeaseDurationSeconds = &d
	}
	rctx, cancel := context.WithTimeout(ctx, e.RequestTimeout)
	defer cancel()
	got, err := e.Leases.Leases(e.Namespace).Update(rctx, next, metav1.UpdateOptions{})
	if err != nil {
		e.logAPI(ctx, "renewing the Lease", err)
		if apierrors.IsConflict(err) {
			// Changed meanwhile (a member added, or another holder): read it; the next
			// decision sees who holds it.
			e.readLease(ctx)
		}
		return
	}
	e.observe(got)
}

func (e *Elector) logAPI(ctx context.Context, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	e.Log.V(1).Info("availability: "+what+" failed", "error", err.Error())
}

// observe records a Lease read or written.
func (e *Elector) observe(l *coordinationv1.Lease) {
	now := time.Now()
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	seen := holder + "|"
	if l.Spec.RenewTime != nil {
		seen += l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
	}
	members := map[string]string{}
	if raw := l.Annotations[AnnotationMembers]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &members)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lease = l.DeepCopy()
	e.apiContact = now
	if seen != e.renewSeen || !e.view.Known {
		e.renewSeen = seen
		e.view.Observed = now
	}
	e.view.Known, e.view.Holder, e.view.Members = true, holder, members
}

// withMember is l with this pod in its members annotation (and no other member at its
// address: a pod that went before this one had it), and whether that changed anything.
func (e *Elector) withMember(l *coordinationv1.Lease) (*coordinationv1.Lease, bool) {
	next := l.DeepCopy()
	members := map[string]string{}
	if raw := l.Annotations[AnnotationMembers]; raw != "" {
		_ = json.Unmarshal([]byte(raw), &members)
	}
	changed := members[e.Identity] != e.Address
	for name, addr := range members {
		if name != e.Identity && addr == e.Address {
			delete(members, name)
			changed = true
		}
	}
	if !changed {
		return next, false
	}
	members[e.Identity] = e.Address
	raw, _ := json.Marshal(members)
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[AnnotationMembers] = string(raw)
	return next, true
}

// memberGone is how long the active keeps a member that has not probed it (a pod that went:
// each rollout names new pods).
const memberGone = time.Minute

// prune drops from l's members those that have not probed this active pod for memberGone
// while it was active; a pod that is still there adds itself again at its next read.
func (e *Elector) prune(l *coordinationv1.Lease) {
	members := map[string]string{}
	if raw := l.Annotations[AnnotationMembers]; raw == "" || json.Unmarshal([]byte(raw), &members) != nil {
		return
	}
	now := time.Now()
	e.mu.Lock()
	changed := false
	for name := range members {
		if name == e.Identity {
			continue
		}
		last := e.heard[name]
		if last.Before(e.activeSince) {
			last = e.activeSince
		}
		if !e.activeSince.IsZero() && now.Sub(last) > memberGone {
			delete(members, name)
			changed = true
		}
	}
	e.mu.Unlock()
	if changed {
		raw, _ := json.Marshal(members)
		l.Annotations[AnnotationMembers] = string(raw)
	}
}

// probeLoop: the standby probes the holder at the address the members annotation gives.
func (e *Elector) probeLoop(ctx context.Context) {
	every(ctx, e.ProbeEvery, func() {
		e.mu.Lock()
		holder := e.view.Holder
		addr := e.view.Members[holder]
		probing := e.role == Standby && holder != "" && holder != e.Identity && addr != ""
		e.mu.Unlock()
		if !probing {
			return
		}
		st, err := e.probeOnce(ctx, addr)
		if err != nil || st.Identity != holder {
			return
		}
		now := time.Now()
		e.mu.Lock()
		e.probe = Probe{Answered: now, Identity: st.Identity, Healthy: st.Healthy, HandingOver: st.HandingOver, Standby: st.Role == Standby}
		if st.Healthy {
			e.lastHealthy = now
		}
		if st.Heard == e.Identity {
			e.recognized = now
		}
		e.mu.Unlock()
	})
}

func (e *Elector) probeOnce(ctx context.Context, addr string) (Status, error) {
	ctx, cancel := context.WithTimeout(ctx, e.ProbeTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(addr, strconv.Itoa(e.ProbePort)) + "/availability"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return Status{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var st Status
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// ServeHTTP answers GET /availability, and records the probe when it comes from another
// member's address (the members annotation): the active's sign that its standby is there. A
// probe with ?leaving=1 is the member's last: it is forgotten instead.
func (e *Elector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	now := time.Now()
	e.mu.Lock()
	if e.heard == nil {
		e.heard = map[string]time.Time{}
	}
	heard := ""
	leaving := r.URL.Query().Get(leavingParam) != ""
	for name, addr := range e.view.Members {
		if name != e.Identity && addr == host {
			e.heard[name], heard = now, name
			if leaving {
				// a standby that goes is no standby to hand over to, nor one to fear
				delete(e.heard, name)
				e.Log.Info("availability: the standby leaves", "standby", name)
			}
		}
	}
	st := Status{Identity: e.Identity, Role: e.role, Healthy: e.healthy, HandingOver: e.handingOver, Heard: heard}
	e.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

func (e *Elector) healthLoop(ctx context.Context) {
	if e.Healthy == nil {
		return
	}
	every(ctx, e.HealthEvery, func() {
		hctx, cancel := context.WithTimeout(ctx, e.HealthEvery*4/5)
		ok := e.Healthy(hctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if ok {
			if !e.healthy {
				e.Log.Info("availability: the dataplane answers")
			}
			e.failures, e.healthy, e.graceUntil = 0, true, time.Time{}
			return
		}
		if time.Now().Before(e.graceUntil) {
			return
		}
		e.failures++
		if e.failures >= 2 && e.healthy {
			e.healthy = false
			e.Log.Info("availability: the dataplane does not answer")
		}
	})
}

// inputs are the decision's inputs now; a jump is consumed.
func (e *Elector) inputs(stopping bool) Inputs {
	e.mu.Lock()
	defer e.mu.Unlock()
	heard := make(map[string]time.Time, len(e.heard))
	for k, v := range e.heard {
		heard[k] = v
	}
	in := Inputs{Self: e.Identity, Role: e.role, Now: time.Now(), Lease: e.view, APIContact: e.apiContact,
		Active: e.probe, Heard: heard, Healthy: e.healthy, Stopping: stopping, Jumped: e.jumped,
		Resumed: e.resumed, SteppedDown: e.steppedDown, Timing: e.Timing}
	e.jumped = false
	return in
}

func (e *Elector) decideLoop(ctx context.Context) {
	every(ctx, e.TickEvery, func() {
		if ctx.Err() != nil {
			return
		}
		in := e.inputs(false)
		e.act(ctx, in, Decide(in))
	})
}

func (e *Elector) act(ctx context.Context, in Inputs, a Action) {
	switch a.Kind {
	case TakeOver:
		e.takeOver(ctx, in, a.Reason)
	case StepDown:
		e.stepDown(ctx, a.Reason)
	case HandOver:
		e.handOver(ctx, a.To)
	}
}

// takeOver makes this pod active: the Lease written naming it (unless it already does), the
// fence dropped, the tunnels re-established.
func (e *Elector) takeOver(ctx context.Context, in Inputs, reason string) {
	from := in.Lease.Holder
	if from != e.Identity {
		e.mu.Lock()
		l := e.lease
		outage := int64(0)
		if reason == ReasonActiveGone || reason == ReasonActiveUnhealthy {
			since := e.lastHealthy
			if since.IsZero() || in.Lease.Observed.After(since) && reason == ReasonActiveGone {
				since = in.Lease.Observed
			}
			outage = in.Now.Sub(since).Milliseconds()
		}
		e.mu.Unlock()
		if l == nil {
			return
		}
		t := Takeover{Time: in.Now.UTC().Format(time.RFC3339Nano), From: from, To: e.Identity, Reason: reason, OutageMillis: outage}
		got, err := e.write(ctx, l, e.Identity, t)
		if err != nil {
			e.logAPI(ctx, "taking over the Lease", err)
			if apierrors.IsConflict(err) {
				e.readLease(ctx)
			}
			return
		}
		e.observe(got)
	}
	e.mu.Lock()
	e.role, e.activeSince = Active, time.Now()
	e.probe = Probe{}
	if reason != ReasonResumed {
		e.takeovers[reason]++
	}
	e.mu.Unlock()
	if err := e.Fence.Remove(ctx); err != nil {
		e.Log.Error(err, "availability: active, but the fence stays")
	}
	if err := e.claim(ctx); err != nil {
		e.Log.Error(err, "availability: active, but the gateway's address is not claimed")
	}
	if from == e.Identity && reason == ReasonHandedOver {
		from = e.handedOverBy()
	}
	e.Log.Info("availability: active", "reason", reason, "from", from)
	if reason == ReasonResumed {
		return
	}
	if d, ok := e.dataplane().(TakeOverer); ok {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.TakeOver(tctx); err != nil {
			e.Log.Error(err, "availability: re-establishing the tunnels after taking over")
		}
		cancel()
	}
	if e.Events != nil {
		e.Events.GatewayEvent(e.Namespace, e.Gateway, corev1.EventTypeNormal, ReasonTookOver,
			fmt.Sprintf("Pod %s took over from %s (%s)", e.Identity, nameOrNone(from), reason))
	}
}

// handedOverBy is the pod that handed the Lease to this one (its last-takeover annotation), ""
// when unknown.
func (e *Elector) handedOverBy() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var t Takeover
	if e.lease == nil || json.Unmarshal([]byte(e.lease.Annotations[AnnotationLastTakeover]), &t) != nil || t.To != e.Identity {
		return ""
	}
	return t.From
}

func nameOrNone(s string) string {
	if s == "" {
		return "no active pod"
	}
	return s
}

// write updates l (CAS on its resourceVersion) naming holder, with a new renew and acquire
// time, one more transition and the last-takeover annotation.
func (e *Elector) write(ctx context.Context, l *coordinationv1.Lease, holder string, t Takeover) (*coordinationv1.Lease, error) {
	next, _ := e.withMember(l)
	now := metav1.NewMicroTime(time.Now())
	next.Spec.HolderIdentity = &holder
	next.Spec.RenewTime, next.Spec.AcquireTime = &now, &now
	d := int32(e.Timing.LeaseDuration / time.Second)
	next.Spec.LeaseDurationSeconds = &d
	n := int32(1)
	if next.Spec.LeaseTransitions != nil {
		n = *next.Spec.LeaseTransitions + 1
	}
	next.Spec.LeaseTransitions = &n
	raw, _ := json.Marshal(t)
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[AnnotationLastTakeover] = string(raw)
	rctx, cancel := context.WithTimeout(ctx, e.RequestTimeout)
	defer cancel()
	return e.Leases.Leases(e.Namespace).Update(rctx, next, metav1.UpdateOptions{})
}

// stepDown makes this pod standby: fenced first, then its tunnels ended behind the fence.
func (e *Elector) stepDown(ctx context.Context, reason string) {
	e.mu.Lock()
	e.role = Standby
	e.steppedDown = time.Now()
	e.probe = Probe{}
	wgPort := e.wgPort
	e.mu.Unlock()
	e.Log.Info("availability: standby", "reason", reason)
	// The address goes first: from then on the sites' packets reach the other node.
	if err := e.release(ctx); err != nil {
		e.Log.Error(err, "availability: standby, but the gateway's address is still held")
	}
	if err := e.Fence.Install(ctx, wgPort); err != nil {
		// Without the fence, ending the SAs would send DELETEs to the sites.
		e.Log.Error(err, "availability: standby, but not fenced; the tunnels are left alone")
		return
	}
	if d, ok := e.dataplane().(StepDowner); ok {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := d.StepDown(sctx); err != nil {
			e.Log.Error(err, "availability: ending the tunnels after stepping down")
		}
		cancel()
	}
}

// handOver writes the Lease naming to, then steps down.
func (e *Elector) handOver(ctx context.Context, to string) {
	e.mu.Lock()
	e.handingOver = true
	l := e.lease
	e.mu.Unlock()
	if l != nil {
		t := Takeover{Time: time.Now().UTC().Format(time.RFC3339Nano), From: e.Identity, To: to, Reason: ReasonHandedOver}
		got, err := e.write(ctx, l, to, t)
		if err != nil && apierrors.IsConflict(err) {
			e.readLease(ctx)
			e.mu.Lock()
			l = e.lease
			e.mu.Unlock()
			got, err = e.write(ctx, l, to, t)
		}
		if err != nil {
			// The standby takes over anyway: its probes see handingOver.
			e.Log.Error(err, "availability: writing the Lease naming the standby", "standby", to)
		} else {
			e.observe(got)
			e.Log.Info("availability: handed over", "to", to)
		}
	}
	e.stepDown(ctx, "HandingOver")
}

// Shutdown is the stopping agent's last decision (after Run returned): an active pod with a
// ready standby hands over and is fenced; a standby tells the active it leaves. ctx bounds it.
func (e *Elector) Shutdown(ctx context.Context) {
	in := e.inputs(true)
	in.Jumped = false
	if in.Role == Standby {
		e.leave(ctx)
		return
	}
	a := Decide(in)
	if a.Kind == HandOver {
		e.handOver(ctx, a.To)
		// The standby probes a little longer: it sees handingOver until the Lease names it.
		e.waitHandedOver(ctx, a.To)
	}
}

// leave tells the active that this standby goes (a probe with ?leaving=1): the active forgets
// it at once, so that a standby replaced in a rollout or drained away is not taken for one cut
// off with the active, and an API blip meanwhile does not make the active step down as
// isolated, leaving no pod active. Best effort, one request.
func (e *Elector) leave(ctx context.Context) {
	e.mu.Lock()
	holder := e.view.Holder
	addr := e.view.Members[holder]
	e.mu.Unlock()
	if holder == "" || holder == e.Identity || addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.ProbeTimeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(addr, strconv.Itoa(e.ProbePort)) + "/availability?" + leavingParam + "=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.Log.Info("availability: could not tell the active this standby leaves", "active", holder, "error", err.Error())
		return
	}
	_ = resp.Body.Close()
	e.Log.Info("availability: told the active this standby leaves", "active", holder)
}

// leavingParam marks a standby's last request to the active (leave).
const leavingParam = "leaving"

// waitHandedOver waits until the Lease read names to (or ctx ends; at most 2 s).
func (e *Elector) waitHandedOver(ctx context.Context, to string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		e.mu.Lock()
		done := e.view.Holder == to
		e.mu.Unlock()
		if done {
			return
		}
		e.readLease(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *Elector) dataplane() any {
	if e.Dataplane == nil {
		return nil
	}
	return e.Dataplane()
}

// Role is this pod's role now.
func (e *Elector) Role() Role {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.role
}

// IsActive reports whether this pod is active.
func (e *Elector) IsActive() bool { return e.Role() == Active }

// Standby reports whether this pod is not active (standby or not decided yet): it does not
// report tunnel state.
func (e *Elector) Standby() bool { return !e.IsActive() }

// Joined reports whether this pod can do its part of the pair: the active always; a standby
// once the active answered its probe within Timing.ProbeGrace and took it for this pod (the
// active knows where its standby is, so a stopping active hands over to it). A gateway pod's
// readiness includes it: a rollout replaces the active only after the new standby joined.
func (e *Elector) Joined() bool {
	in := e.inputsNoJump()
	if in.Role == Active {
		return true
	}
	e.mu.Lock()
	recognized := e.recognized
	e.mu.Unlock()
	return !recognized.IsZero() && in.Now.Sub(recognized) <= in.Timing.ProbeGrace
}

// StandbyReady reports whether this pod is active and a standby probed it within
// Timing.ProbeGrace.
func (e *Elector) StandbyReady() bool {
	in := e.inputsNoJump()
	if in.Role != Active {
		return false
	}
	who, at := lastHeard(&in)
	return who != "" && in.Now.Sub(at) <= in.Timing.ProbeGrace
}

func (e *Elector) inputsNoJump() Inputs {
	e.mu.Lock()
	defer e.mu.Unlock()
	heard := make(map[string]time.Time, len(e.heard))
	for k, v := range e.heard {
		heard[k] = v
	}
	return Inputs{Self: e.Identity, Role: e.role, Now: time.Now(), Lease: e.view, Heard: heard, Timing: e.Timing.WithDefaults()}
}

// Takeovers is how many times this pod took over, by reason.
func (e *Elector) Takeovers() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]uint64, len(e.takeovers))
	for k, v := range e.takeovers {
		out[k] = v
	}
	return out
}

// Alive is a dataplane driver that can tell whether its daemon or device answers.
type Alive interface {
	Alive(ctx context.Context) error
}

// DataplaneHealth is an Elector's Healthy for an agent: a configuration is applied (ready)
// and the driver answers.
func DataplaneHealth(ready func() bool, driver func() any) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		if !ready() {
			return false
		}
		d, ok := driver().(Alive)
		return ok && d.Alive(ctx) == nil
	}
}
