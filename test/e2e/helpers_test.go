package e2e

// Shared helpers of the live-change, agent-restart and benchmark scenarios: sockets opened
// from the test process inside a network namespace (so traffic generators and echo servers
// are goroutines, not processes), continuous UDP and TCP streams that count every request,
// and a small lab (one gateway, a LAN with echo backends, any number of client sites) that
// works with testing.TB, so benchmarks can use it as well as tests.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/firewall"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/status"
	agentwg "github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/deviceconfig"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	rwg "github.com/bnerd/bnerd-vpn-operator/internal/render/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/gen"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// ---------------------------------------------------------------------------------------------
// Sockets inside a namespace, opened from the test process.

// dialIn dials addr from inside ns, from local (may be the zero Addr) on an ephemeral port.
func dialIn(ns, network string, local netip.Addr, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if local.IsValid() {
		switch network {
		case "tcp":
			d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
		case "udp":
			d.LocalAddr = &net.UDPAddr{IP: local.AsSlice()}
		}
	}
	var c net.Conn
	err := netns.Do(ns, func() error {
		var err error
		c, err = d.Dial(network, addr)
		return err
	})
	return c, err
}

// echoServers serves, inside ns, a TCP echo (every byte back) and a UDP echo (every datagram
// back) on addr:port; they end at cleanup.
func echoServers(tb testing.TB, ns string, addr netip.Addr, port int) {
	tb.Helper()
	ap := netip.AddrPortFrom(addr, uint16(port)).String()
	var l net.Listener
	var pc net.PacketConn
	if err := netns.Do(ns, func() error {
		var err error
		if l, err = net.Listen("tcp", ap); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", ap)
		return err
	}); err != nil {
		tb.Fatalf("echo servers on %s in %s: %v", ap, ns, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	tb.Cleanup(func() {
		l.Close()
		pc.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
}

// ---------------------------------------------------------------------------------------------
// Continuous traffic.

// udpStream sends a numbered datagram every interval from one UDP socket (one flow: one
// conntrack entry, one tunnel) to an echo server and records when each came back. The socket
// is not connected: a send that fails (no route yet) is counted and the stream goes on.
type udpStream struct {
	conn  net.PacketConn
	to    *net.UDPAddr
	every time.Duration

	mu        sync.Mutex
	sent      []time.Time // by sequence number
	answered  map[uint64]time.Time
	sendErrs  int
	lastError error
	stop      chan struct{}
	done      chan struct{}
	recvDone  chan struct{}
}

// startUDPStream starts a stream from local inside ns to addr.
func startUDPStream(tb testing.TB, ns string, local netip.Addr, addr string, every time.Duration) *udpStream {
	tb.Helper()
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	var c net.PacketConn
	if err := netns.Do(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp", &net.UDPAddr{IP: local.AsSlice()})
		return err
	}); err != nil {
		tb.Fatalf("UDP stream %s -> %s: %v", ns, addr, err)
	}
	s := &udpStream{conn: c, to: to, every: every, answered: map[uint64]time.Time{},
		stop: make(chan struct{}), done: make(chan struct{}), recvDone: make(chan struct{})}
	tb.Cleanup(func() { s.halt(); c.Close(); <-s.recvDone })
	go s.receive()
	go s.send()
	return s
}

func (s *udpStream) send() {
	defer close(s.done)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	buf := make([]byte, 16)
	copy(buf[8:], "bnerdseq")
	for {
		s.mu.Lock()
		seq := uint64(len(s.sent))
		s.sent = append(s.sent, time.Now())
		s.mu.Unlock()
		binary.BigEndian.PutUint64(buf, seq)
		if _, err := s.conn.WriteTo(buf, s.to); err != nil {
			s.mu.Lock()
			s.sendErrs++
			s.lastError = err
			s.mu.Unlock()
		}
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

func (s *udpStream) receive() {
	defer close(s.recvDone)
	buf := make([]byte, 2048)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		now := time.Now()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.mu.Lock()
			s.lastError = err
			s.mu.Unlock()
			continue
		}
		if u, ok := from.(*net.UDPAddr); !ok || !u.IP.Equal(s.to.IP) || u.Port != s.to.Port || n != 16 || string(buf[8:16]) != "bnerdseq" {
			continue
		}
		seq := binary.BigEndian.Uint64(buf)
		s.mu.Lock()
		if _, dup := s.answered[seq]; !dup && seq < uint64(len(s.sent)) {
			s.answered[seq] = now
		}
		s.mu.Unlock()
	}
}

func (s *udpStream) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// answeredCount is how many requests have been answered so far.
func (s *udpStream) answeredCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.answered)
}

// firstAnswer is when the first answer arrived (zero when none has).
func (s *udpStream) firstAnswer() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, at := range s.answered {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

// streamReport is what a stream saw.
type streamReport struct {
	Sent, Answered int
	// Lost are the requests never answered; Outage the longest stretch of consecutive lost
	// requests (from the first one's send to the next answered one's).
	Lost   []uint64
	Outage time.Duration
	// MaxRTT is the slowest answer, MaxGap the longest time between two answers.
	MaxRTT, MaxGap time.Duration
	SendErrs       int
	LastError      error
}

func (r streamReport) String() string {
	return fmt.Sprintf("sent %d, answered %d, lost %d (%s), longest outage %s, max RTT %s, max gap between answers %s, send errors %d, last error %v",
		r.Sent, r.Answered, len(r.Lost), seqRanges(r.Lost), r.Outage.Round(time.Millisecond), r.MaxRTT.Round(time.Millisecond),
		r.MaxGap.Round(time.Millisecond), r.SendErrs, r.LastError)
}

// finish stops sending, waits up to grace for the answers still in flight, and reports.
func (s *udpStream) finish(grace time.Duration) streamReport {
	s.halt()
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		all := len(s.answered) == len(s.sent)
		s.mu.Unlock()
		if all {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for in-flight answers until the deadline
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := streamReport{Sent: len(s.sent), Answered: len(s.answered), SendErrs: s.sendErrs, LastError: s.lastError}
	var times []time.Time
	var outageStart time.Time
	for seq, sentAt := range s.sent {
		at, ok := s.answered[uint64(seq)]
		if !ok {
			r.Lost = append(r.Lost, uint64(seq))
			if outageStart.IsZero() {
				outageStart = sentAt
			}
			continue
		}
		if !outageStart.IsZero() {
			r.Outage = max(r.Outage, at.Sub(outageStart))
			outageStart = time.Time{}
		}
		r.MaxRTT = max(r.MaxRTT, at.Sub(sentAt))
		times = append(times, at)
	}
	if !outageStart.IsZero() {
		r.Outage = max(r.Outage, time.Since(outageStart))
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(times); i++ {
		r.MaxGap = max(r.MaxGap, times[i].Sub(times[i-1]))
	}
	return r
}

// seqRanges renders sequence numbers as ranges: "3-7,12".
func seqRanges(seqs []uint64) string {
	if len(seqs) == 0 {
		return "none"
	}
	var parts []string
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatUint(seqs[i], 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", seqs[i], seqs[j]))
		}
		if len(parts) == 10 {
			parts = append(parts, "...")
			break
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// tcpStream writes a numbered line every interval over one TCP connection to an echo server
// and checks that every line comes back, in order, on the same connection.
type tcpStream struct {
	conn  net.Conn
	every time.Duration

	mu       sync.Mutex
	sent     int
	echoed   int
	lastEcho time.Time
	maxGap   time.Duration
	err      error
	stop     chan struct{}
	done     chan struct{}
	recvDone chan struct{}
}

// startTCPStream connects from local inside ns to addr and starts streaming.
func startTCPStream(tb testing.TB, ns string, local netip.Addr, addr string, every time.Duration) *tcpStream {
	tb.Helper()
	c, err := dialIn(ns, "tcp", local, addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("TCP stream %s -> %s: %v", ns, addr, err)
	}
	s := &tcpStream{conn: c, every: every, lastEcho: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{}), recvDone: make(chan struct{})}
	tb.Cleanup(func() { s.halt(); c.Close(); <-s.recvDone })
	go s.receive()
	go s.send()
	return s
}

func (s *tcpStream) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

func (s *tcpStream) send() {
	defer close(s.done)
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		_ = s.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(s.conn, "%d\n", seq); err != nil {
			s.fail(fmt.Errorf("writing line %d: %w", seq, err))
			return
		}
		s.mu.Lock()
		s.sent++
		s.mu.Unlock()
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

func (s *tcpStream) receive() {
	defer close(s.recvDone)
	r := bufio.NewReader(s.conn)
	for want := 0; ; want++ {
		line, err := r.ReadString('\n')
		now := time.Now()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.fail(fmt.Errorf("reading echo %d: %w", want, err))
			}
			return
		}
		if got := strings.TrimSpace(line); got != strconv.Itoa(want) {
			s.fail(fmt.Errorf("echo %d: got %q (out of order or corrupted)", want, got))
			return
		}
		s.mu.Lock()
		s.echoed++
		s.maxGap = max(s.maxGap, now.Sub(s.lastEcho))
		s.lastEcho = now
		s.mu.Unlock()
	}
}

// echoes is how many lines have come back so far.
func (s *tcpStream) echoes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.echoed
}

func (s *tcpStream) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

// finish stops writing, waits up to grace for the echoes in flight, and reports: lines sent,
// lines echoed (in order), the longest time between two echoes, and the first error.
func (s *tcpStream) finish(grace time.Duration) (sent, echoed int, maxGap time.Duration, err error) {
	s.halt()
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		all := s.echoed == s.sent || s.err != nil
		s.mu.Unlock()
		if all {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling for in-flight echoes until the deadline
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.echoed, s.maxGap, s.err
}

// breachProbe tries, every interval, to reach targets the peer must not reach: for each TCP
// target a new connection (its own SYN through the tunnel), for each UDP target a datagram
// from one socket. Every established connection and every answer is a breach.
type breachProbe struct {
	mu                                             sync.Mutex
	tcpAttempts, tcpBreaches, udpSent, udpBreaches int
	breachAt                                       []string

	udp  []net.PacketConn
	stop chan struct{}
	wg   sync.WaitGroup
}

// startBreachProbe probes from local inside ns; targets are "tcp:host:port" or
// "udp:host:port".
func startBreachProbe(tb testing.TB, ns string, local netip.Addr, every time.Duration, targets ...string) *breachProbe {
	tb.Helper()
	p := &breachProbe{stop: make(chan struct{})}
	type udpTarget struct {
		conn net.PacketConn
		to   *net.UDPAddr
	}
	var tcps []string
	var udps []udpTarget
	for _, target := range targets {
		network, addr, _ := strings.Cut(target, ":")
		switch network {
		case "tcp":
			tcps = append(tcps, addr)
		case "udp":
			to, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				tb.Fatal(err)
			}
			var c net.PacketConn
			if err := netns.Do(ns, func() error {
				var err error
				c, err = net.ListenUDP("udp", &net.UDPAddr{IP: local.AsSlice()})
				return err
			}); err != nil {
				tb.Fatal(err)
			}
			udps = append(udps, udpTarget{c, to})
			p.udp = append(p.udp, c)
		default:
			tb.Fatalf("probe target %q", target)
		}
	}
	tb.Cleanup(p.finish)
	breach := func(what string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.breachAt = append(p.breachAt, time.Now().Format(time.StampMilli)+" "+what)
	}
	for _, u := range udps {
		p.wg.Add(1)
		go func() { // answers to the UDP probes
			defer p.wg.Done()
			buf := make([]byte, 2048)
			for {
				_, from, err := u.conn.ReadFrom(buf)
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err == nil {
					p.mu.Lock()
					p.udpBreaches++
					p.mu.Unlock()
					breach("udp " + u.to.String() + " answered from " + from.String())
				}
			}
		}()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			for _, u := range udps {
				p.mu.Lock()
				p.udpSent++
				p.mu.Unlock()
				_, _ = u.conn.WriteTo([]byte("breach?"), u.to)
			}
			for _, addr := range tcps {
				p.mu.Lock()
				p.tcpAttempts++
				p.mu.Unlock()
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					c, err := dialIn(ns, "tcp", local, addr, 500*time.Millisecond)
					if err == nil {
						c.Close()
						p.mu.Lock()
						p.tcpBreaches++
						p.mu.Unlock()
						breach("tcp " + addr + " connected")
					}
				}()
			}
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// finish stops probing and waits for the attempts in flight.
func (p *breachProbe) finish() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	for _, c := range p.udp {
		c.Close()
	}
	p.wg.Wait()
}

func (p *breachProbe) attempts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tcpAttempts
}

func (p *breachProbe) breaches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tcpBreaches + p.udpBreaches
}

func (p *breachProbe) breachTimes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.breachAt)
}

