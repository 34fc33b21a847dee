// Package strongswan is the gateway agent's IPsec driver: it converges charon (strongSwan's
// IKE daemon) to the rendered bundle over VICI, with github.com/strongswan/govici, and reports
// each peer's tunnel state.
//
// Apply loads pre-shared keys from Secret data with load-shared (under the rendered, stable key
// id, so a reload replaces exactly that key) and loads with load-conn only the connections
// whose rendered form changed since they were last loaded; connections and keys no longer in
// the bundle are unloaded (and their SAs terminated). Unchanged connections are never touched,
// so other peers' SAs live on.
//
// Peers reads the SAs with list-sas and the driver's own event session (ike-updown,
// child-updown, ike-rekey, child-rekey and charon's log, of which only the messages that name
// an authentication or proposal failure of one connection are kept).
//
// govici v0.8.0's CallStreaming can return before every streamed event has been read, and the
// leftovers then poison the next call on that session ("unexpected response type: 7"). This
// driver never uses it: a listing is a plain Call on a fresh session that has subscribed to the
// listing's event, and which is closed afterwards (see collectOn). Commands (load-*, unload-*,
// initiate, terminate) are plain Calls on one command session.
package strongswan

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
)

// Options tune the driver. Zero values take the defaults noted.
type Options struct {
	// ConnectTimeout bounds New's wait for charon to answer on its socket (30 s). charon
	// answers about 150 ms after it starts.
	ConnectTimeout time.Duration
	// CallTimeout bounds each VICI command (10 s).
	CallTimeout time.Duration
	// ReconnectInterval is the longest wait between attempts to reach a charon that went away
	// (2 s); attempts start at 50 ms and back off.
	ReconnectInterval time.Duration
	// Log receives the driver's messages (discarded when unset). No secret value ever
	// reaches it.
	Log logr.Logger
}

func (o Options) withDefaults() Options {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 10 * time.Second
	}
	if o.ReconnectInterval <= 0 {
		o.ReconnectInterval = 2 * time.Second
	}
	return o
}

// watchedEvents are the events the driver's event session subscribes to.
var watchedEvents = []string{"ike-updown", "child-updown", "ike-rekey", "child-rekey", "log"}

// Driver drives one charon over VICI. It implements agent.Driver.
type Driver struct {
	network, addr string
	opts          Options
	log           logr.Logger
	changes       chan struct{}
	keyMAC        []byte // keys the fingerprints of loaded secrets; never leaves the process

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// applyMu serializes Apply and the re-apply after charon restarted.
	applyMu sync.Mutex

	cmdMu sync.Mutex
	cmd   *vici.Session // plain Calls only; redialled after a transport error

	mu sync.Mutex
	// What charon holds, as far as this driver loaded it: connection name -> fingerprint of
	// the rendered connection; shared key id -> fingerprint of id, owners and data.
	loadedConns map[string]string
	loadedKeys  map[string]string
	// The last applied bundle: connections in order, and the Secrets they were loaded from
	// (kept to re-apply after charon restarted).
	conns   []strongswan.Connection
	keys    []strongswan.SharedKey
	secrets agent.Secrets
	// Per connection: why it is not loaded (a missing secret, a failed load), and what the
	// events said.
	missing   map[string]string
	loadErrs  map[string]string
	runtime   map[string]*connRuntime
	eventSess *vici.Session
	// maxSeenID is the highest IKE_SA unique id any event named (they only grow while charon
	// runs).
	maxSeenID uint64
}

// connRuntime is what the events taught about one connection.
type connRuntime struct {
	// failState / failMsg: the last authentication or proposal failure, from the IKE_SA with
	// unique id failID; cleared when an IKE_SA with a unique id >= failID has a CHILD_SA
	// installed, or the connection is (re)loaded.
	failState, failMsg string
	failID             uint64
	// upID is the highest IKE_SA unique id seen with an installed CHILD_SA: failures logged
	// by older IKE_SAs arrive late and are ignored.
	upID uint64
	// staleID: failures of IKE_SAs up to this unique id are ignored (they negotiated with a
	// configuration or key that has since been replaced).
	staleID uint64
	// rekeys counts ike-rekey and child-rekey events since the driver started.
	rekeys uint64
	// childrenRefused counts CHILD_SAs terminated beyond the peer's limit (childLimit).
	childrenRefused uint64
	// establishedAt by IKE_SA unique id, so the reported time is stable across listings
	// (charon reports whole seconds since), and carried over to the new IKE_SA on a rekey.
	establishedAt map[uint64]time.Time
}

var _ agent.Driver = (*Driver)(nil)

