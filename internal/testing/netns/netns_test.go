package netns

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestVethExecAndProcesses(t *testing.T) {
	Skip(t, "ping", "socat")
	run := NewRun(t, "bnst")
	a, b := run.NS("a"), run.NS("b")
	Veth(a, "veth-a", b, "veth-b")
	a.MustRun("ip", "addr", "add", "192.0.2.1/24", "dev", "veth-a")
	b.MustRun("ip", "addr", "add", "192.0.2.2/24", "dev", "veth-b")
	if out := a.MustRun("ping", "-c", "1", "-W", "2", "192.0.2.2"); !strings.Contains(out, "1 received") {
		t.Fatalf("ping: %s", out)
	}
	// The veth ends exist only inside their namespaces.
	if out, _ := exec.Command("ip", "link", "show", "veth-a").CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("veth-a is visible outside its namespace: %s", out)
	}
	b.Sysctl("net.ipv4.ip_forward", "1")
	if got := strings.TrimSpace(b.MustRun("cat", "/proc/sys/net/ipv4/ip_forward")); got != "1" {
		t.Errorf("ip_forward = %q", got)
	}

	p := b.Start("socat", "TCP-LISTEN:7000,fork,reuseaddr", "SYSTEM:echo hello")
	err := Eventually(10*time.Second, func() error {
		out, _, err := a.Exec("", "socat", "-t", "2", "-", "TCP:192.0.2.2:7000,connect-timeout=1")
		if strings.TrimSpace(out) != "hello" {
			return fmt.Errorf("got %q: %v", out, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Stop()
	if !p.Exited() {
		t.Fatal("process still running after Stop")
	}
	if _, _, err := a.Exec("", "socat", "-t", "1", "-", "TCP:192.0.2.2:7000,connect-timeout=1"); err == nil {
		t.Error("listener still answers after Stop")
	}
}

func TestSweep(t *testing.T) {
	Skip(t)
	// A pid that no longer exists: a process that has been waited for.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("bnsw%d-1-stale", cmd.Process.Pid)
	live := fmt.Sprintf("bnsw%d-1-live", os.Getpid())
	for _, n := range []string{dead, live} {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			t.Fatalf("ip netns add %s: %v: %s", n, err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", dead).Run()
		_ = exec.Command("ip", "netns", "del", live).Run()
	})
	if err := Sweep("bnsw"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/run/netns/" + dead); !os.IsNotExist(err) {
		t.Errorf("stale namespace %s survived the sweep (%v)", dead, err)
	}
	if _, err := os.Stat("/run/netns/" + live); err != nil {
		t.Errorf("live namespace %s was swept: %v", live, err)
	}
}