func (p *breachProbe) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d TCP connection attempts (%d connected), %d UDP datagrams (%d answered)",
		p.tcpAttempts, p.tcpBreaches, p.udpSent, p.udpBreaches)
}

// ---------------------------------------------------------------------------------------------

var namespaceSeq atomic.Int64

// uniqueNamespace is base with a sequence number: a test may run more than once in one
// process (-count, benchmarks' growing b.N), and namespaces are not deleted in envtest.
func uniqueNamespace(base string) string {
	return fmt.Sprintf("%s-%d", base, namespaceSeq.Add(1))
}

// agentKubeconfig makes the API server reachable inside ns (see apiProxy) and writes a
// kubeconfig for the gateway's ServiceAccount. Agents started one after the other in ns share
// it.
func agentKubeconfig(tb testing.TB, ns *netns.NS, namespace, gateway string) string {
	tb.Helper()
	return serviceAccountKubeconfig(tb, namespace, children.Name(gateway), apiProxy(tb, ns))
}

// agentLogTimes returns when the agent logged msg, in order (its log is zap JSON, one object
// a line, with "ts" as seconds since the epoch or as RFC 3339).
func agentLogTimes(output, msg string) []time.Time {
	var out []time.Time
	for _, line := range strings.Split(output, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		var entry struct {
			Msg string          `json:"msg"`
			TS  json.RawMessage `json:"ts"`
		}
		if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != msg {
			continue
		}
		var secs float64
		var text string
		switch {
		case json.Unmarshal(entry.TS, &secs) == nil:
			out = append(out, time.Unix(0, int64(secs*1e9)))
		case json.Unmarshal(entry.TS, &text) == nil:
			if ts, err := time.Parse(time.RFC3339Nano, text); err == nil {
				out = append(out, ts)
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------------
// The lab: one gateway with the agent, a LAN with echo backends, client sites.

// Lab addresses. The gateway's public address 198.51.100.1 sits on every site link as a
// point-to-point address (each site's link is its own /32 pair), so every site reaches the
// gateway at the same address, as on the Internet. The LAN is the cluster side, inside
// internalSourceCIDRs.
var (
	labGatewayAddr = netip.MustParseAddr("198.51.100.1")
	labGatewayLAN  = "198.51.100.129/25"
	labBackendLAN  = "198.51.100.130/25"
	labBackend     = netip.MustParseAddr("198.51.100.130")
)

// Exposures of the lab gateway: "web" (TCP 80 -> 8080 and UDP 53 -> 8080) and "other" (TCP
// 80 -> 8081 and UDP 53 -> 8081), each an echo server in the LAN.
const (
	labWebPort   = 8080
	labOtherPort = 8081
	// labCanaryPort is an echo service on the gateway itself, on every address (as any
	// process in the pod could listen): no peer may reach it, and only the ruleset stops them.
	labCanaryPort = 7777
)

type lab struct {
	tb    testing.TB
	proto vpnv1.Protocol
	k8sNS string

	gw, lan  *netns.NS
	nrun     *netns.Run      // WireGuard: namespaces
	crun     *charontest.Run // IPsec: namespaces (charon needs charontest's)
	cgw      *charontest.Netns
	gwCharon *charontest.Charon
	gwKey    wgtypes.Key

	serviceCIDR   netip.Prefix
	webVIP, other netip.Addr
	kubeconfig    string
	sites         int
	state         string // stateDir
}

// labSite is one client site: its namespace, link, subnet and device.
type labSite struct {
	name string
	ns   *netns.NS
	cns  *charontest.Netns // IPsec
	ext  netip.Addr        // its public address
	// inside is the device's own address when the site is behind a NAT (newSiteBehindNAT),
	// which translates it to ext; zero otherwise (the device has ext).
	inside netip.Addr
	subnet netip.Prefix // behind its device
	addr   netip.Addr   // a host in subnet, the traffic's source
	// claims are more local networks its IPsec device proposes than its VPNPeer has (a
	// hostile site claiming another's LAN).
	claims []netip.Prefix
	key    wgtypes.Key // WireGuard
	psk    string      // IPsec
	// conn are the site's IKE version and its rekey and reauthentication times (zero: charon's);
	// respondOnly: its charon never initiates (the gateway does).
	conn        charontest.ConnOptions
	respondOnly bool
	// perSubnet, when set, are the site's subnets, each negotiated as a CHILD_SA of its own
	// (as FortiGate, PAN-OS and MikroTik configure phase 2), instead of subnet in one.
	perSubnet []netip.Prefix
	wg        *wgtest.Node
	charon    *charontest.Charon
}

// newLab builds the gateway (CRs included, rendered) and its LAN. prefix names the WireGuard
// lab's network namespaces (IPsec labs use charontest's).
func newLab(tb testing.TB, proto vpnv1.Protocol, k8sNamespace, prefix string, extra ...gen.GatewayMod) *lab {
	tb.Helper()
	ctx := context.Background()
	l := &lab{tb: tb, proto: proto}
	if proto == vpnv1.ProtocolIPsec {
		l.crun = charontest.NewRun(tb)
		l.cgw = l.crun.Netns("gw")
		l.gw = netns.Open(tb, l.cgw.Name)
		l.lan = netns.Open(tb, l.crun.Netns("lan").Name)
	} else {
		l.nrun = netns.NewRun(tb, prefix)
		l.gw, l.lan = l.nrun.NS("gw"), l.nrun.NS("lan")
	}
	netns.Veth(l.gw, "eth0", l.lan, "eth0")
	l.gw.MustRun("ip", "addr", "add", labGatewayLAN, "dev", "eth0")
	l.lan.MustRun("ip", "addr", "add", labBackendLAN, "dev", "eth0")
	l.gw.Sysctl("net.ipv4.ip_forward", "1")
	echoServers(tb, l.lan.Name, labBackend, labWebPort)
	echoServers(tb, l.lan.Name, labBackend, labOtherPort)

	l.k8sNS = newNamespace(tb, k8sNamespace)
	ports := func(target int32) []vpnv1.PortSpec {
		return []vpnv1.PortSpec{{Port: 80, TargetPort: target}, {Port: 53, TargetPort: target, Protocol: vpnv1.PortProtocolUDP}}
	}
	mods := []gen.GatewayMod{gen.Protocol(proto), gen.HostNetwork("node-1", labGatewayAddr.String()),
		gen.Exposure("web", labBackend.String(), ports(labWebPort)...),
		gen.Exposure("other", labBackend.String(), ports(labOtherPort)...)}
	if proto == vpnv1.ProtocolIPsec {
		mods = append(mods, gen.DPDDelay(time.Second))
	} else {
		l.gwKey = wgtest.NewKey(tb)
		if err := env.Client.Create(ctx, gen.WireGuardKeySecret(l.k8sNS, "gw-key", l.gwKey.String())); err != nil {
			tb.Fatal(err)
		}
		mods = append(mods, gen.WireGuardListenPort(51820), gen.WireGuardPrivateKey("gw-key", "privateKey"))
	}
	gw := gen.VPNGateway(l.k8sNS, "gw", append(mods, extra...)...)
	if err := env.Client.Create(ctx, gw); err != nil {
		tb.Fatal(err)
	}
	waitFor(tb, "gateway rendered", 30*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(gw), gw); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(gw.Status.Conditions, vpnv1.ConditionRendered) || len(gw.Status.Exposures) != 2 || gw.Status.ServiceCIDR == "" {
			return fmt.Errorf("status %+v", gw.Status)
		}
		return nil
	})
	l.serviceCIDR = netip.MustParsePrefix(gw.Status.ServiceCIDR)
	for _, e := range gw.Status.Exposures {
		switch e.Name {
		case "web":
			l.webVIP = netip.MustParseAddr(e.VirtualIP)
		case "other":
			l.other = netip.MustParseAddr(e.VirtualIP)
		}
	}
	if proto == vpnv1.ProtocolIPsec {
		l.gwCharon = charontest.Start(tb, l.cgw, "gw", charontest.Config{Extra: imageCharonSettings})
	}
	echoServers(tb, l.gw.Name, netip.IPv4Unspecified(), labCanaryPort)
	l.kubeconfig = agentKubeconfig(tb, l.gw, l.k8sNS, "gw")
	return l
}

// imageCharonSettings are the gateway image's charon settings that decide how tunnels behave
// (hack/lab/image/strongswan.conf; TestLabCharonHasTheImagesSettings keeps them the same).
const imageCharonSettings = "  make_before_break = yes"

// gatewayCharonConfig is the gateway image's strongswan.conf as far as the tests need it:
// charon's table 220 only for packets the ruleset marks as the gateway's (nft.RouteMark;
// hack/lab/image/strongswan.conf). The lab's charon (newLab) goes without it, so the tests that
// prove the ruleset alone stops a peer (their controls delete it) are not helped by routing.
func gatewayCharonConfig() charontest.Config {
	return charontest.Config{Extra: fmt.Sprintf("plugins {\n    kernel-netlink {\n      fwmark = %#x/%#x\n    }\n  }", nft.RouteMark, nft.RouteMark)}
}

// web and otherAddr are the exposures' addresses for TCP (port 80) and UDP (port 53).
func (l *lab) web(port int) string       { return netip.AddrPortFrom(l.webVIP, uint16(port)).String() }
func (l *lab) otherAddr(port int) string { return netip.AddrPortFrom(l.other, uint16(port)).String() }

// gatewayService is the gateway's own address in its service CIDR (the WireGuard device's
// address; on lo for IPsec), where peers reach the canary.
func (l *lab) gatewayService(port int) string {
	return netip.AddrPortFrom(l.serviceCIDR.Addr().Next(), uint16(port)).String()
}

// startAgent starts the real agent binary in the gateway's namespace as the gateway's
// ServiceAccount, with extra flags (after the lab's).
func (l *lab) startAgent(extra ...string) *netns.Process {
	l.tb.Helper()
	args := []string{"env", "KUBECONFIG=" + l.kubeconfig, agentBin, "run", "--userspace-dataplane",
		"--gateway", "gw", "--namespace", l.k8sNS, "--metrics-addr", "127.0.0.1:9090", "--status-interval", "1s",
		"--zap-time-encoding", "rfc3339nano",
		// The tests stop the agent alone while charon runs: it keeps the ruleset after this.
		"--teardown-wait", "5s"}
	if l.proto == vpnv1.ProtocolIPsec {
		args = append(args, "--vici-socket", l.gwCharon.URI())
	} else {
		// The device is the host-network gateway's own (l.wgDevice(), which the rendered
		// ruleset names). Its UAPI socket is machine-wide, but the name is per gateway (and the
		// lab's namespace is unique), so labs do not collide.
		args = append(args, "--wireguard-mode", "userspace")
		removeUAPISocketAtCleanup(l.tb, l.wgDevice())
		// The peers' endpoints, kept across the agent's restarts (the pod's emptyDir in a
		// cluster): the test's own, not the machine-wide default beside the UAPI socket.
		args = append(args, "--wireguard-state-file", filepath.Join(l.stateDir(), "wg0.endpoints.json"))
	}
	return l.gw.Start(append(args, extra...)...)
}

// stateDir is the lab's directory for the agents' WireGuard endpoint state, the same for every
// agent of the lab (as a pod's emptyDir is for its restarted containers).
func (l *lab) stateDir() string {
	if l.state == "" {
		l.state = l.tb.TempDir()
	}
	return l.state
}

// removeUAPISocketAtCleanup removes the userspace device's UAPI socket, which a killed agent
// leaves behind, and the agent's endpoint state file when it used the default one beside it.
// Registered before the agent's process: runs after it is killed.
func removeUAPISocketAtCleanup(tb testing.TB, devices ...string) {
	tb.Cleanup(func() {
		for _, d := range devices {
			_ = os.Remove(filepath.Join(agentwg.UAPIDir, d+".sock"))
		}
		_ = os.Remove(filepath.Join(agentwg.UAPIDir, "wg0.endpoints.json"))
	})
}

// wgDevice is the name of the lab's (host-network) WireGuard gateway's device, as the agent
// and the ruleset derive it from the gateway.
func (l *lab) wgDevice() string { return hostNetworkWGDevice(l.k8sNS, "gw") }

// hostNetworkWGDevice is the WireGuard device of the host-network gateway namespace/name.
func hostNetworkWGDevice(namespace, name string) string {
	return nft.WireGuardDevice(&model.Gateway{Namespace: namespace, Name: name, Protocol: model.ProtocolWireGuard,
		Endpoint: model.Endpoint{Kind: model.EndpointHostNetwork}})
}

// tunnelInterface is where the gateway's decrypted tunnel traffic enters and leaves: the
// kernel-libipsec TUN device (IPsec) or the gateway's WireGuard device.
func (l *lab) tunnelInterface() string {
	if l.proto == vpnv1.ProtocolIPsec {
		return nft.LibipsecInterface
	}
	return l.wgDevice()
}

// tunnelSelectors is what the gateway's tunnels carry, as text: charon's SAs (IPsec), or each
// WireGuard peer's allowed IPs from the gateway's device (through its UAPI socket), a line
// per prefix after the first 8 characters of the peer's key.
func (l *lab) tunnelSelectors() string {
	l.tb.Helper()
	if l.proto == vpnv1.ProtocolIPsec {
		sas, err := l.gwCharon.Swanctl("--list-sas")
		if err != nil {
			l.tb.Fatal(err)
		}
		return sas
	}
	wc, err := wgctrl.New()
	if err != nil {
		l.tb.Fatal(err)
	}
	defer wc.Close()
	dev, err := wc.Device(l.wgDevice())
	if err != nil {
		l.tb.Fatal(err)
	}
	var dump []string
	for _, p := range dev.Peers {
		for _, a := range p.AllowedIPs {
			dump = append(dump, p.PublicKey.String()[:8]+" "+a.String())
		}
	}
	return strings.Join(dump, "\n")
}

// agentGet does an HTTP GET on the agent's metrics listener (inside the gateway's namespace).
func (l *lab) agentGet(path string) (int, string, error) {
	c, err := dialIn(l.gw.Name, "tcp", netip.Addr{}, "127.0.0.1:9090", 2*time.Second)
	if err != nil {
		return 0, "", err
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return c, nil },
		DisableKeepAlives: true,
	}}
	resp, err := hc.Get("http://127.0.0.1:9090" + path)
	if err != nil {
		c.Close()
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitAgentReady waits until the agent has applied a configuration (/readyz).
func (l *lab) waitAgentReady(agent *netns.Process, timeout time.Duration) {
	l.tb.Helper()
	waitFor(l.tb, "agent ready", timeout, func() error {
		if agent.Exited() {
			return fmt.Errorf("agent exited: %s", tail(agent.Output()))
		}
		code, body, err := l.agentGet("/readyz")
		if err != nil || code != http.StatusOK {
			return fmt.Errorf("readyz %d %q %v", code, body, err)
		}
		return nil
	})
}

// newSite creates a site's namespace and its link to the gateway (no device, no CR yet).
func (l *lab) newSite(name string) *labSite {
	l.tb.Helper()
	s, i := l.reserveSite(name)
	s.ns, s.cns = l.namespace("s" + strconv.Itoa(i))
	l.linkToGateway(i, s.ext, s.ns)
	l.siteCredentials(s)
	return s
}

// newSiteBehindNAT is newSite with a NAT between the site and the gateway, as a site on a
// consumer line or behind a cloud's NAT gateway: the site's device has a private address
// (100.127.0.<4i+2>/30, outside the service CIDR pool) and the NAT namespace between them
// translates it to the site's public address ext, its source ports to portsFrom..portsFrom+99
// (never the device's own 500 or 4500, so the gateway sees a NAT). It returns the NAT's
// namespace (remapNAT changes its ports).
func (l *lab) newSiteBehindNAT(name string, portsFrom int) (*labSite, *netns.NS) {
	l.tb.Helper()
	s, i := l.reserveSite(name)
	s.inside = netip.AddrFrom4([4]byte{100, 127, 0, byte(4*i + 2)})
	nat, _ := l.namespace("n" + strconv.Itoa(i))
	s.ns, s.cns = l.namespace("s" + strconv.Itoa(i))
	l.linkToGateway(i, s.ext, nat)
	netns.Veth(nat, "in0", s.ns, "ext0")
	natInside := s.inside.Prev()
	nat.MustRun("ip", "addr", "add", natInside.String()+"/30", "dev", "in0")
	s.ns.MustRun("ip", "addr", "add", s.inside.String()+"/30", "dev", "ext0")
	s.ns.MustRun("ip", "route", "add", "default", "via", natInside.String())
	nat.Sysctl("net.ipv4.ip_forward", "1")
	nat.MustRun("nft", natRuleset(s.ext, portsFrom))
	l.siteCredentials(s)
	return s, nat
}

// reserveSite takes the lab's next site slot i: the site's public address 198.51.100.<2+i>,
// its subnet 203.0.113.<16i>/28 and the host in it the traffic comes from.
func (l *lab) reserveSite(name string) (*labSite, int) {
	l.tb.Helper()
	i := l.sites
	l.sites++
	if i > 15 {
		l.tb.Fatal("the lab has room for 16 sites")
	}
	return &labSite{
		name:   name,
		ext:    netip.AddrFrom4([4]byte{198, 51, 100, byte(2 + i)}),
		subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(16 * i)}), 28),
		addr:   netip.AddrFrom4([4]byte{203, 0, 113, byte(16*i + 1)}),
	}, i
}