// New connects to charon's VICI socket (unix:///path, or a plain path), retrying until
// charon answers or ctx / Options.ConnectTimeout ends, and subscribes to the events it
// reports state from. The driver reconnects by itself when charon restarts, and then loads
// the last applied bundle again.
func New(ctx context.Context, socket string, opts Options) (*Driver, error) {
	network, addr, err := parseSocket(socket)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	d := &Driver{
		network: network, addr: addr, opts: opts, log: opts.Log,
		changes:     make(chan struct{}, 1),
		done:        make(chan struct{}),
		loadedConns: map[string]string{},
		loadedKeys:  map[string]string{},
		missing:     map[string]string{},
		loadErrs:    map[string]string{},
		runtime:     map[string]*connRuntime{},
		keyMAC:      make([]byte, 32),
	}
	if _, err := rand.Read(d.keyMAC); err != nil {
		return nil, err
	}

	wait, cancel := context.WithTimeout(ctx, opts.ConnectTimeout)
	defer cancel()
	var events chan vici.Event
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		var sess *vici.Session
		sess, events, err = d.subscribe(wait)
		if err == nil {
			d.eventSess = sess
			break
		}
		select {
		case <-wait.Done():
			return nil, fmt.Errorf("charon does not answer on %s: %w", socket, err)
		case <-time.After(delay):
		}
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	go d.watch(events)
	return d, nil
}

func parseSocket(s string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(s, "unix://"):
		addr = strings.TrimPrefix(s, "unix://")
	case strings.HasPrefix(s, "/"):
		addr = s
	default:
		return "", "", fmt.Errorf("VICI socket %q: want unix:///path", s)
	}
	if addr == "" {
		return "", "", fmt.Errorf("VICI socket %q has no path", s)
	}
	return "unix", addr, nil
}

func (d *Driver) dial() (*vici.Session, error) {
	return vici.NewSession(vici.WithAddr(d.network, d.addr))
}

// subscribe opens an event session, checks that charon answers on it, and subscribes.
func (d *Driver) subscribe(ctx context.Context) (*vici.Session, chan vici.Event, error) {
	s, err := d.dial()
	if err != nil {
		return nil, nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, d.opts.CallTimeout)
	defer cancel()
	if _, err := s.Call(cctx, "version", nil); err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	// A generous buffer: govici drops events for a full channel, and charon's log comes
	// through here; watch drains it continuously.
	ch := make(chan vici.Event, 4096)
	s.NotifyEvents(ch)
	if err := s.Subscribe(watchedEvents...); err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	return s, ch, nil
}

// Changes signals when a tunnel's state may have changed. It never blocks the driver:
// several changes before the receiver looks are one signal.
func (d *Driver) Changes() <-chan struct{} { return d.changes }

func (d *Driver) signal() {
	select {
	case d.changes <- struct{}{}:
	default:
	}
}

// Close stops the event watch and closes the VICI sessions; charon and its SAs keep running.
func (d *Driver) Close() error {
	d.cancel()
	d.mu.Lock()
	if d.eventSess != nil {
		_ = d.eventSess.Close()
	}
	d.mu.Unlock()
	<-d.done
	d.cmdMu.Lock()
	defer d.cmdMu.Unlock()
	if d.cmd != nil {
		err := d.cmd.Close()
		d.cmd = nil
		return err
	}
	return nil
}

// watch consumes events and, when the event session ends (charon stopped or restarted),
// reconnects, forgets what charon held and loads the last bundle again.
func (d *Driver) watch(events chan vici.Event) {
	defer close(d.done)
	for {
		d.consume(events)
		d.mu.Lock()
		if d.eventSess != nil {
			_ = d.eventSess.Close()
			d.eventSess = nil
		}
		d.mu.Unlock()
		if d.ctx.Err() != nil {
			return
		}
		d.log.Info("lost charon's event session, reconnecting")
		d.signal()
		var sess *vici.Session
		for delay := 50 * time.Millisecond; ; delay = min(2*delay, d.opts.ReconnectInterval) {
			select {
			case <-d.ctx.Done():
				return
			case <-time.After(delay):
			}
			var err error
			if sess, events, err = d.subscribe(d.ctx); err == nil {
				break
			}
		}
		d.mu.Lock()
		d.eventSess = sess
		d.mu.Unlock()
		d.restarted()
		d.signal()
	}
}

func (d *Driver) consume(events chan vici.Event) {
	for {
		select {
		case <-d.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			d.handle(ev)
		}
	}
}

