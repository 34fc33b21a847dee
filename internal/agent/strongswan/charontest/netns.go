// Package charontest starts and stops real strongSwan daemons (charon-systemd with the
// kernel-libipsec plugin, userspace ESP on a TUN device) in network namespaces of their own,
// for tests of the gateway agent's strongSwan driver and the end-to-end tests: a gateway
// namespace, client-site namespaces configured the way a client's device would be, and veth
// links between them.
//
// Everything a test creates is removed at t.Cleanup: daemons are killed, then namespaces
// deleted. go test's timeout panic skips Cleanup, so NewRun first sweeps what earlier runs left
// behind: namespaces named with this package's prefix whose creating process is gone, after
// killing every process still inside them (charon daemons included).
//
// Tests need root, iproute2 and Debian's strongSwan (hack/install-test-deps.sh); Skip skips
// with the reason when they are missing.
package charontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Prefix starts the name of every namespace this package creates: <Prefix><pid>-<seq>-<short>.
const Prefix = "bncht"

// CommandTimeout bounds every command run in the foreground.
const CommandTimeout = 30 * time.Second

// Available returns nil when the tests can run here: root, and ip, charon-systemd, swanctl
// and ping on PATH (plus the given tools). Otherwise it says what is missing.
func Available(tools ...string) error {
	if os.Geteuid() != 0 {
		return errors.New("strongSwan namespace tests need root")
	}
	for _, tool := range append([]string{"ip", "charon-systemd", "swanctl", "ping"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (hack/install-test-deps.sh installs it)", tool)
		}
	}
	return nil
}

// Skip skips the test unless Available(tools...).
func Skip(t testing.TB, tools ...string) {
	t.Helper()
	if err := Available(tools...); err != nil {
		t.Skip(err)
	}
}

var runSeq atomic.Int64

// Run is one test's set of namespaces.
type Run struct {
	t      testing.TB
	prefix string
}

// NewRun sweeps the leftovers of dead runs and starts a new set of namespaces.
func NewRun(t testing.TB) *Run {
	t.Helper()
	if err := Sweep(); err != nil {
		t.Logf("charontest: sweeping stale namespaces: %v", err)
	}
	return &Run{t: t, prefix: fmt.Sprintf("%s%d-%d-", Prefix, os.Getpid(), runSeq.Add(1))}
}

// Sweep kills every process inside, and deletes, the namespaces named <Prefix><pid>-... whose
// process pid no longer exists, and removes such daemons' directories in os.TempDir().
// Namespaces and directories of live processes (a concurrent test binary) are left alone.
func Sweep() error {
	var errs []error
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if !stale(e.Name()) {
			continue
		}
		if err := deleteNetns(e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	dirs, err := os.ReadDir(os.TempDir())
	if err != nil {
		errs = append(errs, err)
	}
	for _, e := range dirs {
		if e.IsDir() && stale(e.Name()) {
			if err := os.RemoveAll(filepath.Join(os.TempDir(), e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// stale reports whether name is <Prefix><pid>-... of a process that no longer exists.
func stale(name string) bool {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return false
	}
	pidText, _, ok := strings.Cut(rest, "-")
	if !ok {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	return err == nil && pid > 0 && !processAlive(pid)
}

// deleteNetns kills the processes inside the namespace, then deletes it.
func deleteNetns(name string) error {
	killNetnsProcesses(name)
	if out, err := run(context.Background(), "ip", "netns", "del", name); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", name, err, out)
	}
	return nil
}

func killNetnsProcesses(name string) {
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

// Netns is one network namespace.
type Netns struct {
	Name string
	t    testing.TB
}

// Netns creates a namespace with lo up (deleted at cleanup, after every process left inside
// it is killed).
func (r *Run) Netns(short string) *Netns {
	r.t.Helper()
	name := r.prefix + short
	if out, err := run(context.Background(), "ip", "netns", "add", name); err != nil {
		r.t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	r.t.Cleanup(func() {
		if err := deleteNetns(name); err != nil {
			r.t.Log(err)
		}
	})
	n := &Netns{Name: name, t: r.t}
	n.MustRun("ip", "link", "set", "lo", "up")
	return n
}

// Command returns a command that runs inside the namespace (ip netns exec), not yet started.
func (n *Netns) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Run runs a command inside the namespace and returns its combined output.
func (n *Netns) Run(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	out, err := n.Command(ctx, args...).CombinedOutput()
	return string(out), err
}

// MustRun is Run, failing the test on error.
func (n *Netns) MustRun(args ...string) string {
	n.t.Helper()
	out, err := n.Run(args...)
	if err != nil {
		n.t.Fatalf("%s: %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// AddLoopback puts addr (a CIDR such as 203.0.113.1/32) on the namespace's lo.
func (n *Netns) AddLoopback(cidr string) {
	n.t.Helper()
	n.MustRun("ip", "addr", "add", cidr, "dev", "lo")
}

// Veth links namespace a (interface aName, address aCIDR) with namespace b (bName, bCIDR).
// The pair is created inside a with its peer directly in b, so no name is ever used in the
// caller's namespace. Interface names must be longer than one letter ("ip link add a" reads
// "a" as "address"). An empty CIDR leaves that end without an address.
func Veth(a *Netns, aName, aCIDR string, b *Netns, bName, bCIDR string) {
	a.t.Helper()
	a.MustRun("ip", "link", "add", aName, "type", "veth", "peer", "name", bName, "netns", b.Name)
	for _, end := range []struct {
		n          *Netns
		name, cidr string
	}{{a, aName, aCIDR}, {b, bName, bCIDR}} {
		if end.cidr != "" {
			end.n.MustRun("ip", "addr", "add", end.cidr, "dev", end.name)
		}
		end.n.MustRun("ip", "link", "set", end.name, "up")
	}
}

// PingResult is what ping(8) reported.
type PingResult struct {
	Transmitted, Received int
	Output                string
}

// Ping sends count echo requests from src to dst, interval apart, and waits for the replies
// (at most wait for each). It reports what ping counted; err only when ping could not run.
func (n *Netns) Ping(src, dst string, count int, interval, wait time.Duration) (PingResult, error) {
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
	if _, scanErr := fmt.Sscanf(statsLine(res.Output), "%d packets transmitted, %d received", &res.Transmitted, &res.Received); scanErr != nil {
		return res, fmt.Errorf("ping %s -> %s: %v: %s", src, dst, err, res.Output)
	}
	return res, nil
}

func statsLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "packets transmitted") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// Eventually calls f until it returns nil or timeout passes, and returns its last error. It
// backs off from 10 ms to 200 ms between calls: polling, not a sleep standing in for
// synchronisation.
func Eventually(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}
