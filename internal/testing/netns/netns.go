// Package netns is a test harness for network namespaces: it creates named namespaces and veth
// links with the ip CLI, runs commands and background processes inside them, and removes
// everything again (t.Cleanup), including leftovers of earlier runs that died before their
// cleanup could run (go test's timeout panic skips Cleanup).
//
// Namespaces are named <prefix><pid>-<seq>-<short>. A new Run deletes namespaces with its
// prefix whose creating process no longer exists, and never touches those of a live process,
// so concurrent test binaries do not disturb each other. Tests need root (CAP_SYS_ADMIN and
// CAP_NET_ADMIN) and iproute2; Available tells when they cannot run.
package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wait"
)

// CommandTimeout bounds every command the harness runs in the foreground.
const CommandTimeout = 30 * time.Second

// Available returns nil when namespace tests can run here: root, and the ip tool plus the
// given tools on PATH. Otherwise it says what is missing (for t.Skip).
func Available(tools ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("network namespace tests need root")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (hack/install-test-deps.sh installs it)", tool)
		}
	}
	return nil
}

// EnvRequireTools, when set to 1 (make test sets it), turns a missing tool or missing root from
// a skip into a failure: under the test command every test that needs a tool runs.
const EnvRequireTools = "BNERD_REQUIRE_TOOLS"

// Skip skips the test unless Available(tools...); with EnvRequireTools=1 it fails instead.
func Skip(t testing.TB, tools ...string) {
	t.Helper()
	SkipUnavailable(t, Available(tools...))
}

// SkipUnavailable skips the test when err (what a test needs and this machine lacks) is not
// nil, or fails it with EnvRequireTools=1, so that `make test` never passes by skipping.
func SkipUnavailable(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv(EnvRequireTools) == "1" {
		t.Fatalf("%v (%s=1: make test runs every test; hack/install-test-deps.sh installs the tools)", err, EnvRequireTools)
	}
	t.Skip(err)
}

var runSeq atomic.Int64

// Run is one test's set of namespaces.
type Run struct {
	t      testing.TB
	prefix string // <prefix><pid>-<seq>-
}

// NewRun starts a set of namespaces named with prefix (letters only, e.g. "bnft"), after
// deleting stale ones of the same prefix.
func NewRun(t testing.TB, prefix string) *Run {
	t.Helper()
	if err := Sweep(prefix); err != nil {
		t.Logf("netns: sweeping stale namespaces: %v", err)
	}
	return &Run{t: t, prefix: fmt.Sprintf("%s%d-%d-", prefix, os.Getpid(), runSeq.Add(1))}
}

// Sweep deletes namespaces named <prefix><pid>-... whose process pid no longer exists.
func Sweep(prefix string) error {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		killProcessesIn(e.Name()) // daemons of a killed run would keep the namespace busy
		if out, err := run(context.Background(), "ip", "netns", "del", e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", e.Name(), err, out))
		}
	}
	return errors.Join(errs...)
}