// restarted runs after the event session was re-established: charon may have restarted with
// nothing loaded (loading the same connection again is a no-op in charon, so loading all of
// them is safe either way), and its IKE_SA unique ids start over.
func (d *Driver) restarted() {
	d.cmdMu.Lock()
	if d.cmd != nil {
		_ = d.cmd.Close()
		d.cmd = nil
	}
	d.cmdMu.Unlock()

	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	d.mu.Lock()
	d.loadedConns = map[string]string{}
	d.loadedKeys = map[string]string{}
	d.maxSeenID = 0
	for _, rt := range d.runtime {
		rt.failState, rt.failMsg, rt.failID, rt.upID, rt.staleID = "", "", 0, 0, 0
		rt.establishedAt = nil
	}
	conns, keys, secrets := d.conns, d.keys, d.secrets
	d.mu.Unlock()
	if secrets == nil {
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, time.Duration(len(conns)+1)*d.opts.CallTimeout)
	defer cancel()
	if err := d.apply(ctx, &strongswan.Config{Connections: conns, SharedKeys: keys}, secrets); err != nil {
		d.log.Error(err, "loading the configuration again after reconnecting to charon")
	} else {
		d.log.Info("loaded the configuration again after reconnecting to charon", "connections", len(conns))
	}
}

// call runs one plain VICI command on the driver's command session.
func (d *Driver) call(ctx context.Context, cmd string, in *vici.Message) (*vici.Message, error) {
	d.cmdMu.Lock()
	defer d.cmdMu.Unlock()
	if d.cmd == nil {
		s, err := d.dial()
		if err != nil {
			return nil, fmt.Errorf("connecting to charon: %w", err)
		}
		d.cmd = s
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.CallTimeout)
	defer cancel()
	out, err := d.cmd.Call(ctx, cmd, in)
	if err != nil && out == nil {
		// Not charon refusing the command: the session is broken (or the answer did not come
		// in time and would confuse the next call). Start afresh next time.
		_ = d.cmd.Close()
		d.cmd = nil
	}
	return out, err
}

// collect runs a command whose answer is streamed as events (list-sas: list-sa, list-conns:
// list-conn) on a fresh session and returns the events; see collectOn.
func (d *Driver) collect(ctx context.Context, cmd, event string, in *vici.Message) ([]*vici.Message, error) {
	s, err := d.dial()
	if err != nil {
		return nil, fmt.Errorf("connecting to charon: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.CallTimeout)
	defer cancel()
	return collectOn(ctx, s, cmd, event, in)
}

// collectOn runs a streamed command on s, a session used for nothing else, returns the
// events, and closes s. It works around govici v0.8.0's CallStreaming, which can return
// before all events are read and leave the rest to poison the session's next call: here the
// session subscribes to the event, the command is a plain Call, and because govici's reader
// hands every event to the subscribers before it reads the command's response, all events are
// queued once the Call returns; closing the session then closes the channel behind the last
// of them, and the session is never used again.
func collectOn(ctx context.Context, s *vici.Session, cmd, event string, in *vici.Message) ([]*vici.Message, error) {
	// govici drops an event when the channel is full; the goroutine below drains it as fast
	// as it fills, and the buffer absorbs the bursts.
	ch := make(chan vici.Event, 1024)
	s.NotifyEvents(ch)
	var got []*vici.Message
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for ev := range ch {
			if ev.Name == event {
				got = append(got, ev.Message)
			}
		}
	}()
	closed := false
	finish := func() {
		if !closed {
			closed = true
			_ = s.Close()
			<-drained
		}
	}
	defer finish()
	if err := s.Subscribe(event); err != nil {
		return nil, fmt.Errorf("%s: subscribing to %s: %w", cmd, event, err)
	}
	if _, err := s.Call(ctx, cmd, in); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	finish()
	return got, nil
}

// Apply converges charon to the bundle's strongSwan configuration. See the package comment.
// A connection whose pre-shared key cannot be read is not loaded (and unloaded if it was);
// Peers reports it as MissingSecret. Errors name connections, Secrets and keys, never a value.
func (d *Driver) Apply(ctx context.Context, b *render.Bundle, secrets agent.Secrets) error {
	if b == nil || b.StrongSwan == nil {
		return errors.New("strongswan driver: the bundle has no strongSwan configuration")
	}
	if secrets == nil {
		return errors.New("strongswan driver: no Secrets")
	}
	if d.ctx.Err() != nil {
		return errors.New("strongswan driver: closed")
	}
	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	cfg := b.StrongSwan
	d.mu.Lock()
	d.conns = slices.Clone(cfg.Connections)
	d.keys = slices.Clone(cfg.SharedKeys)
	d.secrets = secrets
	d.mu.Unlock()
	return d.apply(ctx, cfg, secrets)
}

// apply does Apply's work; the caller holds applyMu. It reads the keys, plans the unloads and
// loads from what charon holds as far as the driver loaded it (planApply), and carries the
// plan out over VICI (carryOut).
func (d *Driver) apply(ctx context.Context, cfg *strongswan.Config, secrets agent.Secrets) error {
	keysByConn, missing := d.readKeys(cfg.SharedKeys, secrets)
	d.mu.Lock()
	plan := planApply(cfg, keysByConn, missing, d.loadedConns, d.loadedKeys)
	d.track(cfg, plan)
	d.mu.Unlock()
	err := d.carryOut(ctx, plan, d)
	d.signal()
	return err
}

// track keeps the per-connection state in step with the bundle: why connections are missing,
// no load error of a connection no longer wanted, and the event state of the bundle's
// connections only. The caller holds mu.
func (d *Driver) track(cfg *strongswan.Config, plan *applyPlan) {
	d.missing = plan.missing
	for name := range d.loadErrs {
		if !plan.wanted[name] {
			delete(d.loadErrs, name)
		}
	}
	known := map[string]bool{}
	for _, c := range cfg.Connections {
		known[c.Name] = true
		if d.runtime[c.Name] == nil {
			d.runtime[c.Name] = &connRuntime{}
		}
	}
	for name := range d.runtime {
		if !known[name] {
			delete(d.runtime, name)
		}
	}
}

// seenID is the highest IKE_SA unique id seen so far: taken before a connection or key is
// (re)loaded, it bounds the IKE_SAs that negotiated with the old configuration.
func (d *Driver) seenID() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.maxSeenID
}