// linkToGateway links the namespace that holds the site's public address ext (the site's own,
// or its NAT's) to the gateway, point to point.
func (l *lab) linkToGateway(i int, ext netip.Addr, ns *netns.NS) {
	gwIf := "ext" + strconv.Itoa(i)
	netns.Veth(l.gw, gwIf, ns, "ext0")
	l.gw.MustRun("ip", "addr", "add", labGatewayAddr.String()+"/32", "peer", ext.String()+"/32", "dev", gwIf)
	ns.MustRun("ip", "addr", "add", ext.String()+"/32", "peer", labGatewayAddr.String()+"/32", "dev", "ext0")
}

// siteCredentials gives the site its LAN host (IPsec: on its loopback) and its PSK or key.
func (l *lab) siteCredentials(s *labSite) {
	if l.proto == vpnv1.ProtocolIPsec {
		s.ns.MustRun("ip", "addr", "add", s.addr.String()+"/32", "dev", "lo")
		s.psk = "e2e-psk-" + s.name + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	} else {
		s.key = wgtest.NewKey(l.tb)
	}
}

// natRuleset is the NAT namespace's table: what leaves toward the gateway gets the site's
// public address and a source port from portsFrom..portsFrom+99.
func natRuleset(public netip.Addr, portsFrom int) string {
	return fmt.Sprintf(`table ip e2e_nat; delete table ip e2e_nat; table ip e2e_nat {
  chain post { type nat hook postrouting priority srcnat; oifname "ext0" meta l4proto udp snat to %[1]s:%[2]d-%[3]d; oifname "ext0" snat to %[1]s; }
}`, public, portsFrom, portsFrom+99)
}

