// Package charontest starts and stops real strongSwan daemons (charon-systemd with the
// kernel-libipsec plugin, userspace ESP on a TUN device) in network namespaces of their own,
// for tests of the gateway agent's strongSwan driver and the end-to-end tests: a gateway
// namespace, client-site namespaces configured the way a client's device would be, and veth
// links between them. The namespaces come from internal/testing/netns.
//
// Everything a test creates is removed at t.Cleanup: daemons are killed, then namespaces
// deleted. go test's timeout panic skips Cleanup, so NewRun first sweeps what earlier runs left
// behind: namespaces named with this package's prefix whose creating process is gone (with the
// processes still inside them), and those daemons' directories.
//
// Tests need root, iproute2 and Debian's strongSwan (hack/install-test-deps.sh); Skip skips
// with the reason when they are missing.
package charontest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// Prefix starts the name of every namespace and daemon directory this package creates:
// <Prefix><pid>-...
const Prefix = "bncht"

// CommandTimeout bounds every command run in the foreground.
const CommandTimeout = netns.CommandTimeout

// Netns is one network namespace.
type Netns = netns.NS

// PingResult is what ping(8) reported.
type PingResult = netns.PingResult

// Eventually polls f until it returns nil or the timeout passes.
var Eventually = netns.Eventually

// Available returns nil when the tests can run here: root, and ip, charon-systemd, swanctl
// and ping on PATH (plus the given tools). Otherwise it says what is missing.
func Available(tools ...string) error {
	return netns.Available(append([]string{"charon-systemd", "swanctl", "ping"}, tools...)...)
}

// Skip skips the test unless Available(tools...).
func Skip(t testing.TB, tools ...string) {
	t.Helper()
	netns.SkipUnavailable(t, Available(tools...))
}

// Run is one test's set of namespaces.
type Run struct{ *netns.Run }

// NewRun sweeps the leftovers of dead runs and starts a new set of namespaces.
func NewRun(t testing.TB) *Run {
	t.Helper()
	if err := sweepDirs(); err != nil {
		t.Logf("charontest: sweeping stale daemon directories: %v", err)
	}
	return &Run{netns.NewRun(t, Prefix)}
}

// Netns creates a namespace with lo up (deleted at cleanup, after every process left inside
// it is killed).
func (r *Run) Netns(short string) *Netns { return r.NS(short) }

// Veth links namespace a (interface aName, address aCIDR) with namespace b (bName, bCIDR).
func Veth(a *Netns, aName, aCIDR string, b *Netns, bName, bCIDR string) {
	netns.VethAddr(a, aName, aCIDR, b, bName, bCIDR)
}

// Sweep removes what dead runs left: their namespaces (and the daemons inside) and their
// daemons' directories.
func Sweep() error {
	return errors.Join(netns.Sweep(Prefix), sweepDirs())
}

// sweepDirs removes daemon directories <Prefix><pid>-... in os.TempDir() of processes that no
// longer exist.
func sweepDirs() error {
	dirs, err := os.ReadDir(os.TempDir())
	if err != nil {
		return err
	}
	var errs []error
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
	if err != nil || pid <= 0 {
		return false
	}
	err = syscall.Kill(pid, 0)
	return err != nil && !errors.Is(err, syscall.EPERM)
}