// forgetFailures clears a connection's failure state after its configuration or key changed:
// failures of the IKE_SAs up to unique id upTo (seenID before the change) were about the old
// configuration and are ignored from now on. A failure of a newer IKE_SA, which may be logged
// before the load-conn that started it returns, stays.
func (d *Driver) forgetFailures(conn string, upTo uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if rt := d.runtime[conn]; rt != nil {
		if rt.failID <= upTo {
			rt.failState, rt.failMsg = "", ""
		}
		rt.staleID = max(rt.staleID, upTo)
	}
}

func (d *Driver) setLoadErr(conn, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loadErrs[conn] = msg
}

// unloadConn unloads a connection and terminates what is left of its IKE_SAs.
func (d *Driver) unloadConn(ctx context.Context, name string) error {
	in := vici.NewMessage()
	_ = in.Set("name", name)
	if _, err := d.call(ctx, "unload-conn", in); err != nil {
		return fmt.Errorf("connection %s: unload-conn: %w", name, err)
	}
	// charon 5.9 terminates the SAs of an unloaded connection only when its start_action
	// included start; a responder-only connection's SAs would live on.
	t := vici.NewMessage()
	_ = t.Set("ike", name)
	_ = t.Set("timeout", "-1") // do not wait for the peer's answer to the DELETE
	if out, err := d.call(ctx, "terminate", t); err != nil && (out == nil || !strings.Contains(err.Error(), "no matching SAs")) {
		// charon fails a terminate whose IKE_SA went away between its lookup and its
		// termination (the site deleted it, or charon did on unload): only an SA still
		// there is an error.
		if left, lerr := d.ikeSAsOf(ctx, name); lerr != nil || left > 0 {
			return fmt.Errorf("connection %s: terminating its SAs: %w", name, err)
		}
	}
	d.log.Info("unloaded connection", "connection", name)
	return nil
}

// ikeSAsOf counts the IKE_SAs charon still has for a connection.
func (d *Driver) ikeSAsOf(ctx context.Context, name string) (int, error) {
	in := vici.NewMessage()
	_ = in.Set("ike", name)
	_ = in.Set("noblock", "yes")
	events, err := d.collect(ctx, "list-sas", "list-sa", in)
	if err != nil {
		return 0, err
	}
	sas, err := parseSAs(events)
	if err != nil {
		return 0, err
	}
	return len(sas[name]), nil
}

// initiate starts the CHILD_SAs of a new or changed connection that charon does not start
// itself (start_action without start) when it can (a concrete remote address). It does not
// wait for the negotiation (timeout -1); the state comes through events and Peers.
func (d *Driver) initiate(ctx context.Context, c strongswan.Connection) {
	if !initiator(c) {
		return
	}
	var children []string
	for _, name := range c.ChildNames() {
		// "none": a child only the site starts (one per subnet beside the child for all)
		if sa := c.IKE.Children[name].StartAction; !hasAction(sa, "start") && sa != "none" {
			children = append(children, name)
		}
	}
	d.startChildren(ctx, c, children)
}

