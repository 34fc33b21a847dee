package vmtest_test

// Small traffic helpers of the guest scenarios: sockets opened from the test process inside a
// network namespace (echo servers and clients are goroutines, not processes: each process
// start costs tens of milliseconds under TCG), nft counters, polling.

import (
	"bufio"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// echo serves a TCP echo (line by line) and a UDP echo on addr (host:port) inside ns until
// cleanup; udpSeen counts the datagrams it answered.
type echo struct{ udpSeen atomic.Int64 }

func startEcho(t testing.TB, ns *netns.NS, addr string) *echo {
	t.Helper()
	e := &echo{}
	var l net.Listener
	var pc net.PacketConn
	if err := netns.Do(ns.Name, func() error {
		var err error
		if l, err = net.Listen("tcp", addr); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatalf("echo on %s in %s: %v", addr, ns.Name, err)
	}
	t.Cleanup(func() { l.Close(); pc.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadBytes('\n')
					if err != nil {
						return
					}
					if _, err := c.Write(line); err != nil {
						return
					}
				}
			}()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			e.udpSeen.Add(1)
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	return e
}

func dialFrom(ns *netns.NS, network string, local netip.Addr, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if local.IsValid() {
		if network == "tcp" {
			d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
		} else {
			d.LocalAddr = &net.UDPAddr{IP: local.AsSlice()}
		}
	}
	var c net.Conn
	err := netns.Do(ns.Name, func() error {
		var err error
		c, err = d.Dial(network, addr)
		return err
	})
	return c, err
}

// request has one line echoed over a new TCP connection, or one datagram over UDP, from
// local inside ns to addr within timeout.
func request(ns *netns.NS, network string, local netip.Addr, addr string, timeout time.Duration) error {
	c, err := dialFrom(ns, network, local, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "ping\n" {
		return fmt.Errorf("echo %q", buf[:n])
	}
	return nil
}

// sendUDP sends n datagrams from local inside ns to addr, answers or not.
func sendUDP(t testing.TB, ns *netns.NS, local netip.Addr, addr string, n int) {
	t.Helper()
	c, err := dialFrom(ns, "udp", local, addr, time.Second)
	if err != nil {
		t.Fatalf("udp from %s in %s: %v", local, ns.Name, err)
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		if _, err := c.Write([]byte("probe\n")); err != nil {
			t.Fatalf("udp send from %s: %v", local, err)
		}
		time.Sleep(20 * time.Millisecond) // pacing, not synchronisation
	}
}

// stream is a continuous exchange over one connection (TCP) or one socket (UDP): a numbered
// line every interval, each expected back.
type stream struct {
	name       string
	conn       net.Conn
	every      time.Duration
	stop       chan struct{}
	writer     sync.WaitGroup // the sending goroutine
	done       sync.WaitGroup // both goroutines
	sent, back atomic.Int64
	errMu      sync.Mutex
	err        error
}

func startStream(t testing.TB, name string, ns *netns.NS, network string, local netip.Addr, addr string, every time.Duration) *stream {
	t.Helper()
	c, err := dialFrom(ns, network, local, addr, 5*time.Second)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	s := &stream{name: name, conn: c, every: every, stop: make(chan struct{})}
	t.Cleanup(func() { s.halt() })
	s.done.Add(2)
	s.writer.Add(1)
	go func() {
		defer s.done.Done()
		defer s.writer.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(c, "%d\n", i); err != nil {
				select {
				case <-s.stop: // a write cut short by finish's deadline is not a lost packet
					return
				default:
				}
				s.fail(err)
				continue
			}
			s.sent.Add(1)
		}
	}()
	go func() {
		defer s.done.Done()
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				select {
				case <-s.stop:
				default:
					if network == "tcp" {
						s.fail(err)
						return
					}
					continue // UDP: a refused datagram (ICMP) is a lost one
				}
				return
			}
			s.back.Add(int64(countLines(buf[:n])))
		}
	}()
	return s
}

func countLines(b []byte) int {
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

func (s *stream) fail(err error) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *stream) halt() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	_ = s.conn.SetDeadline(time.Now())
	s.done.Wait()
	s.conn.Close()
}

// finish stops sending, waits up to grace for the answers in flight and reports sent, answered
// and the first error.
func (s *stream) finish(grace time.Duration) (sent, back int64, err error) {
	close(s.stop)
	// The writer may be between a tick and its count: wait for it, so that no line is sent
	// (and counted) after the answers were waited for.
	s.writer.Wait()
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && s.back.Load() < s.sent.Load() {
		time.Sleep(20 * time.Millisecond)
	}
	_ = s.conn.SetDeadline(time.Now())
	s.done.Wait()
	s.conn.Close()
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.sent.Load(), s.back.Load(), s.err
}

// waitUntil polls f every 50 ms until it returns nil or timeout passes.
func waitUntil(t testing.TB, what string, timeout time.Duration, f func() error) {
	t.Helper()
	if err := netns.Eventually(timeout, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

var packetsRE = regexp.MustCompile(`packets (\d+)`)

// nftCounter reads a named counter's packets.
func nftCounter(t testing.TB, ns *netns.NS, family, table, name string) int {
	t.Helper()
	out := ns.MustRun("nft", "list", "counter", family, table, name)
	m := packetsRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("counter %s: %s", name, out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// peerDropsIn is how many packets from a peer's subnets the gateway's ruleset has dropped:
// the sum of its subnets' elements in the drops sets (nft.DropCounters of the model m).
func peerDropsIn(t testing.TB, ns *netns.NS, m *model.Gateway, peer string) int {
	t.Helper()
	drops, err := nft.ParseDrops([]byte(ns.MustRun("nft", "-j", "list", "table", "ip", nft.Table)))
	if err != nil {
		t.Fatal(err)
	}
	names, err := nft.DropCounters(m)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range names[peer].In {
		n += int(drops[name].Packets)
	}
	return n
}