// killProcessesIn kills every process inside the namespace.
func killProcessesIn(name string) {
	out, err := run(context.Background(), "ip", "netns", "pids", name)
	if err != nil {
		return
	}
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// NS is one network namespace.
type NS struct {
	Name string
	t    testing.TB
}

// NS creates a namespace (deleted at cleanup) with lo up and everything else default
// (ip_forward off).
func (r *Run) NS(short string) *NS {
	r.t.Helper()
	name := r.prefix + short
	if out, err := run(context.Background(), "ip", "netns", "add", name); err != nil {
		r.t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	r.t.Cleanup(func() {
		killProcessesIn(name)
		if out, err := run(context.Background(), "ip", "netns", "del", name); err != nil {
			r.t.Logf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ns := &NS{Name: name, t: r.t}
	ns.MustRun("ip", "link", "set", "lo", "up")
	return ns
}

// Command is a command run inside the namespace (ip netns exec), not yet started.
func (n *NS) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Wrapper writes an executable (in a test's temporary directory) that runs tool inside the
// namespace with its arguments: for code under test that runs a binary by path, as the agent
// runs nft inside its pod.
func (n *NS) Wrapper(t testing.TB, tool string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), filepath.Base(tool))
	script := "#!/bin/sh\nexec ip netns exec " + n.Name + " " + tool + " \"$@\"\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// Run runs a command inside the namespace and returns its combined output.
func (n *NS) Run(args ...string) (string, error) {
	return n.RunInput("", args...)
}

// RunInput is Run with stdin.
func (n *NS) RunInput(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	cmd := n.Command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Exec runs a command inside the namespace with stdin and returns stdout and stderr apart.
func (n *NS) Exec(stdin string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	cmd := n.Command(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// MustRun is Run, failing the test on error.
func (n *NS) MustRun(args ...string) string {
	n.t.Helper()
	out, err := n.Run(args...)
	if err != nil {
		n.t.Fatalf("%s: %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// Sysctl sets a sysctl inside the namespace, e.g. Sysctl("net.ipv4.ip_forward", "1").
func (n *NS) Sysctl(key, value string) {
	n.t.Helper()
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	n.MustRun("sh", "-c", `printf '%s\n' "$1" > "$2"`, "sh", value, path)
}

// Process is a background process inside a namespace.
type Process struct {
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

// Output is what the process printed so far (stdout and stderr).
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *Process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start starts a background process in the namespace, in its own process group, killed with
// its children at cleanup (before the namespace is deleted).
func (n *NS) Start(args ...string) *Process {
	n.t.Helper()
	p := &Process{done: make(chan struct{})}
	p.Cmd = n.Command(context.Background(), args...)
	p.Cmd.Stdout, p.Cmd.Stderr = p, p
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.Cmd.Start(); err != nil {
		n.t.Fatalf("%s: start %s: %v", n.Name, strings.Join(args, " "), err)
	}
	go func() {
		_ = p.Cmd.Wait()
		close(p.done)
	}()
	n.t.Cleanup(func() { p.Stop() })
	return p
}

// Signal sends sig to the process (not its group), as a kubelet stopping a container would.
func (p *Process) Signal(sig syscall.Signal) error {
	return syscall.Kill(p.Cmd.Process.Pid, sig)
}

// Stop kills the process group and waits for the process to end.
func (p *Process) Stop() {
	if p.Cmd.Process != nil {
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(CommandTimeout):
	}
}

// Veth links namespace a (interface aName) with namespace b (interface bName). The pair is
// created inside a and its peer moved to b, so no name is ever used in the caller's
// namespace. Both ends are set up; they disappear with their namespaces.
func Veth(a *NS, aName string, b *NS, bName string) {
	a.t.Helper()
	a.MustRun("ip", "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b.Name)
	a.MustRun("ip", "link", "set", aName, "up")
	b.MustRun("ip", "link", "set", bName, "up")
}

// VethAddr is Veth, then gives each end an address (an empty CIDR leaves that end without).
func VethAddr(a *NS, aName, aCIDR string, b *NS, bName, bCIDR string) {
	a.t.Helper()
	Veth(a, aName, b, bName)
	if aCIDR != "" {
		a.MustRun("ip", "addr", "add", aCIDR, "dev", aName)
	}
	if bCIDR != "" {
		b.MustRun("ip", "addr", "add", bCIDR, "dev", bName)
	}
}

// AddLoopback adds an address to the namespace's lo.
func (n *NS) AddLoopback(cidr string) {
	n.t.Helper()
	n.MustRun("ip", "addr", "add", cidr, "dev", "lo")
}

// PingResult is what ping(8) reported.
type PingResult struct {
	Transmitted, Received int
	Output                string
}

// Ping sends count echo requests from src (an address, or "" for the default) to dst, interval
// apart, waiting at most wait for each reply. It reports what ping counted; err only when ping
// could not run.
func (n *NS) Ping(src, dst string, count int, interval, wait time.Duration) (PingResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout+time.Duration(count)*interval)
	defer cancel()
	args := []string{"ping", "-n", "-q", "-c", strconv.Itoa(count),
		"-i", strconv.FormatFloat(interval.Seconds(), 'f', 3, 64),
		"-W", strconv.FormatFloat(max(wait.Seconds(), 0.001), 'f', 3, 64)}
	if src != "" {
		args = append(args, "-I", src)
	}
	args = append(args, dst)
	var out bytes.Buffer
	cmd := n.Command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := PingResult{Output: out.String()}
	var stats string
	for _, l := range strings.Split(res.Output, "\n") {
		if strings.Contains(l, "packets transmitted") {
			stats = strings.TrimSpace(l)
		}
	}
	if _, scanErr := fmt.Sscanf(stats, "%d packets transmitted, %d received", &res.Transmitted, &res.Received); scanErr != nil {
		return res, fmt.Errorf("ping %s -> %s: %v: %s", src, dst, err, res.Output)
	}
	return res, nil
}

// Eventually calls f until it returns nil or the timeout passes, and returns its last error.
// It backs off from 10 ms to 200 ms between calls; it is polling, not a sleep standing in for
// synchronisation.
func Eventually(timeout time.Duration, f func() error) error {
	return wait.Until(timeout, f)
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// Open returns a handle on an existing namespace that reports to t; it is not deleted at
// cleanup.
func Open(t testing.TB, name string) *NS { return &NS{Name: name, t: t} }

// WithT returns the same namespace reporting to t.
func (n *NS) WithT(t testing.TB) *NS { return &NS{Name: n.Name, t: t} }

// OutputCounters counts, per interface, the packets the namespace sends from src through each
// of ifaces (an nft table "inet probe" in its output path); the returned function reads an
// interface's count.
func (n *NS) OutputCounters(src string, ifaces ...string) func(iface string) int {
	n.t.Helper()
	var b strings.Builder
	b.WriteString("table inet probe {\n")
	for _, i := range ifaces {
		fmt.Fprintf(&b, "  counter via_%s {}\n", i)
	}
	b.WriteString("  chain out {\n    type filter hook output priority 0; policy accept;\n")
	for _, i := range ifaces {
		fmt.Fprintf(&b, "    ip saddr %s oifname %q counter name \"via_%s\"\n", src, i, i)
	}
	b.WriteString("  }\n}\n")
	if out, err := n.RunInput(b.String(), "nft", "-f", "-"); err != nil {
		n.t.Fatalf("%s: nft: %v\n%s", n.Name, err, out)
	}
	return func(iface string) int {
		n.t.Helper()
		return n.counterPackets("probe", "via_"+iface)
	}
}

// CountPackets installs in the namespace a counter of the packets that match rule (nft syntax,
// e.g. `ip daddr 100.72.0.0/24`) at hook (prerouting, input, forward, output, postrouting),
// ahead of every other chain there, in a table of its own (inet count_<name>), and returns a
// reader of how many packets it has counted.
func (n *NS) CountPackets(name, hook, rule string) func() int {
	n.t.Helper()
	table := "count_" + name
	ruleset := fmt.Sprintf("table inet %s {\n  counter %s {}\n  chain c {\n    type filter hook %s priority -400; policy accept;\n    %s counter name %q\n  }\n}\n",
		table, name, hook, rule, name)
	if out, err := n.RunInput(ruleset, "nft", "-f", "-"); err != nil {
		n.t.Fatalf("%s: nft: %v\n%s", n.Name, err, out)
	}
	return func() int {
		n.t.Helper()
		return n.counterPackets(table, name)
	}
}

// counterPackets is the packet count of the named counter of table inet table.
func (n *NS) counterPackets(table, name string) int {
	n.t.Helper()
	out := n.MustRun("nft", "list", "counter", "inet", table, name)
	i := strings.Index(out, "packets ")
	if i < 0 {
		n.t.Fatalf("%s: counter %s: %s", n.Name, name, out)
	}
	v, err := strconv.Atoi(strings.Fields(out[i+len("packets "):])[0])
	if err != nil {
		n.t.Fatalf("%s: counter %s: %s", n.Name, name, out)
	}
	return v
}

// Do runs f on an OS thread switched into the named network namespace (/run/netns/NAME), so
// sockets f opens (netlink, UDP, TCP) belong to that namespace for their whole life. The
// thread is switched back afterwards; if that fails it stays locked and ends with its goroutine.
func Do(name string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(filepath.Join("/run/netns", name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := f()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Netlink returns a netlink handle whose sockets live in the namespace, closed when the test
// ends.
func (n *NS) Netlink() *netlink.Handle {
	n.t.Helper()
	nsh, err := vnetns.GetFromName(n.Name)
	if err != nil {
		n.t.Fatal(err)
	}
	defer nsh.Close() // the handle's sockets stay in the namespace
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(h.Close)
	return h
}