// remapNAT gives the NAT's translations new source ports (portsFrom..portsFrom+99) and drops
// the ones it had: the site's next packet leaves from another port, as after a NAT's restart
// or a mapping's expiry.
func remapNAT(tb testing.TB, nat *netns.NS, public netip.Addr, portsFrom int) {
	tb.Helper()
	nat.MustRun("nft", natRuleset(public, portsFrom))
	if out, err := nat.Run("conntrack", "-F"); err != nil {
		tb.Fatalf("conntrack -F: %v %s", err, out)
	}
}

// deviceAddr is the address the site's device has: its public address, or its private one
// behind a NAT.
func (s *labSite) deviceAddr() netip.Addr {
	if s.inside.IsValid() {
		return s.inside
	}
	return s.ext
}

// namespace creates one more namespace of the lab (IPsec labs: charontest's, as charon needs;
// cns is then its charontest handle).
func (l *lab) namespace(short string) (ns *netns.NS, cns *charontest.Netns) {
	if l.proto == vpnv1.ProtocolIPsec {
		cns = l.crun.Netns(short)
		return netns.Open(l.tb, cns.Name), cns
	}
	return l.nrun.NS(short), nil
}

// tunnelInterface is the site's own tunnel device, once configured: its WireGuard device or
// its charon's kernel-libipsec TUN device.
func (s *labSite) tunnelInterface() string {
	if s.wg != nil {
		return s.wg.Interface
	}
	return nft.LibipsecInterface
}

