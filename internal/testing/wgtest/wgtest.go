// Package wgtest runs the WireGuard driver inside a network namespace for tests, as a helper
// process: the test binary re-executes itself under `ip netns exec <ns>` with EnvHelper set,
// and the child runs a wireguard.Driver (normally the embedded userspace device) that the test
// drives over a line-based JSON protocol on the child's stdin/stdout. The child's log (the
// driver's and the device's, at V(1)) is collected from its stderr, for tests that scan it for
// key material.
//
// Use it from any package's tests (root needed, see netns.Skip):
//
//	func TestMain(m *testing.M) { wgtest.Main(m) }
//
//	run := netns.NewRun(t, "bxyz")
//	site := run.NS("site")
//	node := wgtest.Start(t, site, wgtest.Options{})
//	err := node.Apply(cfg, wgtest.Secrets{ref: []byte(key.String())})
//	peers, err := node.Peers()
//
// A TestMain that does more (envtest, ...) starts with
//
//	if wgtest.IsHelper() { os.Exit(wgtest.RunHelper()) }
//
// Start registers cleanup (Stop) with t; a node whose test process dies exits by itself when
// its stdin closes. Userspace devices put their UAPI socket in /var/run/wireguard, shared
// across namespaces: Start picks an interface name unique on the machine (UniqueInterfaceName)
// unless told otherwise, and Node.Device reads the device through that socket from the test
// process itself, as `wg show` would.
package wgtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// EnvHelper marks a re-executed test binary as a driver helper; its value is the JSON of the
// helper's Options.
const EnvHelper = "BNERD_WGTEST_HELPER"

// CallTimeout bounds each request to a helper (and its start).
const CallTimeout = 60 * time.Second

