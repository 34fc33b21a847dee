package diagnose

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan/swanconf"
)

// Log lines are never printed as they were read. A line is shown only when its message has
// one of the shapes below, each value in it restricted to the characters such a value has
// (algorithm names, addresses, identities, names, numbers); anything else — a key a debug
// level dumped, a message the plugin does not know — is counted and left out. That is what
// keeps a pre-shared key out of diagnose's output whatever charon or the agent logged.

// logLine is a line of a container's log with the API server's timestamp taken off.
type logLine struct {
	Time time.Time
	Text string
}

// splitLog splits a log read with timestamps=true ("2006-01-02T15:04:05.999999999Z text").
func splitLog(raw []byte) []logLine {
	var out []logLine
	for _, l := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		if l == "" {
			continue
		}
		ll := logLine{Text: l}
		if i := strings.IndexByte(l, ' '); i > 0 {
			if t, err := time.Parse(time.RFC3339Nano, l[:i]); err == nil {
				ll = logLine{Time: t, Text: l[i+1:]}
			}
		}
		out = append(out, ll)
	}
	return out
}

// --- charon ---

// charonEntry is one charon log line in a known shape.
type charonEntry struct {
	Time time.Time
	// SA is the IKE_SA's unique id (0: none); Conn its connection name once charon knows it.
	SA   int
	Conn string
	// Shape is the name of the matched shape; Values its captures; Message the message, as
	// the shape matched it in full.
	Shape   string
	Values  []string
	Message string
}

// charon's log line: [time] NN[GRP] [<conn|id> or <id>] message (filelog with ike_name = yes;
// the group may carry its level, log_level = yes: 12[IKE1]).
var charonPrefix = regexp.MustCompile(`^(?:.*?\s)?\d{2}\[([A-Z]{2,4})[0-4]?\] (?:<(?:([A-Za-z0-9_.-]{1,253})\|)?(\d{1,10})> )?(.*)$`)

const (
	reAddr      = `([0-9A-Fa-f.:]{2,45}|%any)`
	reQuotedID  = `'([^'\x00-\x1f\x7f]{1,255})'`
	reBracketID = `\[([^\]\x00-\x1f\x7f]{1,255})\]`
	reProposal  = `(?:IKE|ESP|AH):[A-Z0-9_]+(?:/[A-Z0-9_]+)*`
	reConn      = `([A-Za-z0-9_.-]{1,253})`
	reTS        = `([0-9A-Za-z.:/\[\]=, -]{1,400})`
)

// charonShapes are the messages diagnose reads, by name. show: printed in the peer's log
// excerpt (the others only attribute an IKE_SA to a peer or count packets).
var charonShapes = []struct {
	name string
	re   *regexp.Regexp
	show bool
}{
	{"proposals-received", regexp.MustCompile(`^received proposals: (` + reProposal + `(?:, ` + reProposal + `)*)$`), true},
	{"proposals-configured", regexp.MustCompile(`^configured proposals: (` + reProposal + `(?:, ` + reProposal + `)*)$`), true},
	{"proposals-unacceptable", regexp.MustCompile(`^received proposals unacceptable$`), true},
	{"no-proposal", regexp.MustCompile(`^no (?:acceptable )?proposal found$`), true},
	{"proposal-selected", regexp.MustCompile(`^selected proposal: (` + reProposal + `)$`), false},
	{"no-ts", regexp.MustCompile(`^no acceptable traffic selectors found$`), true},
	{"ts-unacceptable", regexp.MustCompile(`^traffic selectors ` + reTS + ` === ` + reTS + ` unacceptable$`), true},
	{"notify", regexp.MustCompile(`^received ([A-Z][A-Z0-9_]{2,40}) notify(?: error|, no CHILD_SA built)?$`), true},
	{"mac-mismatch", regexp.MustCompile(`^tried (\d{1,4}) shared keys? for ` + reQuotedID + ` - ` + reQuotedID + `, but MAC mismatched$`), true},
	{"no-shared-key", regexp.MustCompile(`^no shared key found for ` + reQuotedID + ` - ` + reQuotedID + `$`), true},
	{"peer-config-lookup", regexp.MustCompile(`^looking for peer configs matching ` + reAddr + reBracketID + `\.\.\.` + reAddr + reBracketID + `$`), false},
	{"no-peer-config", regexp.MustCompile(`^no matching peer config found$`), true},
	{"dh-unacceptable", regexp.MustCompile(`^DH group ([A-Z0-9_]{2,30}) unacceptable, requesting ([A-Z0-9_]{2,30})$`), true},
	{"peer-dh", regexp.MustCompile(`^peer didn't accept DH group ([A-Z0-9_]{2,30}), it requested ([A-Z0-9_]{2,30})$`), true},
	{"remote-initiating", regexp.MustCompile(`^` + reAddr + ` is initiating an IKE_SA$`), false},
	{"packet-received", regexp.MustCompile(`^received packet: from ` + reAddr + `\[(\d{1,5})\] to ` + reAddr + `\[(\d{1,5})\] \((\d{1,6}) bytes\)$`), false},
	{"initiating", regexp.MustCompile(`^initiating IKE_SA ` + reConn + `\[(\d{1,10})\] to ` + reAddr + `$`), false},
	{"retransmit", regexp.MustCompile(`^retransmit (\d{1,4}) of request with message ID (\d{1,10})$`), false},
	{"giving-up", regexp.MustCompile(`^giving up after (\d{1,4}) retransmits$`), true},
	{"not-responding", regexp.MustCompile(`^establishing IKE_SA failed, peer not responding$`), true},
	{"half-open-timeout", regexp.MustCompile(`^deleting half open IKE_SA with ` + reAddr + ` after timeout$`), true},
	{"established", regexp.MustCompile(`^IKE_SA ` + reConn + `\[(\d{1,10})\] established between ` + reAddr + reBracketID + `\.\.\.` + reAddr + reBracketID + `$`), true},
}

