package nft

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// byteReader hands out fuzz bytes, zeros once they run out.
type byteReader struct{ b []byte }

func (r *byteReader) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *byteReader) prefix() netip.Prefix {
	a := netip.AddrFrom4([4]byte{r.next(), r.next(), r.next(), r.next()})
	return netip.PrefixFrom(a, int(r.next())%33).Masked()
}

func (r *byteReader) addr() netip.Addr {
	return netip.AddrFrom4([4]byte{r.next(), r.next(), r.next(), r.next()})
}

// port is never 0 (TestRenderRefuses covers that): zero bytes read as 443.
func (r *byteReader) port() uint16 {
	if p := uint16(r.next())<<8 | uint16(r.next()); p != 0 {
		return p
	}
	return 443
}

// fuzzGateway builds a gateway from fuzz input: hostile names, overlapping or odd subnets,
// addresses anywhere, protocols as given.
func fuzzGateway(names [3]string, expName, proto string, raw []byte) *model.Gateway {
	r := &byteReader{b: raw}
	g := &model.Gateway{
		Namespace: names[0], Name: expName,
		Protocol: model.ProtocolIPsec, Mode: model.ModeSNAT,
		ServiceCIDR: pfx("100.64.7.0/24"), LocalAddress: addr("100.64.7.1"),
	}
	for i, n := range names {
		flags := r.next()
		p := model.Peer{Name: n, Authorization: model.Decision{Authorized: flags&1 == 1, Reason: "Fuzz"}}
		for j := 0; j < int(flags>>1)%3+1; j++ {
			p.SourceCIDRs = append(p.SourceCIDRs, r.prefix())
		}
		if i == 2 && flags&2 == 2 {
			p.Name = names[0] // a duplicate name now and then
		}
		g.Peers = append(g.Peers, p)
	}
	for i, name := range []string{expName, expName + "-2"} {
		e := model.Exposure{Name: name, VirtualIP: netip.AddrFrom4([4]byte{100, 64, 7, r.next()})}
		switch odd := r.next(); {
		case odd&1 == 1:
			e.Target = r.addr()
		case odd&2 == 2:
			e.VirtualIP = r.addr()
			fallthrough
		default:
			e.Target = netip.AddrFrom4([4]byte{192, 0, 2, odd | 8})
		}
		nports := int(r.next())%3 + 1
		for j := 0; j < nports; j++ {
			pr := "tcp"
			switch r.next() % 4 {
			case 1:
				pr = "udp"
			case 2:
				pr = proto
			}
			e.Ports = append(e.Ports, model.Port{Protocol: pr, Port: r.port(), TargetPort: r.port()})
		}
		grants := r.next()
		for k, p := range g.Peers {
			if grants&(1<<k) != 0 && (p.Authorization.Authorized || grants&0x80 != 0) {
				e.GrantedTo = append(e.GrantedTo, p.Name)
			}
		}
		if i == 1 && grants&0x40 != 0 {
			e.GrantedTo = append(e.GrantedTo, "nobody")
		}
		g.Exposures = append(g.Exposures, e)
	}
	if f := r.next(); f&1 == 1 {
		g.InternalSourceCIDRs = []netip.Prefix{r.prefix(), r.prefix()}
		if r.next()&1 == 0 { // a tenant with pods; else none (nothing reverse is rendered)
			g.ReverseClients = []netip.Addr{g.InternalSourceCIDRs[0].Addr(), g.InternalSourceCIDRs[1].Addr(), g.InternalSourceCIDRs[0].Addr()}
		}
		grantee := g.Peers[int(f>>1)%3]
		target := r.addr()
		if len(grantee.SourceCIDRs) > 0 && f&0x80 == 0 {
			target = grantee.SourceCIDRs[0].Addr() // inside the grantee's subnets
		}
		g.ReverseExposures = []model.ReverseExposure{{
			Name: expName + "-rev", VirtualIP: netip.AddrFrom4([4]byte{100, 64, 7, r.next()}), Target: target, Grantee: grantee.Name,
			Ports: []model.Port{{Protocol: "tcp", Port: r.port(), TargetPort: r.port(), GatewayPort: 20000},
				{Protocol: "udp", Port: r.port(), TargetPort: r.port(), GatewayPort: 20001 - uint16(f>>6&1)}}, // 20000 twice: refused
		}}
	}
	return g
}