// Main is the body of TestMain for packages that Start helpers: in a helper process it runs
// the helper and exits; otherwise it runs the tests.
func Main(m *testing.M) {
	if spec, ok := os.LookupEnv(EnvHelper); ok {
		os.Exit(helperMain(spec, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// IsHelper reports whether this process is a helper (for a TestMain that does more than Main).
func IsHelper() bool { _, ok := os.LookupEnv(EnvHelper); return ok }

// RunHelper runs the helper in this process and returns its exit code (when IsHelper).
func RunHelper() int {
	return helperMain(os.Getenv(EnvHelper), os.Stdin, os.Stdout, os.Stderr)
}

// Options of a helper node.
type Options struct {
	// InterfaceName; UniqueInterfaceName("w") when empty.
	InterfaceName string `json:"interfaceName"`
	// Mode of the driver; auto (kernel where the module exists, else userspace) when empty.
	Mode wireguard.Mode `json:"mode"`
	// PollInterval of the driver's Changes; 200 ms when zero (tests want prompt signals).
	PollInterval time.Duration `json:"pollInterval"`
	// KeepDevice leaves the device in place when the helper stops (the default removes it).
	// A userspace device ends with the helper process anyway.
	KeepDevice bool `json:"keepDevice"`
	// StateFile is the driver's endpoint memory (Options.StateFile); none when empty.
	StateFile string `json:"stateFile"`
	// LastSeen is what the driver's Options.LastSeen reports, by peer name: the endpoint a
	// VPNPeer's status would hold (its last handshake taken as now).
	LastSeen map[string]string `json:"lastSeen"`
	// DeviceOnly runs no driver: the helper is the gateway pod's wireguard container
	// (wireguard.RunDevice), a bare userspace device that a driver in ModeExternal configures.
	// Such a node answers no requests; Stop or Kill end it.
	DeviceOnly bool `json:"deviceOnly"`
}

var nameSeq atomic.Int64

// UniqueInterfaceName returns an interface name unique on this machine for this process:
// "wg<pid><role><seq>", at most 15 characters (role is cut to fit).
func UniqueInterfaceName(role string) string {
	base := "wg" + strconv.Itoa(os.Getpid())
	seq := strconv.FormatInt(nameSeq.Add(1), 10)
	room := 15 - len(base) - len(seq)
	if room < 0 {
		room = 0
	}
	if len(role) > room {
		role = role[:room]
	}
	return base + role + seq
}

// Secrets is an in-memory agent.Secrets for tests.
type Secrets map[model.SecretKeyRef][]byte

// Get returns a copy of the data, or an error naming the Secret when it is missing.
func (s Secrets) Get(ref model.SecretKeyRef) ([]byte, error) {
	v, ok := s[ref]
	if !ok {
		return nil, fmt.Errorf("secret %q has no key %q", ref.Name, ref.Key)
	}
	return bytes.Clone(v), nil
}

// NewKey generates a private key (also usable as a pre-shared key); it fails the test on error.
func NewKey(t testing.TB) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatalf("generating a WireGuard key: %v", err)
	}
	return k
}

// KeyForms are the textual forms a key could leak in: base64 (wg(8), Secrets) and hex (UAPI).
func KeyForms(k wgtypes.Key) []string {
	return []string{k.String(), hex.EncodeToString(k[:])}
}

// FindKeys returns a description of every key of keys that text contains, in any KeyForms
// form (nil when none): for tests that scan logs, errors and status for secrets.
func FindKeys(text string, keys map[string]wgtypes.Key) []string {
	var found []string
	for name, k := range keys {
		for _, f := range KeyForms(k) {
			if strings.Contains(strings.ToLower(text), strings.ToLower(f)) {
				found = append(found, name)
				break
			}
		}
	}
	return found
}

// Node is a driver running in a helper process inside a namespace.
type Node struct {
	NS *netns.NS
	// Interface is the device's name.
	Interface string
	// Mode is what the driver runs: kernel or userspace.
	Mode wireguard.Mode

	t     testing.TB
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan []byte
	done  chan struct{}
	log   lockedBuffer
	call  sync.Mutex
	stop  sync.Once
}

// Start starts a node in ns and fails the test if it cannot (use StartE to expect errors).
func Start(t testing.TB, ns *netns.NS, opts Options) *Node {
	t.Helper()
	n, err := StartE(t, ns, opts)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// StartE starts a node in ns: the helper process creates the driver (wireguard.New) and
// reports ready, or the error of New. Cleanup stops it.
func StartE(t testing.TB, ns *netns.NS, opts Options) (*Node, error) {
	t.Helper()
	if opts.InterfaceName == "" {
		opts.InterfaceName = UniqueInterfaceName("w")
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	spec, err := json.Marshal(opts)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the test binary: %w", err)
	}
	n := &Node{NS: ns, Interface: opts.InterfaceName, t: t, lines: make(chan []byte, 16), done: make(chan struct{})}
	// -test.run=^$: should the package lack wgtest.Main in TestMain, the child runs no test
	// (and the start fails below) instead of running the whole suite inside the namespace.
	n.cmd = ns.Command(context.Background(), exe, "-test.run=^$", "-test.count=1")
	n.cmd.Env = append(os.Environ(), EnvHelper+"="+string(spec))
	n.cmd.Stderr = &n.log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if n.stdin, err = n.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := n.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: starting the WireGuard helper: %w", ns.Name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			n.lines <- bytes.Clone(sc.Bytes())
		}
		close(n.lines)
		_ = n.cmd.Wait()
		close(n.done)
	}()
	t.Cleanup(n.Stop)

	var ready response
	if err := n.read(&ready); err != nil {
		n.Stop()
		return nil, fmt.Errorf("%s: WireGuard helper did not start (does the package's TestMain call wgtest.Main?): %w\n%s", ns.Name, err, n.Log())
	}
	if ready.Error != "" {
		n.Stop()
		return nil, errors.New(ready.Error)
	}
	n.Mode = ready.Mode
	return n, nil
}

// Apply applies cfg with secrets in the node (Driver.Apply) and returns its error.
func (n *Node) Apply(cfg *rwg.Config, secrets Secrets) error {
	req := request{Op: "apply", Config: cfg}
	for ref, v := range secrets {
		req.Secrets = append(req.Secrets, secretEntry{Name: ref.Name, Key: ref.Key, Value: v})
	}
	var resp response
	if err := n.roundTrip(req, &resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// Peers returns the node's Driver.Peers.
func (n *Node) Peers() (map[string]agent.PeerState, error) {
	var resp response
	if err := n.roundTrip(request{Op: "peers"}, &resp); err != nil {
		return nil, err
	}
	if resp.Error != "" {
		return nil, errors.New(resp.Error)
	}
	return resp.Peers, nil
}

// Changed reports whether the node's Driver.Changes has a signal pending, and consumes it
// (the channel holds one signal: several changes since the last call read as one).
func (n *Node) Changed() (bool, error) {
	var resp response
	if err := n.roundTrip(request{Op: "changed"}, &resp); err != nil {
		return false, err
	}
	return resp.Changed, nil
}

// NeedsApply is the driver's NeedsApply: its device lost the configuration behind its back.
func (n *Node) NeedsApply() (bool, error) {
	var resp response
	if err := n.roundTrip(request{Op: "needsApply"}, &resp); err != nil {
		return false, err
	}
	return resp.Changed, nil
}

// TakeOver is the driver's TakeOver: its pod became the active one of an active/standby pair.
func (n *Node) TakeOver() error {
	var resp response
	if err := n.roundTrip(request{Op: "takeOver"}, &resp); err != nil {
		return err
	}
	if resp.Error != "" {
		return errors.New(resp.Error)
	}
	return nil
}

// Device reads the node's device through its UAPI socket from the calling process, as
// `wg show` does (userspace devices; a kernel device is only visible inside its namespace).
// The result holds the private and pre-shared keys, as wgctrl returns them: never print it.
func (n *Node) Device() (*wgtypes.Device, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Device(n.Interface)
}

// Log is what the helper has logged so far (driver and device log, at V(1)).
func (n *Node) Log() string { return n.log.String() }

// Exited reports whether the helper process has ended.
func (n *Node) Exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// Stop ends the helper: it closes its stdin (the helper closes the driver, removing the device
// unless KeepDevice, and exits) and kills its process group if it has not exited in time.
// Idempotent.
func (n *Node) Stop() {
	n.stop.Do(func() {
		_ = n.stdin.Close()
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			n.Kill()
		}
	})
}

// Kill ends the helper at once (SIGKILL to its process group), as a crash would: a userspace
// device disappears with it; its UAPI socket file stays behind until the next helper with
// the same name replaces it.
func (n *Node) Kill() {
	if n.cmd.Process != nil {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-n.done:
	case <-time.After(netns.CommandTimeout):
	}
}

func (n *Node) roundTrip(req request, resp *response) error {
	n.call.Lock()
	defer n.call.Unlock()
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := n.stdin.Write(append(raw, '\n')); err != nil {
		return fmt.Errorf("%s: writing to the WireGuard helper: %w", n.NS.Name, err)
	}
	if err := n.read(resp); err != nil {
		return fmt.Errorf("%s: %s: %w", n.NS.Name, req.Op, err)
	}
	return nil
}

func (n *Node) read(v any) error {
	select {
	case line, ok := <-n.lines:
		if !ok {
			return errors.New("the WireGuard helper exited")
		}
		return json.Unmarshal(line, v)
	case <-time.After(CallTimeout):
		return fmt.Errorf("no answer from the WireGuard helper in %s", CallTimeout)
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The protocol: one JSON object per line; the helper first writes a response with Ready (or
// Error), then one response per request.
type request struct {
	Op      string        `json:"op"` // apply, peers, changed, needsApply, takeOver
	Config  *rwg.Config   `json:"config,omitempty"`
	Secrets []secretEntry `json:"secrets,omitempty"`
}

type secretEntry struct {
	Name  string `json:"name"`
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

type response struct {
	Ready   bool                       `json:"ready,omitempty"`
	Mode    wireguard.Mode             `json:"mode,omitempty"`
	Error   string                     `json:"error,omitempty"`
	Peers   map[string]agent.PeerState `json:"peers,omitempty"`
	Changed bool                       `json:"changed,omitempty"`
}

// helperMain is the helper process: a driver in this namespace, driven over in/out.
func helperMain(spec string, in io.Reader, out, logOut io.Writer) int {
	var opts Options
	enc := json.NewEncoder(out)
	if err := json.Unmarshal([]byte(spec), &opts); err != nil {
		_ = enc.Encode(response{Error: "helper options: " + err.Error()})
		return 2
	}
	var logMu sync.Mutex
	log := funcr.New(func(prefix, args string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logOut, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
	}, funcr.Options{Verbosity: 1})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if opts.DeviceOnly {
		return deviceMain(ctx, opts.InterfaceName, in, enc, log)
	}
	d, err := wireguard.New(ctx, wireguard.Options{
		InterfaceName: opts.InterfaceName,
		Mode:          opts.Mode,
		Logger:        log,
		PollInterval:  opts.PollInterval,
		DeleteOnClose: !opts.KeepDevice,
		StateFile:     opts.StateFile,
		LastSeen:      lastSeenOf(opts.LastSeen),
	})
	if err != nil {
		_ = enc.Encode(response{Error: err.Error()})
		return 1
	}
	defer d.Close()
	if err := enc.Encode(response{Ready: true, Mode: d.Mode()}); err != nil {
		return 1
	}

	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var req request
		var resp response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			switch req.Op {
			case "apply":
				secrets := Secrets{}
				for _, s := range req.Secrets {
					secrets[model.SecretKeyRef{Name: s.Name, Key: s.Key}] = s.Value
				}
				if err := d.Apply(ctx, &render.Bundle{WireGuard: req.Config}, secrets); err != nil {
					resp.Error = err.Error()
				}
			case "peers":
				peers, err := d.Peers(ctx)
				if err != nil {
					resp.Error = err.Error()
				}
				resp.Peers = peers
			case "changed":
				select {
				case <-d.Changes():
					resp.Changed = true
				default:
				}
			case "needsApply":
				resp.Changed = d.NeedsApply()
			case "takeOver":
				if err := d.TakeOver(ctx); err != nil {
					resp.Error = err.Error()
				}
			default:
				resp.Error = fmt.Sprintf("unknown op %q", req.Op)
			}
		}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
	}
	// stdin closed: the test is done with us (or died).
	if err := d.Close(); err != nil {
		log.Info("closing the driver", "error", err.Error())
		return 1
	}
	return 0
}

// deviceMain runs a bare userspace device until in closes: ready once its UAPI socket exists.
func deviceMain(ctx context.Context, name string, in io.Reader, enc *json.Encoder, log logr.Logger) int {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- wireguard.RunDevice(ctx, name, log) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if wireguard.UAPIAnswers(name) == nil {
			break
		}
		select {
		case err := <-done:
			_ = enc.Encode(response{Error: fmt.Sprintf("device: %v", err)})
			cancel()
			return 1
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = enc.Encode(response{Error: "device: nothing answers on the UAPI socket of " + name})
			cancel()
			return 1
		}
	}
	if err := enc.Encode(response{Ready: true, Mode: wireguard.ModeUserspace}); err != nil {
		cancel()
		return 1
	}
	_, _ = io.Copy(io.Discard, in) // until the test closes stdin
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// lastSeenOf serves Options.LastSeen from a map of peer names to endpoints (nil for none).
func lastSeenOf(m map[string]string) wireguard.LastSeen {
	if m == nil {
		return nil
	}
	seen := time.Now()
	return func(_ context.Context, peer string) (netip.AddrPort, time.Time, bool) {
		ep, err := netip.ParseAddrPort(m[peer])
		return ep, seen, err == nil
	}
}
