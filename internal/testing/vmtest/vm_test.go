package vmtest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testoutput"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/vmtest"
)

// TestVM boots the VM and runs this package's guest tests inside it: the guest kernel has what
// production nodes have (kernel WireGuard, XFRM ESP, nft's ipsec expression). The assertions
// are the guest tests' own; here they come back as output and exit status.
func TestVM(t *testing.T) {
	vmtest.Skip(t)
	// The gateway agent the kernel-mode scenarios run, built here for the guest (which runs
	// the host's binaries from the host's root), static and -trimpath as the image's agent is.
	root, err := vmtest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	agent := filepath.Join(t.TempDir(), "gateway-agent")
	build := exec.Command("go", "build", "-trimpath", "-o", agent, "./cmd/gateway-agent")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	// libreswan's programs for the libreswan site, out of Debian's package (cached)
	libreswan, err := exec.Command(filepath.Join(root, "hack", "libreswan.sh")).Output()
	if err != nil {
		t.Fatalf("hack/libreswan.sh: %v", err)
	}
	env := []string{EnvAgent + "=" + agent, EnvLibreswan + "=" + strings.TrimSpace(string(libreswan))}
	// The timeout covers go test -c and the wait for another VM too.
	// BNERD_VMTEST_RUN narrows the guest tests while working on one (then only it is checked).
	run, only := "^TestGuest", os.Getenv("BNERD_VMTEST_RUN")
	if only != "" {
		run = only
	}
	res := vmtest.Run(t, "./internal/testing/vmtest", vmtest.Options{Run: run, Env: env, Timeout: 10 * time.Minute,
		Modules: append(slices.Clone(vmtest.DefaultModules), "nft_nat", "nft_masq", "nft_fib_ipv4", "nf_conntrack_netlink")})
	for _, name := range []string{"TestGuestHostTools", "TestGuestKernelWireGuard", "TestGuestKernelXFRM",
		"TestGuestKernelIPsecGateway", "TestGuestKernelForcedEncapsulation", "TestGuestKernelWireGuardGateway", "TestGuestKernelOneChildPerSubnet", "TestGuestKernelLibreswanSite", "TestGuestKernelRekeyUnderTraffic"} {
		if only != "" && !regexp.MustCompile(only).MatchString(name) {
			continue
		}
		if !strings.Contains(res.Output, "--- PASS: "+name+" ") {
			t.Errorf("the VM did not report %s as passed", name)
		}
	}
	if t.Failed() {
		// The console was logged line by line above; a CI log keeps only its tail, so the
		// failed tests' own lines come again here, last.
		t.Logf("the failed guest tests' output:\n%s", testoutput.Failed(res.Output))
	}
	summary := fmt.Sprintf("vmtest: %s: go test -c %.1fs, boot %.1fs (guest uptime %s at stage 2), modprobe %.1fs, tests %.1fs, qemu total %.1fs",
		res.Accel, res.Build.Seconds(), res.Boot.Seconds(), res.GuestUptime, res.Preload.Seconds(), res.Tests.Seconds(), res.Total.Seconds())
	t.Log(summary)
	fmt.Println(summary)
}

// TestGuestHostTools: the guest runs Debian's kernel from the kit (not the host's), and the
// host's own dataplane tools run inside it (the host's root, read-only over 9p).
func TestGuestHostTools(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	if want := os.Getenv(vmtest.EnvKernel); release != want {
		t.Fatalf("guest kernel %q, want the kit's %q", release, want)
	}
	t.Logf("guest kernel %s", release)
	for _, c := range [][]string{
		{"ip", "-V"}, {"nft", "--version"}, {"wg", "--version"}, {"socat", "-V"},
		{"modprobe", "--version"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, c[0], c[1:]...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("%s: %v: %s", strings.Join(c, " "), err, out)
			continue
		}
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		t.Logf("%s: %s", c[0], first)
	}
	// strongSwan is only looked up: charon-systemd has no --version (it would start the
	// daemon) and swanctl loads its default plugin set for anything (seconds under TCG); the
	// tests that need them run them with a configuration.
	for _, p := range []string{"/usr/sbin/charon-systemd", "/usr/sbin/swanctl"} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable in the guest: %v", p, err)
		}
	}
}