// parseCharon keeps the lines of charon's log in a known shape; dropped counts the others.
func parseCharon(lines []logLine) (entries []charonEntry, dropped int) {
	for _, l := range lines {
		m := charonPrefix.FindStringSubmatch(l.Text)
		if m == nil {
			dropped++
			continue
		}
		e := charonEntry{Time: l.Time, Conn: m[2]}
		if m[3] != "" {
			e.SA, _ = strconv.Atoi(m[3])
		}
		msg := m[4]
		for _, s := range charonShapes {
			if v := s.re.FindStringSubmatch(msg); v != nil {
				e.Shape, e.Values, e.Message = s.name, v[1:], msg
				break
			}
		}
		if e.Shape == "" {
			dropped++
			continue
		}
		entries = append(entries, e)
	}
	return entries, dropped
}

// shown reports whether the entry belongs in a printed excerpt.
func (e charonEntry) shown() bool {
	for _, s := range charonShapes {
		if s.name == e.Shape {
			return s.show
		}
	}
	return false
}

// String is the entry as printed: the IKE_SA and the matched message.
func (e charonEntry) String() string {
	sa := ""
	switch {
	case e.Conn != "":
		sa = fmt.Sprintf("<%s|%d> ", e.Conn, e.SA)
	case e.SA != 0:
		sa = fmt.Sprintf("<%d> ", e.SA)
	}
	return sa + e.Message
}

// ikeSA is what charon's log says about one IKE_SA.
type ikeSA struct {
	conn               string
	remoteAddr         string
	localID, remoteID  string
	packetsFromRemote  int
	entries            []charonEntry
	initiatedByGateway bool
}

// charonSAs groups the entries by IKE_SA, learning each one's connection, remote address and
// identities from the lines that name them. Entries without an IKE_SA are left out.
func charonSAs(entries []charonEntry) map[int]*ikeSA {
	sas := map[int]*ikeSA{}
	for _, e := range entries {
		if e.SA == 0 {
			continue
		}
		sa := sas[e.SA]
		if sa == nil {
			sa = &ikeSA{}
			sas[e.SA] = sa
		}
		if e.Conn != "" {
			sa.conn = e.Conn
		}
		v := e.Values
		switch e.Shape {
		case "packet-received":
			if sa.remoteAddr == "" {
				sa.remoteAddr = v[0]
			}
			if sa.remoteAddr == v[0] {
				sa.packetsFromRemote++
			}
		case "remote-initiating":
			sa.remoteAddr = v[0]
		case "initiating":
			sa.conn, sa.remoteAddr, sa.initiatedByGateway = strings.ReplaceAll(v[0], ".", "_"), v[2], true
		case "peer-config-lookup":
			sa.localID, sa.remoteAddr, sa.remoteID = v[1], v[2], v[3]
		case "established":
			sa.localID, sa.remoteAddr, sa.remoteID = v[3], v[4], v[5]
		case "no-shared-key", "mac-mismatch":
			off := 0
			if e.Shape == "mac-mismatch" {
				off = 1
			}
			sa.localID, sa.remoteID = v[off], v[off+1]
		}
		sa.entries = append(sa.entries, e)
	}
	return sas
}

// charonConnName is the connection the gateway's charon names after a peer (the peer's name
// where it is no Kubernetes object name: nothing of charon's will match it).
func charonConnName(peer string) string {
	if name, err := swanconf.ConnectionName(peer); err == nil {
		return name
	}
	return peer
}