// configureDevice configures the site's own device toward the gateway, as its owner would
// from our parameter sheet (the gateway need not know the site yet).
func (l *lab) configureDevice(s *labSite) {
	l.configureDeviceTo(s, l.gwKey, 51820, l.serviceCIDR)
}

// configureDeviceTo configures the site's device toward the gateway's address with remote as
// the networks behind the gateway (WireGuard: gwKey's device on port; IPsec ignores both).
func (l *lab) configureDeviceTo(s *labSite, gwKey wgtypes.Key, port uint16, remote netip.Prefix) {
	l.tb.Helper()
	if l.proto == vpnv1.ProtocolIPsec {
		s.charon = charontest.Start(l.tb, s.cns, s.name, charontest.Config{})
		if err := s.charon.LoadSwanctlConf(labSwanctlConf(s, remote)); err != nil {
			l.tb.Fatal(err)
		}
		return
	}
	s.wg = wgtest.Start(l.tb, s.ns, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName(s.name), Mode: "userspace"})
	ref := model.SecretKeyRef{Name: "site", Key: "privateKey"}
	if err := s.wg.Apply(&rwg.Config{
		Interface: rwg.Interface{ListenPort: 51821, Address: netip.PrefixFrom(s.addr, s.subnet.Bits()), MTU: 1420, PrivateKey: ref},
		Peers: []rwg.Peer{{Name: "gateway", PublicKey: gwKey.PublicKey().String(), AllowedIPs: []netip.Prefix{remote},
			Endpoint: netip.AddrPortFrom(labGatewayAddr, port).String(), PersistentKeepalive: 1}},
	}, wgtest.Secrets{ref: []byte(s.key.String())}); err != nil {
		l.tb.Fatalf("site %s device: %v\n%s", s.name, err, s.wg.Log())
	}
}