// kick gives a connection whose pre-shared key changed a fresh start when it has no tunnel
// up: negotiations in flight were authenticated with the old key (their failures are ignored
// from now on) and are ended, and the connection is initiated again when charon is meant to
// keep it up (start_action start) — charon itself does not retry after an authentication
// failure. An established tunnel is left alone: the new key applies from its next
// authentication.
func (d *Driver) kick(ctx context.Context, c strongswan.Connection) {
	in := vici.NewMessage()
	_ = in.Set("ike", c.Name)
	_ = in.Set("noblock", "yes")
	events, err := d.collect(ctx, "list-sas", "list-sa", in)
	if err != nil {
		d.log.Info("cannot list the SAs of a connection whose key changed", "connection", c.Name, "error", err.Error())
		return
	}
	sas, err := parseSAs(events)
	if err != nil {
		d.log.Info("cannot list the SAs of a connection whose key changed", "connection", c.Name, "error", err.Error())
		return
	}
	var stale uint64
	for _, sa := range sas[c.Name] {
		if sa.up() {
			return
		}
		stale = max(stale, sa.id())
	}
	d.forgetFailures(c.Name, stale)
	for _, sa := range sas[c.Name] {
		t := vici.NewMessage()
		_ = t.Set("ike-id", sa.UniqueID)
		_ = t.Set("timeout", "-1")
		if _, err := d.call(ctx, "terminate", t); err != nil {
			d.log.V(1).Info("terminating a negotiation with the old key", "connection", c.Name, "ike-id", sa.UniqueID, "error", err.Error())
		}
	}
	if !initiator(c) {
		return
	}
	d.startChildren(ctx, c, startedChildren(c))
}

// startedChildren are the connection's children the gateway starts itself (start_action with
// start): not those only the site starts.
func startedChildren(c strongswan.Connection) []string {
	var children []string
	for _, name := range c.ChildNames() {
		if hasAction(c.IKE.Children[name].StartAction, "start") {
			children = append(children, name)
		}
	}
	return children
}

func (d *Driver) startChildren(ctx context.Context, c strongswan.Connection, children []string) {
	for _, name := range children {
		in := vici.NewMessage()
		_ = in.Set("ike", c.Name)
		_ = in.Set("child", name)
		_ = in.Set("timeout", "-1")
		if _, err := d.call(ctx, "initiate", in); err != nil {
			d.log.Info("initiate failed", "connection", c.Name, "child", name, "error", err.Error())
		} else {
			d.log.Info("initiating", "connection", c.Name, "child", name)
		}
	}
}

// initiator reports whether charon can initiate c: it has a concrete remote address.
func initiator(c strongswan.Connection) bool {
	return len(c.IKE.RemoteAddrs) > 0 && !slices.ContainsFunc(c.IKE.RemoteAddrs, func(a string) bool {
		return a == "%any" || a == "%any4" || a == "%any6"
	})
}

func hasAction(actions, action string) bool {
	return slices.Contains(strings.Split(actions, "|"), action)
}

