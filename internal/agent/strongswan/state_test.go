package strongswan

import (
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
)

// TestStateDerivation covers how a connection's IKE_SAs and the failures its log events
// named become a PeerState (no charon needed).
func TestStateDerivation(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	installed := map[string]childSA{"c-1": {Name: "c", State: "INSTALLED", BytesIn: "100", BytesOut: "200", PacketsIn: "1", PacketsOut: "2"}}
	up := ikeSA{UniqueID: "7", State: "ESTABLISHED", Established: "30", Children: installed}
	for _, tc := range []struct {
		name      string
		sas       []ikeSA
		fail      string
		failID    uint64
		want      string
		wantBytes uint64
	}{
		{name: "no SA", want: agent.StateDown},
		{name: "established with CHILD_SA", sas: []ikeSA{up}, want: agent.StateEstablished, wantBytes: 100},
		{name: "established wins over an older failure", sas: []ikeSA{up}, fail: agent.StateAuthFailed, failID: 3, want: agent.StateEstablished, wantBytes: 100},
		{name: "IKE_SA without CHILD_SA", sas: []ikeSA{{UniqueID: "7", State: "ESTABLISHED"}}, want: agent.StateConnecting},
		{name: "CHILD_SA refused", sas: []ikeSA{{UniqueID: "7", State: "ESTABLISHED"}}, fail: agent.StateNoProposalChosen, failID: 7, want: agent.StateNoProposalChosen},
		{name: "peer answers", sas: []ikeSA{{UniqueID: "8", State: "CONNECTING", Initiator: "yes", ResponderSPI: "0123456789abcdef"}}, want: agent.StateConnecting},
		{name: "peer does not answer", sas: []ikeSA{{UniqueID: "8", State: "CONNECTING", Initiator: "yes", ResponderSPI: "0000000000000000", RemoteHost: "198.51.100.2"}}, want: agent.StateDown},
		{name: "we respond", sas: []ikeSA{{UniqueID: "8", State: "CONNECTING", ResponderSPI: "0123456789abcdef"}}, want: agent.StateConnecting},
		{name: "failure, nothing left", fail: agent.StateAuthFailed, failID: 4, want: agent.StateAuthFailed},
		{name: "deleting", sas: []ikeSA{{UniqueID: "7", State: "DELETING", Children: installed}}, want: agent.StateDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &connRuntime{failState: tc.fail, failMsg: "x", failID: tc.failID}
			st := rt.state(tc.sas, now)
			if st.State != tc.want || st.BytesIn != tc.wantBytes {
				t.Fatalf("got %+v, want %s with %d bytes in", st, tc.want, tc.wantBytes)
			}
			if st.State == agent.StateEstablished {
				if want := now.Add(-30 * time.Second); !st.EstablishedAt.Equal(want) {
					t.Errorf("EstablishedAt %s, want %s", st.EstablishedAt, want)
				}
				if rt.failState != "" {
					t.Errorf("failure %s not cleared by an established IKE_SA", rt.failState)
				}
				// Stable across listings although charon's seconds move on.
				later := up
				later.Established = "31"
				if again := rt.state([]ikeSA{later}, now.Add(1500*time.Millisecond)); !again.EstablishedAt.Equal(st.EstablishedAt) {
					t.Errorf("EstablishedAt moved: %s -> %s", st.EstablishedAt, again.EstablishedAt)
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for msg, want := range map[string]string{
		"received AUTHENTICATION_FAILED notify error":                                          agent.StateAuthFailed,
		"tried 1 shared key for 'gw.example.test' - 'site-a.example.test', but MAC mismatched": agent.StateAuthFailed,
		"received NO_PROPOSAL_CHOSEN notify error":                                             agent.StateNoProposalChosen,
		"received NO_PROPOSAL_CHOSEN notify, no CHILD_SA built":                                agent.StateNoProposalChosen,
		"establishing CHILD_SA site-a{2}":                                                      "",
	} {
		if got, _ := classify(msg); got != want {
			t.Errorf("classify(%q) = %q, want %q", msg, got, want)
		}
	}
}

func TestParseSocket(t *testing.T) {
	for in, want := range map[string]string{"unix:///run/charon.vici": "/run/charon.vici", "/run/x.vici": "/run/x.vici", "tcp://1.2.3.4:1": "", "unix://": ""} {
		_, got, err := parseSocket(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("parseSocket(%q) = %q, %v", in, got, err)
		}
	}
}

// TestExcessChildren: beyond its limit, a peer's newest live CHILD_SAs go; the oldest stay,
// and CHILD_SAs on their way out (deleted, or replaced by a rekey) count for nothing.
func TestExcessChildren(t *testing.T) {
	sa := ikeSA{UniqueID: "3", State: "ESTABLISHED", Children: map[string]childSA{
		"a": {UniqueID: "10", State: "INSTALLED"},
		"b": {UniqueID: "9", State: "DELETING"},
		"c": {UniqueID: "12", State: "INSTALLED"},
		"d": {UniqueID: "11", State: "REKEYED"},
		"e": {UniqueID: "13", State: "INSTALLED"},
	}}
	for _, tc := range []struct {
		limit int
		want  []string
	}{
		{4, nil},
		{3, nil},
		{2, []string{"13"}},
		{1, []string{"12", "13"}},
	} {
		got := excessChildren(sa, tc.limit)
		if len(got) != len(tc.want) {
			t.Errorf("limit %d: %v, want %v", tc.limit, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("limit %d: %v, want %v", tc.limit, got, tc.want)
			}
		}
	}
}