func FuzzRuleset(f *testing.F) {
	f.Add("site-a", "site-b", "site-c", "web", "tcp", []byte{
		1, 203, 0, 113, 0, 28, 3, 203, 0, 113, 16, 28, 203, 0, 113, 64, 26, 0, 203, 0, 113, 32, 28,
		10, 192, 0, 2, 10, 1, 0, 0, 80, 31, 144, 3,
		11, 192, 0, 2, 20, 1, 1, 1, 0, 53, 0, 53, 0x83,
		3, 198, 51, 100, 0, 24, 192, 0, 2, 0, 24, 20, 0, 22, 0, 22, 0, 161, 0, 161, 1,
	})
	f.Add(`a"; flush ruleset; #`, "b\n}\ntable ip x {", "ÜBER", "}{#\";", "tcp } accept", []byte{
		1, 0, 0, 0, 0, 0, 1, 10, 0, 0, 0, 8, 1, 10, 1, 0, 0, 16, 10, 1, 1, 1, 1, 2, 0, 80, 0, 80, 0xff,
	})
	f.Add("x", "x", "y", "", "udp", []byte{3, 1, 2, 3, 4, 32, 3, 1, 2, 3, 4, 32, 1, 2, 3, 4, 30, 2})
	f.Add("dup", "other", "dup", "e", "sctp", []byte{0x3, 203, 0, 113, 0, 24, 0x1, 203, 0, 113, 0, 25, 0x3, 203, 0, 113, 128, 25})
	f.Add("peer.example.com", strings.Repeat("n", 250), "-", "exp", "tcp", []byte{
		1, 100, 96, 0, 0, 11, 1, 100, 96, 0, 0, 30, 1, 255, 255, 255, 255, 32, 5, 198, 51, 100, 1, 0, 0, 0, 1, 1, 187, 1, 187, 7,
	})
	f.Add("p1", "p2", "p3", "overlap", "tcp", []byte{
		3, 10, 0, 0, 0, 8, 10, 1, 0, 0, 16, 0, 10, 1, 2, 0, 24, 1, 0, 0, 0, 0, 0,
		10, 0, 0, 0, 0, 80, 0, 0, 5,
		11, 0, 1, 1, 0, 53, 0, 53, 2, 1, 1, 1, 1, 3,
		1, 198, 51, 100, 0, 24, 198, 51, 100, 128, 25, 20, 0, 22, 0, 22, 0, 161, 0, 161, 1,
	})
	f.Fuzz(func(t *testing.T, n1, n2, n3, expName, proto string, raw []byte) {
		g := fuzzGateway([3]string{n1, n2, n3}, expName, proto, raw)
		userspace := raw != nil && len(raw)%2 == 0
		text, err := Render(g, DefaultOptions(g, userspace))
		if err != nil {
			t.Logf("refused: %v", err)
			return // refused: fine, as long as nothing panicked
		}
		checkStructure(t, text)
		if netns.Available("nft") != nil {
			return
		}
		ns := sharedNS(t)
		if out, err := ns.RunInput(text, "nft", "-c", "-f", "-"); err != nil {
			t.Fatalf("nft -c: %v\n%s\n---\n%s", err, out, text)
		}
		if out, err := ns.RunInput(text, "nft", "-f", "-"); err != nil {
			t.Fatalf("nft -f: %v\n%s\n---\n%s", err, out, text)
		}
		checkLoaded(t, g, g.Protocol == model.ProtocolIPsec && !userspace, ns.MustRun("nft", "-j", "list", "table", Family, Table))
	})
}

// loaded is the kernel's view of the table, from nft -j.
type loaded struct {
	counters []string
	elems    map[string][][2]any // set or map name -> [key, value] (value nil for sets)
}

func parseLoaded(t testing.TB, listJSON string) loaded {
	t.Helper()
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(listJSON), &doc); err != nil {
		t.Fatalf("parse nft -j: %v", err)
	}
	l := loaded{elems: map[string][][2]any{}}
	for _, o := range doc.Nftables {
		if raw, ok := o["counter"]; ok {
			var c struct{ Name string }
			_ = json.Unmarshal(raw, &c)
			l.counters = append(l.counters, c.Name)
		}
		for _, kind := range []string{"set", "map"} {
			raw, ok := o[kind]
			if !ok {
				continue
			}
			var s struct {
				Name string
				Elem []any
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			// A set keyed by a peer subnet is one set per prefix length (peer_in_24), keyed by
			// the /N network: folded back into one, its keys prefixes again.
			name, bits := s.Name, -1
			if base, n, ok := cutLength(s.Name); ok {
				name, bits = base, n
			}
			if _, ok := l.elems[name]; !ok {
				l.elems[name] = [][2]any{}
			}
			for _, e := range s.Elem {
				var kv [2]any
				if kind == "map" {
					pair := e.([]any)
					kv = [2]any{pair[0], pair[1]}
				} else {
					kv = [2]any{e, nil}
				}
				if bits >= 0 {
					kv[0] = withLength(t, kv[0], name, bits)
				}
				l.elems[name] = append(l.elems[name], kv)
			}
		}
	}
	sort.Strings(l.counters)
	return l
}