func connFingerprint(c strongswan.Connection) (string, error) {
	raw, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("connection %s: %w", c.Name, err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// keyFingerprint identifies a loaded key's id, owners and data without keeping the data: a
// keyed MAC whose key never leaves the process.
func (d *Driver) keyFingerprint(k strongswan.SharedKey, data []byte) string {
	m := hmac.New(sha256.New, d.keyMAC)
	meta, _ := json.Marshal([]any{k.ID, k.Owners})
	m.Write(meta)
	m.Write([]byte{0})
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// Peers reports the state of every peer of the last applied bundle.
func (d *Driver) Peers(ctx context.Context) (map[string]agent.PeerState, error) {
	events, err := d.collect(ctx, "list-sas", "list-sa", nil)
	if err != nil {
		return nil, err
	}
	byConn, err := parseSAs(events)
	if err != nil {
		return nil, err
	}

	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]agent.PeerState, len(d.conns))
	for _, c := range d.conns {
		if msg, ok := d.missing[c.Name]; ok {
			out[c.Peer] = agent.PeerState{State: agent.StateMissingSecret, Message: msg}
			continue
		}
		rt := d.runtime[c.Name]
		if rt == nil {
			rt = &connRuntime{}
			d.runtime[c.Name] = rt
		}
		st := rt.state(byConn[c.Name], now)
		if _, loaded := d.loadedConns[c.Name]; !loaded {
			st.State = agent.StateDown
			st.Message = "connection not loaded"
			if msg := d.loadErrs[c.Name]; msg != "" {
				st.Message += ": " + msg
			}
		}
		out[c.Peer] = st
	}
	return out, nil
}

// parseSAs reads list-sa events into IKE_SAs by connection name.
func parseSAs(events []*vici.Message) (map[string][]ikeSA, error) {
	byConn := map[string][]ikeSA{}
	for _, ev := range events {
		for _, name := range ev.Keys() {
			sub, ok := ev.Get(name).(*vici.Message)
			if !ok {
				continue
			}
			var sa ikeSA
			if err := vici.UnmarshalMessage(sub, &sa); err != nil {
				return nil, fmt.Errorf("list-sas: IKE_SA %s: %w", name, err)
			}
			byConn[name] = append(byConn[name], sa)
		}
	}
	return byConn, nil
}

// ikeSA is the part of a list-sa / ike-updown IKE_SA the driver reads.
type ikeSA struct {
	UniqueID     string             `vici:"uniqueid"`
	State        string             `vici:"state"`
	RemoteHost   string             `vici:"remote-host"`
	Initiator    string             `vici:"initiator"`
	ResponderSPI string             `vici:"responder-spi"`
	Established  string             `vici:"established"`
	Children     map[string]childSA `vici:"child-sas"`
}

type childSA struct {
	Name       string `vici:"name"`
	UniqueID   string `vici:"uniqueid"`
	State      string `vici:"state"`
	BytesIn    string `vici:"bytes-in"`
	BytesOut   string `vici:"bytes-out"`
	PacketsIn  string `vici:"packets-in"`
	PacketsOut string `vici:"packets-out"`
}

func (sa ikeSA) id() uint64 { return parseUint(sa.UniqueID) }

// up: the IKE_SA is established (or being rekeyed) and protects traffic.
func (sa ikeSA) up() bool {
	switch sa.State {
	case "ESTABLISHED", "REKEYING", "REKEYED":
	default:
		return false
	}
	for _, c := range sa.Children {
		switch c.State {
		case "INSTALLED", "REKEYING", "REKEYED", "UPDATING":
			return true
		}
	}
	return false
}

// unanswered: we are initiating and the peer has not answered our IKE_SA_INIT yet.
func (sa ikeSA) unanswered() bool {
	return sa.State == "CONNECTING" && sa.Initiator == "yes" && strings.Trim(sa.ResponderSPI, "0") == ""
}

func parseUint(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

// state derives a connection's PeerState from its IKE_SAs and what the events said:
//   - Established: an IKE_SA is established with a CHILD_SA installed;
//   - otherwise the last authentication / proposal failure (AuthFailed, NoProposalChosen);
//   - Connecting: an IKE_SA is being negotiated with a peer that answers (or is established
//     while its CHILD_SA is not installed yet);
//   - Down: no IKE_SA, or only our own initiation the peer has not answered (a dead peer we
//     keep retrying, as dpd_action restart does).
//
// Counters are summed over the CHILD_SAs of all the connection's IKE_SAs (they restart with
// every new CHILD_SA, e.g. after a rekey).
func (rt *connRuntime) state(sas []ikeSA, now time.Time) agent.PeerState {
	var st agent.PeerState
	st.Rekeys, st.ChildSAsRefused = rt.rekeys, rt.childrenRefused
	seen := map[uint64]bool{}
	var upSAs []ikeSA
	connecting, unanswered := false, ""
	for _, sa := range sas {
		seen[sa.id()] = true
		for _, c := range sa.Children {
			st.BytesIn += parseUint(c.BytesIn)
			st.BytesOut += parseUint(c.BytesOut)
			st.PacketsIn += parseUint(c.PacketsIn)
			st.PacketsOut += parseUint(c.PacketsOut)
		}
		switch {
		case sa.up():
			upSAs = append(upSAs, sa)
		case sa.unanswered():
			unanswered = sa.RemoteHost
		case sa.State == "CONNECTING" || sa.State == "ESTABLISHED" || sa.State == "REKEYING" || sa.State == "CREATED":
			connecting = true
		}
	}
	for id, at := range rt.establishedAt {
		// Forget IKE_SAs that are gone (but not one whose ike-updown came in after the
		// listing was taken).
		if !seen[id] && now.Sub(at) > time.Minute {
			delete(rt.establishedAt, id)
		}
	}
	if len(upSAs) > 0 {
		if rt.establishedAt == nil {
			rt.establishedAt = map[uint64]time.Time{}
		}
		for _, sa := range upSAs {
			id := sa.id()
			if _, ok := rt.establishedAt[id]; !ok {
				// Whole seconds on charon's monotonic clock: within a second or two.
				rt.establishedAt[id] = now.Add(-time.Duration(parseUint(sa.Established)) * time.Second).Truncate(time.Second)
			}
			if st.EstablishedAt.IsZero() || rt.establishedAt[id].Before(st.EstablishedAt) {
				st.EstablishedAt = rt.establishedAt[id]
			}
			rt.sawUp(id)
		}
		st.State = agent.StateEstablished
		return st
	}
	st.BytesIn, st.BytesOut, st.PacketsIn, st.PacketsOut = 0, 0, 0, 0
	switch {
	case rt.failState != "":
		st.State, st.Message = rt.failState, rt.failMsg
	case connecting:
		st.State, st.Message = agent.StateConnecting, "negotiating"
	case unanswered != "":
		st.State, st.Message = agent.StateDown, fmt.Sprintf("no answer from %s, retrying", unanswered)
	default:
		st.State, st.Message = agent.StateDown, "not connected"
	}
	return st
}

// sawUp records that IKE_SA id had a CHILD_SA installed: failures up to it are over.
func (rt *connRuntime) sawUp(id uint64) {
	if id > rt.upID {
		rt.upID = id
	}
	if rt.failState != "" && rt.failID <= id {
		rt.failState, rt.failMsg = "", ""
	}
}

// failure patterns in charon's log (level 0/1 messages of 5.9, stable for years), and the
// state they mean. Every message is logged with the IKE_SA's name, i.e. the connection, once
// the connection is known: an initiator always knows it; a responder only from IKE_AUTH on
// (so a proposal mismatch in a peer's IKE_SA_INIT, before any connection is chosen, cannot be
// attributed and shows as Connecting/Down).
var failures = []struct{ substr, state, prefix string }{
	{"received AUTHENTICATION_FAILED notify", agent.StateAuthFailed, "the peer rejected our authentication"},
	{"MAC mismatched", agent.StateAuthFailed, "the peer's pre-shared key does not match"},
	{"no shared key found", agent.StateAuthFailed, "no pre-shared key for these identities"},
	{"received NO_PROPOSAL_CHOSEN notify", agent.StateNoProposalChosen, "the peer accepts none of our proposals"},
	{"no acceptable proposal found", agent.StateNoProposalChosen, "none of the peer's proposals is acceptable"},
	{"received TS_UNACCEPTABLE notify", agent.StateNoProposalChosen, "the peer does not accept our traffic selectors"},
	{"traffic selectors unacceptable", agent.StateNoProposalChosen, "the peer's traffic selectors are not acceptable"},
}

func classify(msg string) (state, text string) {
	for _, f := range failures {
		if strings.Contains(msg, f.substr) {
			return f.state, f.prefix + " (charon: " + msg + ")"
		}
	}
	return "", ""
}

func (d *Driver) handle(ev vici.Event) {
	m := ev.Message
	if m == nil {
		return
	}
	switch ev.Name {
	case "log":
		name, _ := m.Get("ikesa-name").(string)
		text, _ := m.Get("msg").(string)
		id := uint64(0)
		if s, ok := m.Get("ikesa-uniqueid").(string); ok {
			id = parseUint(s)
		}
		state, msg := classify(text)
		d.mu.Lock()
		d.maxSeenID = max(d.maxSeenID, id)
		if state == "" || name == "" {
			d.mu.Unlock()
			return
		}
		rt := d.runtime[name]
		if rt == nil || (id != 0 && (id < rt.upID || id <= rt.staleID)) {
			d.mu.Unlock()
			return
		}
		rt.failState, rt.failMsg, rt.failID = state, msg, id
		d.mu.Unlock()
		d.log.Info("tunnel negotiation failed", "connection", name, "state", state, "message", text)
		d.signal()

	case "ike-updown", "child-updown":
		up, _ := m.Get("up").(string)
		d.mu.Lock()
		for _, name := range m.Keys() {
			sub, ok := m.Get(name).(*vici.Message)
			if !ok {
				continue
			}
			var sa ikeSA
			if vici.UnmarshalMessage(sub, &sa) != nil || sa.id() == 0 {
				continue
			}
			d.maxSeenID = max(d.maxSeenID, sa.id())
			if ev.Name == "child-updown" && up == "yes" {
				// The event names the one CHILD_SA that came up: the IKE_SA's others are listed.
				go d.boundChildren(name, sa.UniqueID, d.childLimit(name))
			}
			if rt := d.runtime[name]; rt != nil && up == "yes" {
				if ev.Name == "ike-updown" {
					// The event's time is more precise than list-sas' whole seconds.
					if rt.establishedAt == nil {
						rt.establishedAt = map[uint64]time.Time{}
					}
					if _, ok := rt.establishedAt[sa.id()]; !ok {
						rt.establishedAt[sa.id()] = ev.Timestamp
					}
				} else {
					rt.sawUp(sa.id())
				}
			}
		}
		d.mu.Unlock()
		d.signal()

	case "ike-rekey", "child-rekey":
		d.mu.Lock()
		for _, name := range m.Keys() {
			rt := d.runtime[name]
			if rt == nil {
				continue
			}
			rt.rekeys++
			if ev.Name == "ike-rekey" {
				old, new := rt.carryEstablished(m.Get(name))
				d.log.V(1).Info("IKE_SA rekeyed", "connection", name, "old", old, "new", new)
			}
		}
		d.mu.Unlock()
		d.signal()
	}
}

// childLimit is how many CHILD_SAs one IKE_SA of connection name may hold: two per configured
// child (a rekey holds the old and the new one for a moment). A peer may propose any number
// of CHILD_SAs whose narrowed selectors fit its configuration; charon accepts them all, and
// each costs the gateway kernel state. The caller holds d.mu.
func (d *Driver) childLimit(name string) int {
	for _, c := range d.conns {
		if c.Name == name {
			return 2 * max(len(c.IKE.Children), 1)
		}
	}
	return 2
}

// liveChild: a CHILD_SA in service and not on its way out. One being rekeyed (REKEYING,
// REKEYED) is leaving for its successor and does not count: a rekey never costs a tunnel.
func liveChild(state string) bool {
	switch state {
	case "INSTALLED", "UPDATING":
		return true
	}
	return false
}

// excessChildren are the unique ids of the live CHILD_SAs of sa beyond limit: the oldest
// limit of them stay, the newest go.
func excessChildren(sa ikeSA, limit int) []string {
	var live []uint64
	for _, c := range sa.Children {
		if liveChild(c.State) {
			live = append(live, parseUint(c.UniqueID))
		}
	}
	if len(live) <= limit {
		return nil
	}
	slices.Sort(live)
	out := make([]string, 0, len(live)-limit)
	for _, id := range live[limit:] {
		out = append(out, strconv.FormatUint(id, 10))
	}
	return out
}

// boundChildren lists the IKE_SA ikeID of connection conn and deletes its CHILD_SAs beyond
// limit (childLimit), without waiting for the peer's answer.
func (d *Driver) boundChildren(conn, ikeID string, limit int) {
	ctx, cancel := context.WithTimeout(d.ctx, d.opts.CallTimeout)
	defer cancel()
	in := vici.NewMessage()
	_ = in.Set("ike-id", ikeID)
	_ = in.Set("noblock", "yes")
	events, err := d.collect(ctx, "list-sas", "list-sa", in)
	if err != nil {
		d.log.V(1).Info("cannot list an IKE_SA to bound its CHILD_SAs", "connection", conn, "ike-id", ikeID, "error", err.Error())
		return
	}
	sas, err := parseSAs(events)
	if err != nil {
		d.log.V(1).Info("cannot list an IKE_SA to bound its CHILD_SAs", "connection", conn, "ike-id", ikeID, "error", err.Error())
		return
	}
	var ids []string
	for _, sa := range sas[conn] {
		ids = append(ids, excessChildren(sa, limit)...)
	}
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		t := vici.NewMessage()
		_ = t.Set("child-id", id)
		_ = t.Set("timeout", "-1")
		if _, err := d.call(ctx, "terminate", t); err != nil {
			d.log.V(1).Info("terminating a CHILD_SA beyond the peer's limit", "connection", conn, "child-id", id, "error", err.Error())
			continue
		}
		d.mu.Lock()
		if rt := d.runtime[conn]; rt != nil {
			rt.childrenRefused++
		}
		d.mu.Unlock()
	}
	d.log.Info("CHILD_SAs beyond the peer's limit terminated", "connection", conn, "count", len(ids))
}

// carryEstablished keeps the established time of a rekeyed IKE_SA for its successor: the
// tunnel did not go down.
func (rt *connRuntime) carryEstablished(v any) (oldID, newID uint64) {
	sub, ok := v.(*vici.Message)
	if !ok {
		return 0, 0
	}
	var pair struct {
		Old ikeSA `vici:"old"`
		New ikeSA `vici:"new"`
	}
	if vici.UnmarshalMessage(sub, &pair) != nil {
		return 0, 0
	}
	oldID, newID = pair.Old.id(), pair.New.id()
	if at, ok := rt.establishedAt[oldID]; ok && newID != 0 {
		rt.establishedAt[newID] = at
	}
	return oldID, newID
}
