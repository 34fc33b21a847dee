package netns

import "testing"

// TestIperf3AndIPStats: a timed iperf3 stream through a router is parsed (bytes both ways,
// rate, MSS), and the router's own IP counters see what happens at its narrow link (1400 bytes
// out, while both ends think 1500): path MTU discovery (FragFails), no fragments.
func TestIperf3AndIPStats(t *testing.T) {
	Skip(t, "iperf3")
	r := NewRun(t, "bnsip")
	a, b, c := r.NS("a"), r.NS("b"), r.NS("c")
	VethAddr(a, "va", "192.0.2.1/30", b, "vb", "192.0.2.2/30")
	VethAddr(b, "vc", "192.0.2.5/30", c, "vc", "192.0.2.6/30")
	b.MustRun("ip", "link", "set", "vc", "mtu", "1400")
	b.Sysctl("net.ipv4.ip_forward", "1")
	a.MustRun("ip", "route", "add", "default", "via", "192.0.2.2")
	c.MustRun("ip", "route", "add", "default", "via", "192.0.2.5")
	c.Start("iperf3", "-s", "-B", "192.0.2.6")

	before, err := b.IPStats()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before["FragFails"]; !ok {
		t.Fatalf("IPStats has no FragFails: %v", before)
	}
	res, err := a.Iperf3("192.0.2.6", "-t", "1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent == 0 || res.Received == 0 || res.Mbits() <= 0 {
		t.Fatalf("iperf3 result %+v", res)
	}
	if res.MSS <= 0 || res.MSS > 1460 {
		t.Fatalf("client MSS %d, want 1..1460 (what the SYNs agreed on a 1500-byte path)", res.MSS)
	}
	after, err := b.IPStats()
	if err != nil {
		t.Fatal(err)
	}
	// TCP sets DF: the router drops the client's first full-size segments and answers
	// "fragmentation needed" (FragFails); it fragments nothing.
	if after["FragFails"] <= before["FragFails"] {
		t.Errorf("the router's FragFails did not grow (%d -> %d): no path MTU discovery seen", before["FragFails"], after["FragFails"])
	}
	if f := Fragments(after) - Fragments(before); f != 0 {
		t.Errorf("the router made or received %d fragments of DF traffic", f)
	}
	t.Logf("iperf3: %.0f Mbit/s, MSS %d; router FragFails +%d", res.Mbits(), res.MSS, after["FragFails"]-before["FragFails"])
}