// cutLength splits "peer_24" into "peer" and 24, for the sets keyed by a peer subnet.
func cutLength(name string) (string, int, bool) {
	for _, base := range []string{SetPeer, SetDropsIn, SetDropsOut, SetTunnelSources} {
		if rest, ok := strings.CutPrefix(name, base+"_"); ok {
			if n, err := strconv.Atoi(rest); err == nil && n >= 0 && n <= 32 {
				return base, n, true
			}
		}
	}
	return "", 0, false
}

// withLength turns the /N network of a per-length set's key (the address of a plain key, the
// second one of tunnel_sources' concatenation) into the prefix.
func withLength(t testing.TB, key any, set string, bits int) any {
	t.Helper()
	prefix := func(a any) any {
		addr, ok := a.(string)
		if !ok {
			t.Fatalf("%s_%d: key %#v is not an address", set, bits, a)
		}
		return map[string]any{"prefix": map[string]any{"addr": addr, "len": float64(bits)}}
	}
	m, _ := key.(map[string]any)
	c, ok := m["concat"].([]any)
	if !ok {
		return prefix(key)
	}
	c = slices.Clone(c)
	at := 0
	if set == SetTunnelSources {
		at = 1
	}
	c[at] = prefix(c[at])
	return map[string]any{"concat": c}
}

// jsonSpan reads an address, prefix or range element as an address range.
func jsonSpan(t testing.TB, v any) span {
	t.Helper()
	switch x := v.(type) {
	case string:
		return spanOf(netip.PrefixFrom(netip.MustParseAddr(x), 32))
	case map[string]any:
		if p, ok := x["prefix"].(map[string]any); ok {
			return spanOf(netip.PrefixFrom(netip.MustParseAddr(p["addr"].(string)), int(p["len"].(float64))))
		}
		if r, ok := x["range"].([]any); ok {
			return span{spanOf(netip.PrefixFrom(netip.MustParseAddr(r[0].(string)), 32)).lo,
				spanOf(netip.PrefixFrom(netip.MustParseAddr(r[1].(string)), 32)).lo}
		}
	}
	t.Fatalf("not an address element: %#v", v)
	return span{}
}

func jsonText(v any) string {
	switch x := v.(type) {
	case map[string]any:
		if c, ok := x["concat"].([]any); ok {
			parts := make([]string, len(c))
			for i, p := range c {
				parts[i] = jsonText(p)
			}
			return strings.Join(parts, " . ")
		}
	case float64:
		return fmt.Sprint(int64(x))
	}
	return fmt.Sprint(v)
}

