package strongswan

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/strongswan/govici/vici"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/charontest"
)

// Addresses (documentation ranges and 100.64.0.0/10 only).
const (
	gwLocalID   = "gw.example.test"
	serviceCIDR = "100.64.7.0/24"
	gwService   = "100.64.7.1" // the gateway's LocalAddress, on lo in the gateway namespace
	ikeProposal = "aes256gcm16-prfsha256-ecp256"
	espProposal = "aes256gcm16-ecp256"
)

// site is one client site: a namespace with its own charon, configured like the client's
// device, linked to the gateway namespace by a veth.
type site struct {
	name    string // peer name on the gateway
	id      string // IKE identity
	addr    string // outside address
	gwAddr  string // the gateway's address on this link
	subnet  string // the site's network (remote_ts on the gateway)
	host    string // an address of the subnet, on lo
	psk     string // what the site's device is configured with
	ns      *charontest.Netns
	charon  *charontest.Charon
	secret  model.SecretKeyRef
	ikeProp string
	// rekey is the CHILD_SA rekey time the gateway renders for this peer (1h).
	rekey time.Duration
	// start is the site's start_action (start: the device initiates when configured).
	start string
}

// conf is the site's swanctl.conf: initiates at load (start), heals through DPD.
func (s *site) conf() string {
	return fmt.Sprintf(`connections {
  gw {
    version = 2
    local_addrs = %[1]s
    remote_addrs = %[2]s
    proposals = %[3]s
    mobike = no
    dpd_delay = 1s
    local {
      auth = psk
      id = %[4]s
    }
    remote {
      auth = psk
      id = %[5]s
    }
    children {
      gw {
        local_ts = %[6]s
        remote_ts = %[7]s
        esp_proposals = %[8]s
        start_action = %[10]s
        dpd_action = restart
        close_action = start
      }
    }
  }
}
secrets {
  ike-gw {
    id-1 = %[4]s
    id-2 = %[5]s
    secret = "%[9]s"
  }
}
`, s.addr, s.gwAddr, s.ikeProp, s.id, gwLocalID, s.subnet, serviceCIDR, espProposal, s.psk, s.start)
}

func (s *site) load(t *testing.T) {
	t.Helper()
	if err := s.charon.LoadSwanctlConf(s.conf()); err != nil {
		t.Fatal(err)
	}
}

// peer is the site as the gateway's model sees it.
func (s *site) peer() model.Peer {
	return model.Peer{
		Name:          s.name,
		UID:           types.UID("uid-" + s.name),
		Generation:    1,
		SourceCIDRs:   []netip.Prefix{netip.MustParsePrefix(s.subnet)},
		Authorization: model.Decision{Authorized: true, Reason: model.ReasonAuthorized},
		IPsec: &model.IPsecPeer{
			RemoteAddress: s.addr,
			RemoteID:      s.id,
			ESPProposals:  []string{espProposal},
			RekeyTime:     s.rekey,
			PSK:           s.secret,
		},
	}
}

// secrets is the agent's view of the peers' Secrets.
type secrets struct {
	mu   sync.Mutex
	data map[model.SecretKeyRef][]byte
}

func (s *secrets) Get(ref model.SecretKeyRef) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.data[ref]
	if !ok {
		return nil, fmt.Errorf("Secret %s has no key %s", ref.Name, ref.Key)
	}
	return v, nil
}

func (s *secrets) set(ref model.SecretKeyRef, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[ref] = []byte(v)
}

func (s *secrets) values() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, v := range s.data {
		out = append(out, string(v))
	}
	return out
}

// fixture is a gateway namespace with charon and the driver, and client sites.
type fixture struct {
	t       *testing.T
	run     *charontest.Run
	gwNS    *charontest.Netns
	gw      *charontest.Charon
	driver  *Driver
	secrets *secrets
	sites   map[string]*site
	// everything the driver said: logs, errors, messages (scanned for secret values).
	said  []string
	saidM sync.Mutex
	// pskSeen are every PSK value any party was configured with.
	pskSeen []string
	// ikeRekey is the gateway's IKE_SA rekey time (4h).
	ikeRekey time.Duration
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, charontest.Config{}) }