// labSwanctlConf is the site's swanctl.conf: it initiates toward the gateway, remote_ts the
// networks behind it.
func labSwanctlConf(s *labSite, remote netip.Prefix) string {
	local := charontest.End{Addr: s.deviceAddr(), ID: s.name + ".example.com", TS: append([]netip.Prefix{s.subnet}, s.claims...)}
	if len(s.perSubnet) > 0 {
		local.TS, local.ChildPerTS = s.perSubnet, true
	}
	return charontest.PSKConfWith(local,
		charontest.End{Addr: labGatewayAddr, ID: labGatewayAddr.String(), TS: []netip.Prefix{remote}}, s.psk, !s.respondOnly, s.conn)
}

// createPeer creates the site's VPNPeer granted the exposures (and, for IPsec, its PSK
// Secret) and returns when the VPNPeer was created. Grants are always explicit: with more than
// one peer, a peer without an authorization block reaches nothing (DefaultAllow is for
// single-peer gateways only). WireGuard peers get the site's endpoint, so the gateway
// initiates (a site with a fixed address).
func (l *lab) createPeer(s *labSite, exposures ...string) time.Time {
	l.tb.Helper()
	return l.createPeerWith(s, []string{s.subnet.String()}, &vpnv1.Authorization{Exposures: exposures})
}