// union merges spans into a sorted list of disjoint, non-adjacent spans.
func union(ss []span) []span {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b span) int {
		if a.lo != b.lo {
			if a.lo < b.lo {
				return -1
			}
			return 1
		}
		return 0
	})
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// checkLoaded compares what the kernel holds with what the model says, independently of how
// the renderer laid it out.
func checkLoaded(t testing.TB, g *model.Gateway, kernelESP bool, listJSON string) {
	t.Helper()
	l := parseLoaded(t, listJSON)

	// Counters: the shared ones (a third with kernel ESP); a peer's drops are counted by
	// elements the kernel makes, none at load.
	want := []string{CounterOther, CounterUnknownIn}
	if kernelESP {
		want = append(want, CounterSpoofed)
	}
	sort.Strings(want)
	if !slices.Equal(l.counters, want) {
		t.Fatalf("counters %v, want %v", l.counters, want)
	}
	for _, set := range []string{SetDropsIn, SetDropsOut} {
		if len(l.elems[set]) != 0 {
			t.Fatalf("%s holds %v at load", set, l.elems[set])
		}
	}

	// Exposures: the forward ports each peer may reach, and their translations.
	byName := map[string]*model.Peer{}
	var all []span
	for i := range g.Peers {
		byName[g.Peers[i].Name] = &g.Peers[i]
		for _, s := range g.Peers[i].SourceCIDRs {
			all = append(all, spanOf(s))
		}
	}
	wantDNAT := []string{}
	grantedTo := map[string][]string{} // peer -> "vip . proto . port"
	for _, e := range g.Exposures {
		for _, port := range e.Ports {
			k := fmt.Sprintf("%s . %s . %d", e.VirtualIP, port.Protocol, port.Port)
			wantDNAT = append(wantDNAT, fmt.Sprintf("%s : %s . %d", k, e.Target, port.TargetPort))
			for _, n := range e.GrantedTo {
				grantedTo[n] = append(grantedTo[n], k)
			}
		}
	}
	classPorts := map[uint32][]string{}
	for _, e := range l.elems[SetFwdGrants] {
		c := e[0].(map[string]any)["concat"].([]any)
		id := jsonMark(t, c[0])
		if id == 0 {
			t.Fatalf("fwd_grants grants class 0 %v", e[0])
		}
		classPorts[id] = append(classPorts[id], jsonText(map[string]any{"concat": c[1:]}))
	}

	// Peer subnets: the maps cover exactly the peers' subnets, each block belonging to the peer
	// the renderer gives it (an authorized one first, then the most specific subnet, then the first
	// by name), its class granting exactly that peer's ports.
	var keys []span
	for _, e := range l.elems[SetPeer] {
		s := jsonSpan(t, e[0])
		keys = append(keys, s)
		owner := ownerOf(g, s)
		if owner == nil {
			t.Fatalf("peer map holds %v, which no peer has", e[0])
		}
		got := slices.Clone(classPorts[jsonMark(t, e[1])])
		want := slices.Clone(grantedTo[owner.Name])
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(slices.Compact(got), slices.Compact(want)) {
			t.Fatalf("%v belongs to peer %q, granted %v; its class %v grants %v", e[0], owner.Name, want, e[1], got)
		}
	}
	if got, want := union(keys), union(all); !slices.Equal(got, want) {
		t.Fatalf("the peer maps cover %v, the peers' subnets are %v", got, want)
	}
	var gotDNAT []string
	for _, e := range l.elems["fwd_dnat"] {
		gotDNAT = append(gotDNAT, jsonText(e[0])+" : "+jsonText(e[1]))
	}
	sort.Strings(gotDNAT)
	sort.Strings(wantDNAT)
	if !slices.Equal(gotDNAT, wantDNAT) {
		t.Fatalf("fwd_dnat %v, want %v", gotDNAT, wantDNAT)
	}

	// Reverse exposures: present exactly when there are internal sources and a grantee.
	var wantRev []string
	if len(g.ReverseClients) > 0 {
		for _, r := range g.ReverseExposures {
			if r.Grantee == "" {
				continue
			}
			for _, p := range r.Ports {
				wantRev = append(wantRev, fmt.Sprintf("%s . %d : %s . %d", p.Protocol, p.GatewayPort, r.Target, p.TargetPort))
			}
		}
	}
	var gotRev []string
	for _, e := range l.elems["rev_dnat"] {
		gotRev = append(gotRev, jsonText(e[0])+" : "+jsonText(e[1]))
	}
	sort.Strings(gotRev)
	sort.Strings(wantRev)
	if !slices.Equal(gotRev, wantRev) {
		t.Fatalf("rev_dnat %v, want %v", gotRev, wantRev)
	}
	if len(wantRev) > 0 {
		var got, want []string
		for _, e := range l.elems["reverse_clients"] {
			got = append(got, jsonText(e[0]))
		}
		for _, a := range g.ReverseClients {
			want = append(want, a.String())
		}
		slices.Sort(want)
		want = slices.Compact(want)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Fatalf("reverse_clients %v, want %v", got, want)
		}
	} else if _, ok := l.elems["reverse_clients"]; ok {
		t.Fatal("reverse_clients rendered without any reverse exposure to serve")
	}
}

// ownerOf is the peer an address block belongs to as the renderer resolves overlaps: of the peers
// with a subnet holding it, an authorized one, then the one with the most specific such subnet,
// then the first by name; nil when no peer has it.
func ownerOf(g *model.Gateway, s span) *model.Peer {
	var best *model.Peer
	bestBits := -1
	for i := range g.Peers {
		p := &g.Peers[i]
		bits := -1
		for _, c := range p.SourceCIDRs {
			if cs := spanOf(c); cs.lo <= s.lo && s.hi <= cs.hi {
				bits = max(bits, c.Bits())
			}
		}
		switch {
		case bits < 0:
		case best == nil,
			p.Authorization.Authorized && !best.Authorization.Authorized,
			p.Authorization.Authorized == best.Authorization.Authorized && (bits > bestBits || bits == bestBits && p.Name < best.Name):
			best, bestBits = p, bits
		}
	}
	return best
}

// jsonMark reads a mark (a grant class) from nft -j.
func jsonMark(t testing.TB, v any) uint32 {
	t.Helper()
	switch x := v.(type) {
	case float64:
		return uint32(x)
	case string:
		if n, err := strconv.ParseUint(x, 0, 32); err == nil {
			return uint32(n)
		}
	}
	t.Fatalf("not a mark: %#v", v)
	return 0
}

func containsSpan(ps []netip.Prefix, s span) bool {
	for _, p := range ps {
		if ps := spanOf(p); ps.lo <= s.lo && s.hi <= ps.hi {
			return true
		}
	}
	return false
}