// newFixtureWith is newFixture with the gateway's charon configured by gwConf.
func newFixtureWith(t *testing.T, gwConf charontest.Config) *fixture {
	charontest.Skip(t)
	f := &fixture{t: t, run: charontest.NewRun(t), secrets: &secrets{data: map[model.SecretKeyRef][]byte{}}, sites: map[string]*site{}, ikeRekey: 4 * time.Hour}
	f.gwNS = f.run.Netns("gw")
	f.gwNS.AddLoopback(gwService + "/32")
	f.gw = charontest.Start(t, f.gwNS, "gw", gwConf)
	log := funcr.New(func(prefix, args string) { f.say(prefix + " " + args) }, funcr.Options{Verbosity: 5})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := New(ctx, f.gw.URI(), Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	f.driver = d
	t.Cleanup(f.scanSecrets)
	t.Cleanup(func() {
		if t.Failed() {
			f.saidM.Lock()
			defer f.saidM.Unlock()
			// The driver's log and the test's Peers results, secrets scanned first.
			t.Logf("driver said:\n%s", strings.Join(f.said[max(0, len(f.said)-300):], "\n"))
		}
	})
	return f
}

func (f *fixture) say(s string) {
	f.saidM.Lock()
	defer f.saidM.Unlock()
	f.said = append(f.said, s)
}

// newSite creates a site namespace linked to the gateway, with its charon not configured yet:
// n is 0 for 198.51.100.0/24 (203.0.113.0/28 behind it), 1 for 192.0.2.0/24
// (203.0.113.16/28).
func (f *fixture) newSite(name string, n int, psk string) *site {
	f.t.Helper()
	links := []struct{ gw, site, subnet, host string }{
		{"198.51.100.1", "198.51.100.2", "203.0.113.0/28", "203.0.113.1"},
		{"192.0.2.1", "192.0.2.2", "203.0.113.16/28", "203.0.113.17"},
	}
	l := links[n]
	s := &site{
		name: name, id: name + ".example.test", addr: l.site, gwAddr: l.gw, subnet: l.subnet, host: l.host,
		psk: psk, secret: model.SecretKeyRef{Name: name + "-psk", Key: "psk"}, ikeProp: ikeProposal,
		rekey: time.Hour, start: "start",
	}
	s.ns = f.run.Netns(name)
	charontest.Veth(f.gwNS, fmt.Sprintf("veth-%d-gw", n), l.gw+"/24", s.ns, "veth-site", l.site+"/24")
	s.ns.AddLoopback(l.host + "/32")
	s.charon = charontest.Start(f.t, s.ns, name, charontest.Config{})
	f.sites[name] = s
	f.pskSeen = append(f.pskSeen, psk)
	return s
}

// addSite is newSite with the site's device configured (it initiates at once, and fails
// until the gateway knows it).
func (f *fixture) addSite(name string, n int, psk string) *site {
	f.t.Helper()
	s := f.newSite(name, n, psk)
	s.load(f.t)
	return s
}

// bundle renders the gateway with the given sites as peers.
func (f *fixture) bundle(sites ...*site) *render.Bundle {
	f.t.Helper()
	gw := &model.Gateway{
		Namespace:     "tenant-a",
		Name:          "acme",
		UID:           "0d6c3f6e-5a1e-4c55-9d43-0c3c9e1c1a01",
		Generation:    1,
		Protocol:      model.ProtocolIPsec,
		Mode:          model.ModeSNAT,
		Endpoint:      model.Endpoint{Kind: model.EndpointHostNetwork, HostAddress: netip.MustParseAddr("198.51.100.1")},
		PublicAddress: "198.51.100.1",
		ServiceCIDR:   netip.MustParsePrefix(serviceCIDR),
		LocalAddress:  netip.MustParseAddr(gwService),
		IPsec: &model.IPsecGateway{
			IKEVersion:   2,
			IKEProposals: []string{ikeProposal},
			LocalID:      gwLocalID,
			DPDDelay:     time.Second,
			DPDAction:    "restart",
			RekeyTime:    f.ikeRekey,
		},
	}
	for _, s := range sites {
		gw.Peers = append(gw.Peers, s.peer())
	}
	b, err := render.Render(gw, render.Options{UserspaceDataplane: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) apply(b *render.Bundle) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.driver.Apply(ctx, b, f.secrets); err != nil {
		f.say(err.Error())
		f.t.Fatalf("Apply: %v", err)
	}
}

// peers calls Peers and keeps every message for the secret scan.
func (f *fixture) peers() (map[string]agent.PeerState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := f.driver.Peers(ctx)
	if err != nil {
		f.say(err.Error())
		return nil, err
	}
	for name, p := range ps {
		f.say(name + ": " + p.State + ": " + p.Message)
	}
	return ps, nil
}

// waitPeer polls Peers until peer's state satisfies ok.
func (f *fixture) waitPeer(peer string, timeout time.Duration, ok func(agent.PeerState) error) agent.PeerState {
	f.t.Helper()
	var last agent.PeerState
	err := charontest.Eventually(timeout, func() error {
		ps, err := f.peers()
		if err != nil {
			return err
		}
		p, found := ps[peer]
		if !found {
			return fmt.Errorf("Peers has no %s: %v", peer, ps)
		}
		last = p
		return ok(p)
	})
	if err != nil {
		f.t.Fatalf("peer %s: %v (last: %+v)", peer, err, last)
	}
	return last
}

func inState(state string) func(agent.PeerState) error {
	return func(p agent.PeerState) error {
		if p.State != state {
			return fmt.Errorf("state %s (%s), want %s", p.State, p.Message, state)
		}
		return nil
	}
}

// ping sends count echo requests from the site's subnet to the gateway's service address
// through the tunnel.
func (s *site) ping(t *testing.T, count int, interval time.Duration) charontest.PingResult {
	t.Helper()
	res, err := s.ns.Ping(s.host, gwService, count, interval, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// list runs a streamed listing on a session of the test's own (not the driver's).
func (f *fixture) list(cmd, event string) ([]*vici.Message, error) {
	s, err := vici.NewSession(vici.WithSocketPath(f.gw.Socket))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return collectOn(ctx, s, cmd, event, nil)
}

// listSAs lists the gateway's IKE_SAs by connection, straight from charon.
func (f *fixture) listSAs() map[string][]ikeSA {
	f.t.Helper()
	events, err := f.list("list-sas", "list-sa")
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string][]ikeSA{}
	for _, ev := range events {
		for _, name := range ev.Keys() {
			var sa ikeSA
			if err := vici.UnmarshalMessage(ev.Get(name).(*vici.Message), &sa); err != nil {
				f.t.Fatal(err)
			}
			out[name] = append(out[name], sa)
		}
	}
	return out
}

// listConns lists the gateway's loaded connections.
func (f *fixture) listConns() []string {
	f.t.Helper()
	events, err := f.list("list-conns", "list-conn")
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, ev := range events {
		out = append(out, ev.Keys()...)
	}
	return out
}

// sharedKeyIDs lists the ids of the gateway's loaded shared keys (get-shared).
func (f *fixture) sharedKeyIDs() []string {
	f.t.Helper()
	s, err := vici.NewSession(vici.WithSocketPath(f.gw.Socket))
	if err != nil {
		f.t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := s.Call(ctx, "get-shared", nil)
	if err != nil {
		f.t.Fatal(err)
	}
	keys, _ := out.Get("keys").([]string)
	return keys
}

// scanSecrets fails the test if any PSK value shows up in the gateway's log file or in
// anything the driver said.
func (f *fixture) scanSecrets() {
	values := append(f.secrets.values(), f.pskSeen...)
	gwLog := f.gw.Log()
	f.saidM.Lock()
	said := strings.Join(f.said, "\n")
	f.saidM.Unlock()
	for _, v := range values {
		if len(v) < 8 {
			f.t.Errorf("test secret %q is too short to scan for", v)
			continue
		}
		if strings.Contains(gwLog, v) {
			f.t.Errorf("a pre-shared key value appears in the gateway's charon log")
		}
		if strings.Contains(said, v) {
			f.t.Errorf("a pre-shared key value appears in what the driver logged or returned")
		}
	}
	for _, s := range f.sites {
		for _, v := range values {
			if strings.Contains(s.charon.Log(), v) {
				f.t.Errorf("a pre-shared key value appears in site %s's charon log", s.name)
			}
		}
	}
}

func randomPSK(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "psk-" + hex.EncodeToString(b)
}