// createPeerWith creates the site's VPNPeer (and PSK Secret) with the given subnets,
// authorization block (nil: none) and extra settings, and returns when the VPNPeer was created.
func (l *lab) createPeerWith(s *labSite, subnets []string, auth *vpnv1.Authorization, extra ...gen.PeerMod) time.Time {
	l.tb.Helper()
	ctx := context.Background()
	mods := []gen.PeerMod{gen.Authorization(auth)}
	if l.proto == vpnv1.ProtocolIPsec {
		if err := env.Client.Create(ctx, gen.PSKSecret(l.k8sNS, s.name, s.psk)); err != nil {
			l.tb.Fatal(err)
		}
		mods = append(mods, gen.IPsecPeer(s.ext.String(), s.name+".example.com"))
	} else {
		mods = append(mods, gen.WireGuardPeer(s.key.PublicKey().String()),
			gen.WireGuardEndpoint(netip.AddrPortFrom(s.ext, 51821).String()), gen.PersistentKeepalive(1))
	}
	peer := gen.VPNPeer(l.k8sNS, s.name, append(append(mods, gen.RemoteSubnets(subnets...)), extra...)...)
	at := time.Now()
	if err := env.Client.Create(ctx, peer); err != nil {
		l.tb.Fatal(err)
	}
	return at
}