// peerSAs are the IKE_SAs of one peer: its connection by name, or — while charon does not know
// the connection yet (a responder before IKE_AUTH) — its address or identity.
func peerSAs(sas map[int]*ikeSA, peerName, address, remoteID string) []*ikeSA {
	conn := charonConnName(peerName)
	var out []*ikeSA
	ids := make([]int, 0, len(sas))
	for id := range sas {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		sa := sas[id]
		switch {
		case sa.conn != "":
			if sa.conn == conn {
				out = append(out, sa)
			}
		case sameAddr(sa.remoteAddr, address), sa.remoteID != "" && model.NormalizeID(sa.remoteID) == model.NormalizeID(remoteID):
			out = append(out, sa)
		}
	}
	return out
}

func sameAddr(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	return err1 == nil && err2 == nil && x.Unmap() == y.Unmap()
}

// --- agent ---

// agentEntry is one line of the agent's log (zap JSON) worth showing.
type agentEntry struct {
	Time  time.Time
	Level string
	// Message is the agent's message, one of agentMessages; Fields the whitelisted fields.
	Message string
	Fields  []string
	// Known is false for an error whose message is not one the plugin knows: only its level
	// and time are shown.
	Known bool
}

// agentMessages are the agent's log messages diagnose shows (errors, and the info lines that
// report a failure), exactly as the agent writes them. A test checks each is still in the
// agent's source.
var agentMessages = []string{
	"applying configuration failed; keeping the last good one",
	"gateway configuration refused; keeping the last applied one",
	"revoked grants: established connections could not be cut; new ones are refused",
	"ruleset repaired: connections the drifted table let start could not be cut; new ones are refused",
	"nftables ruleset drifted from the one applied; re-applied it",
	"checking the nftables ruleset",
	"refreshing tunnel state",
	"tunnel negotiation failed",
	"initiate failed",
	"lost charon's event session, reconnecting",
	"loading the configuration again after reconnecting to charon",
	"cannot list the SAs of a connection whose key changed",
	"reading the device failed",
	"bringing the userspace device up to initiate handshakes failed",
	"not routing a peer's subnet: this network namespace already has its own route for it, which stays",
	"metrics server",
	"removing the gateway's ruleset and addresses from the node",
}

// agentFields are the fields shown beside a message, with what their values may look like.
var agentFields = []struct {
	key string
	re  *regexp.Regexp
}{
	{"connection", regexp.MustCompile(`^[A-Za-z0-9_.-]{1,253}$`)},
	{"peer", regexp.MustCompile(`^[a-z0-9.-]{1,253}$`)},
	{"child", regexp.MustCompile(`^[A-Za-z0-9_.-]{1,253}$`)},
	{"state", regexp.MustCompile(`^[A-Za-z]{1,40}$`)},
	{"drift", regexp.MustCompile(`^[A-Za-z -]{1,40}$`)},
	{"retryIn", regexp.MustCompile(`^[0-9.hmsµn]{1,20}$`)},
	{"generation", regexp.MustCompile(`^[0-9]{1,19}$`)},
	{"connections", regexp.MustCompile(`^[0-9]{1,10}$`)},
	{"destination", regexp.MustCompile(`^[0-9A-Fa-f.:/]{1,50}$`)},
}

var logLevel = regexp.MustCompile(`^[a-z]{1,10}$`)

// parseAgent keeps the agent's error lines and the info lines that report a failure;
// dropped counts the other lines it could not show (not JSON, or an unknown info message is
// simply not interesting and not counted).
func parseAgent(lines []logLine) (entries []agentEntry, dropped int) {
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l.Text), &m); err != nil {
			dropped++
			continue
		}
		level, _ := m["level"].(string)
		msg, _ := m["msg"].(string)
		known := false
		for _, k := range agentMessages {
			if msg == k {
				known = true
			}
		}
		isErr := level == "error" || level == "dpanic" || level == "panic" || level == "fatal"
		if !known && !isErr {
			continue
		}
		e := agentEntry{Time: l.Time, Level: level, Known: known}
		if !logLevel.MatchString(level) {
			e.Level = "?"
		}
		if known {
			e.Message = msg
			for _, f := range agentFields {
				v, ok := m[f.key]
				if !ok {
					continue
				}
				s := fmt.Sprint(v)
				if f, isNum := v.(float64); isNum {
					s = strconv.FormatFloat(f, 'f', -1, 64)
				}
				if f.re.MatchString(s) {
					e.Fields = append(e.Fields, f.key+"="+s)
				}
			}
			// the charon message of a negotiation failure, when it has a known shape
			if text, ok := m["message"].(string); ok {
				if ce, _ := parseCharon([]logLine{{Text: "00[IKE] " + text}}); len(ce) == 1 {
					e.Fields = append(e.Fields, fmt.Sprintf("charon=%q", ce[0].Message))
				}
			}
		}
		entries = append(entries, e)
	}
	return entries, dropped
}

// String is the entry as printed.
func (e agentEntry) String() string {
	if !e.Known {
		return e.Level + " (a message kubectl vpn does not know; see the agent's log)"
	}
	s := e.Level + " " + e.Message
	if len(e.Fields) > 0 {
		s += " " + strings.Join(e.Fields, " ")
	}
	return s
}