// TestGuestKernelWireGuard: two namespaces joined by a veth, a kernel WireGuard device (netlink
// type wireguard, no wireguard-go) in each, and a ping through the tunnel.
func TestGuestKernelWireGuard(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	netns.Skip(t, "wg", "ping")
	r := netns.NewRun(t, "vmwg")
	a, b := r.NS("a"), r.NS("b")
	netns.VethAddr(a, "va", "192.0.2.1/24", b, "vb", "192.0.2.2/24")

	dir := t.TempDir()
	keyA, keyB := mustKey(t), mustKey(t)
	for _, side := range []struct {
		ns             *netns.NS
		key, peer      wgtypes.Key
		addr, peerAddr string
		endpoint       string
	}{
		{a, keyA, keyB.PublicKey(), "100.64.0.1/24", "100.64.0.2/32", "192.0.2.2:51820"},
		{b, keyB, keyA.PublicKey(), "100.64.0.2/24", "100.64.0.1/32", "192.0.2.1:51820"},
	} {
		keyFile := filepath.Join(dir, side.ns.Name+".key")
		if err := os.WriteFile(keyFile, []byte(side.key.String()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		side.ns.MustRun("ip", "link", "add", "wg0", "type", "wireguard")
		side.ns.MustRun("wg", "set", "wg0", "private-key", keyFile, "listen-port", "51820",
			"peer", side.peer.String(), "allowed-ips", side.peerAddr, "endpoint", side.endpoint)
		side.ns.MustRun("ip", "addr", "add", side.addr, "dev", "wg0")
		side.ns.MustRun("ip", "link", "set", "wg0", "up")
	}
	if _, err := os.Stat("/sys/module/wireguard"); err != nil {
		t.Fatalf("the wireguard kernel module is not loaded: %v", err)
	}
	if out := a.MustRun("ip", "-d", "link", "show", "wg0"); !strings.Contains(out, "wireguard") {
		t.Fatalf("wg0 is not a kernel wireguard link:\n%s", out)
	}
	p, err := a.Ping("", "100.64.0.2", 3, 200*time.Millisecond, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping 100.64.0.1 -> 100.64.0.2 through kernel WireGuard: %d/%d", p.Received, p.Transmitted)
	if p.Received != 3 {
		t.Fatalf("ping through kernel WireGuard: %d of 3 replies:\n%s", p.Received, p.Output)
	}
	transfer := strings.Fields(b.MustRun("wg", "show", "wg0", "transfer"))
	if len(transfer) != 3 || transfer[1] == "0" {
		t.Fatalf("wg show wg0 transfer in b: %v", transfer)
	}
	t.Logf("b's peer transfer: rx %s B, tx %s B", transfer[1], transfer[2])
}

// TestGuestKernelXFRM: a static tunnel-mode ESP SA pair (AES-GCM) and mirrored policies between
// two namespaces, a ping between their inner subnets, and the kernel's own accounting: the
// SA's packet counter and nft's `ipsec in reqid` match on the receiving side.
func TestGuestKernelXFRM(t *testing.T) {
	vmtest.SkipUnlessGuest(t)
	netns.Skip(t, "nft", "ping")
	r := netns.NewRun(t, "vmxf")
	a, b := r.NS("a"), r.NS("b")
	netns.VethAddr(a, "va", "198.51.100.1/24", b, "vb", "198.51.100.2/24")
	a.AddLoopback("203.0.113.1/32")  // inside a's subnet 203.0.113.0/28
	b.AddLoopback("203.0.113.17/32") // inside b's subnet 203.0.113.16/28

	const (
		ua, ub   = "198.51.100.1", "198.51.100.2"
		na, nb   = "203.0.113.0/28", "203.0.113.16/28"
		keyAB    = "0x0102030405060708090a0b0c0d0e0f1011121314" // 16 B key + 4 B salt
		keyBA    = "0x2122232425262728292a2b2c2d2e2f3031323334"
		spiAB    = "0x1001"
		spiBA    = "0x1002"
		reqid    = "1"
		aeadAlgo = "rfc4106(gcm(aes))"
	)
	for _, ns := range []*netns.NS{a, b} {
		ns.MustRun("ip", "xfrm", "state", "add", "src", ua, "dst", ub, "proto", "esp", "spi", spiAB,
			"reqid", reqid, "mode", "tunnel", "aead", aeadAlgo, keyAB, "128")
		ns.MustRun("ip", "xfrm", "state", "add", "src", ub, "dst", ua, "proto", "esp", "spi", spiBA,
			"reqid", reqid, "mode", "tunnel", "aead", aeadAlgo, keyBA, "128")
	}
	policy := func(ns *netns.NS, local, remote, lu, ru string) {
		ns.MustRun("ip", "xfrm", "policy", "add", "src", local, "dst", remote, "dir", "out",
			"tmpl", "src", lu, "dst", ru, "proto", "esp", "reqid", reqid, "mode", "tunnel")
		ns.MustRun("ip", "xfrm", "policy", "add", "src", remote, "dst", local, "dir", "in",
			"tmpl", "src", ru, "dst", lu, "proto", "esp", "reqid", reqid, "mode", "tunnel")
	}
	policy(a, na, nb, ua, ub)
	policy(b, nb, na, ub, ua)
	a.MustRun("ip", "route", "add", nb, "via", ub, "src", "203.0.113.1")
	b.MustRun("ip", "route", "add", na, "via", ua, "src", "203.0.113.17")
	if out, err := b.RunInput(`table inet vmtest {
  chain in {
    type filter hook input priority 0; policy accept;
    ip protocol esp counter name esp_in
    ipsec in reqid 1 ip saddr 203.0.113.1 counter name reqid_in
  }
  counter esp_in {}
  counter reqid_in {}
}
`, "nft", "-f", "-"); err != nil {
		t.Fatalf("nft ruleset with ipsec in reqid: %v: %s", err, out)
	}

	p, err := a.Ping("203.0.113.1", "203.0.113.17", 3, 200*time.Millisecond, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping 203.0.113.1 -> 203.0.113.17 through XFRM ESP: %d/%d", p.Received, p.Transmitted)
	if p.Received != 3 {
		t.Fatalf("ping through XFRM ESP: %d of 3 replies:\n%s\n%s", p.Received, p.Output, a.MustRun("ip", "-s", "xfrm", "state"))
	}
	st := a.MustRun("ip", "-s", "xfrm", "state", "get", "src", ua, "dst", ub, "proto", "esp", "spi", spiAB)
	if pk := saPackets(t, st); pk < 3 {
		t.Fatalf("SA %s counted %d packets, want >= 3:\n%s", spiAB, pk, st)
	} else {
		t.Logf("a's outbound SA %s: %d packets", spiAB, pk)
	}
	for _, name := range []string{"esp_in", "reqid_in"} {
		out := b.MustRun("nft", "list", "counter", "inet", "vmtest", name)
		m := regexp.MustCompile(`packets (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("nft counter %s: %s", name, out)
		}
		if n, _ := strconv.Atoi(m[1]); n < 3 {
			t.Fatalf("nft counter %s in b counted %d packets, want >= 3", name, n)
		}
		t.Logf("b's nft counter %s: %s packets", name, m[1])
	}
}

func mustKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// saPackets reads the packet count from `ip -s xfrm state` ("lifetime current:" then
// "N(bytes), M(packets)").
func saPackets(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`lifetime current:\s*\n\s*\d+\(bytes\), (\d+)\(packets\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no packet counter in:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}