// waitThroughWeb waits until a UDP request from the site's host is answered through the web
// exposure (its tunnel up and granted), the agent's last lines in the error otherwise.
func (l *lab) waitThroughWeb(s *labSite, agent *netns.Process) {
	l.tb.Helper()
	waitFor(l.tb, s.name+" from "+s.addr.String()+" through web", 60*time.Second, func() error {
		if err := s.request(l.web(53), time.Second); err != nil {
			return fmt.Errorf("%v (agent: %s)", err, tail(agent.Output()))
		}
		return nil
	})
}

// request sends one UDP request from the site to addr and waits up to timeout for the echo.
func (s *labSite) request(addr string, timeout time.Duration) error {
	c, err := dialIn(s.ns.Name, "udp", s.addr, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("hello")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "hello" {
		return fmt.Errorf("answer %q", buf[:n])
	}
	return nil
}

// tcpRequest opens a TCP connection from the site to addr and has one line echoed.
func (s *labSite) tcpRequest(addr string, timeout time.Duration) error {
	c, err := dialIn(s.ns.Name, "tcp", s.addr, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return fmt.Errorf("answer %q", line)
	}
	return nil
}

// peerConnected returns the VPNPeer when the agent has marked it Connected.
func peerConnected(ns, name string) (*vpnv1.VPNPeer, error) {
	p := &vpnv1.VPNPeer{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
		return nil, err
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, vpnv1.ConditionConnected); c == nil || c.Status != metav1.ConditionTrue {
		return p, fmt.Errorf("peer %s not connected: %+v", name, p.Status.Conditions)
	}
	return p, nil
}

// agentStatusWrite is when the agent's field manager last wrote the VPNPeer's status
// (managedFields, one-second resolution; zero when it never did).
func agentStatusWrite(p *vpnv1.VPNPeer) time.Time {
	for _, mf := range p.ManagedFields {
		if mf.Manager == status.FieldOwner && mf.Subresource == "status" && mf.Time != nil {
			return mf.Time.Time
		}
	}
	return time.Time{}
}

// nftTable is the gateway's nftables table without counter values (nft -s), or an error when
// there is none.
func (l *lab) nftTable() (string, error) {
	out, err := l.gw.Run("nft", "-s", "list", "table", "ip", "bnerd_vpn")
	if err != nil {
		return "", fmt.Errorf("nft list table: %v: %s", err, out)
	}
	return out, nil
}

// nftState is the gateway's table in the agent's canonical listing: equal for equal kernel
// state, whether the table was loaded whole or grown by netlink deltas.
func (l *lab) nftState() (string, error) {
	out, err := l.nftTable()
	if err != nil {
		return "", err
	}
	return firewall.CanonicalListing(out), nil
}

// peerConfig is what `kubectl vpn peer-config <peer> --format <format>` prints for one of the
// gateway's peers: the same function on the same objects, read from the API server.
func (l *lab) peerConfig(peer, format string) string {
	l.tb.Helper()
	ctx := context.Background()
	gw, p := &vpnv1.VPNGateway{}, &vpnv1.VPNPeer{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.k8sNS, Name: "gw"}, gw); err != nil {
		l.tb.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: l.k8sNS, Name: peer}, p); err != nil {
		l.tb.Fatal(err)
	}
	if gw.Status.PublicAddress == "" {
		// no endpoint controller here: the address the sites reach the gateway at
		gw.Status.PublicAddress = labGatewayAddr.String()
	}
	out, err := deviceconfig.RenderInput(deviceconfig.Input{Gateway: gw, Peer: p}, format)
	if err != nil {
		l.tb.Fatalf("peer-config %s --format %s: %v", peer, format, err)
	}
	return out
}
