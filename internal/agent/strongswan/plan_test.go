package strongswan

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
)

func planConn(name, remote string) strongswan.Connection {
	return strongswan.Connection{Name: name, Peer: name, IKE: strongswan.IKE{Version: 2, RemoteAddrs: []string{remote}}}
}

func planKey(conn, fp string) keyLoad {
	return keyLoad{key: strongswan.SharedKey{ID: "ike-" + conn, Connection: conn,
		Secret: model.SecretKeyRef{Name: conn + "-psk", Key: "psk"}}, data: []byte("secret-" + fp), fp: fp}
}

func mustFingerprint(t *testing.T, c strongswan.Connection) string {
	t.Helper()
	fp, err := connFingerprint(c)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// TestPlanApply: the bundle, its keys as read and what charon holds -> the unloads and loads.
func TestPlanApply(t *testing.T) {
	a, b := planConn("a", "198.51.100.1"), planConn("b", "%any")
	aChanged := planConn("a", "198.51.100.2")
	fpA, fpB := mustFingerprint(t, a), mustFingerprint(t, b)
	keys := map[string][]keyLoad{"a": {planKey("a", "ka")}, "b": {planKey("b", "kb")}}

	// step is what a connection's plan says: its keys to load ("id" or "id replaces"), and
	// "load", "reload" or "" for the connection.
	type step struct {
		conn string
		keys []string
		load string
	}
	tests := []struct {
		name        string
		conns       []strongswan.Connection
		keysByConn  map[string][]keyLoad
		missing     map[string]string
		loadedConns map[string]string
		loadedKeys  map[string]string
		unloadConns []string
		unloadKeys  []string
		steps       []step
	}{
		{
			name:       "nothing loaded: every key, then every connection, in the bundle's order",
			conns:      []strongswan.Connection{b, a},
			keysByConn: keys,
			steps:      []step{{"b", []string{"ike-b"}, "load"}, {"a", []string{"ike-a"}, "load"}},
		},
		{
			name:        "everything loaded as it is: nothing to do",
			conns:       []strongswan.Connection{a, b},
			keysByConn:  keys,
			loadedConns: map[string]string{"a": fpA, "b": fpB},
			loadedKeys:  map[string]string{"ike-a": "ka", "ike-b": "kb"},
			steps:       []step{{"a", nil, ""}, {"b", nil, ""}},
		},
		{
			name:        "a changed connection is reloaded, its unchanged key untouched",
			conns:       []strongswan.Connection{aChanged},
			keysByConn:  keys,
			loadedConns: map[string]string{"a": fpA},
			loadedKeys:  map[string]string{"ike-a": "ka"},
			steps:       []step{{"a", nil, "reload"}},
		},
		{
			name:        "a changed key replaces the loaded one; the connection is not reloaded",
			conns:       []strongswan.Connection{a},
			keysByConn:  map[string][]keyLoad{"a": {planKey("a", "ka2")}},
			loadedConns: map[string]string{"a": fpA},
			loadedKeys:  map[string]string{"ike-a": "ka"},
			steps:       []step{{"a", []string{"ike-a replaces"}, ""}},
		},
		{
			name:        "a connection missing a key is not wanted: it and its key are unloaded",
			conns:       []strongswan.Connection{a, b},
			keysByConn:  map[string][]keyLoad{"b": {planKey("b", "kb")}},
			missing:     map[string]string{"a": "pre-shared key not loaded"},
			loadedConns: map[string]string{"a": fpA},
			loadedKeys:  map[string]string{"ike-a": "ka"},
			unloadConns: []string{"a"},
			unloadKeys:  []string{"ike-a"},
			steps:       []step{{"b", []string{"ike-b"}, "load"}},
		},
		{
			name:        "what the bundle no longer has is unloaded, sorted",
			conns:       []strongswan.Connection{b},
			keysByConn:  keys,
			loadedConns: map[string]string{"z": "1", "b": fpB, "c": "2"},
			loadedKeys:  map[string]string{"ike-z": "1", "ike-b": "kb", "ike-c": "2"},
			unloadConns: []string{"c", "z"},
			unloadKeys:  []string{"ike-c", "ike-z"},
			steps:       []step{{"b", nil, ""}},
		},
		{
			name:       "a connection named twice is loaded once",
			conns:      []strongswan.Connection{a, a},
			keysByConn: keys,
			steps:      []step{{"a", []string{"ike-a"}, "load"}, {"a", nil, ""}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			missing := tt.missing
			if missing == nil {
				missing = map[string]string{}
			}
			plan := planApply(&strongswan.Config{Connections: tt.conns}, tt.keysByConn, missing, tt.loadedConns, tt.loadedKeys)
			if !slices.Equal(plan.unloadConns, tt.unloadConns) || !slices.Equal(plan.unloadKeys, tt.unloadKeys) {
				t.Errorf("unloads %v %v, want %v %v", plan.unloadConns, plan.unloadKeys, tt.unloadConns, tt.unloadKeys)
			}
			var got []step
			for _, cp := range plan.conns {
				s := step{conn: cp.conn.Name}
				for _, k := range cp.keys {
					if k.replaces {
						s.keys = append(s.keys, k.key.ID+" replaces")
					} else {
						s.keys = append(s.keys, k.key.ID)
					}
				}
				switch {
				case cp.fpErr != nil:
					t.Errorf("%s: fingerprint: %v", cp.conn.Name, cp.fpErr)
				case cp.load && cp.reload:
					s.load = "reload"
				case cp.load:
					s.load = "load"
				}
				if cp.keyReplaced() != slices.ContainsFunc(s.keys, func(k string) bool { return strings.HasSuffix(k, " replaces") }) {
					t.Errorf("%s: keyReplaced %v", cp.conn.Name, cp.keyReplaced())
				}
				got = append(got, s)
			}
			if len(got) != len(tt.steps) {
				t.Fatalf("steps %+v, want %+v", got, tt.steps)
			}
			for i := range got {
				if got[i].conn != tt.steps[i].conn || !slices.Equal(got[i].keys, tt.steps[i].keys) || got[i].load != tt.steps[i].load {
					t.Errorf("step %d: %+v, want %+v", i, got[i], tt.steps[i])
				}
			}
			for _, c := range tt.conns {
				if _, miss := missing[c.Name]; plan.wanted[c.Name] == miss {
					t.Errorf("%s: wanted %v, missing %v", c.Name, plan.wanted[c.Name], miss)
				}
			}
		})
	}
}

type secretMap map[model.SecretKeyRef][]byte

func (s secretMap) Get(ref model.SecretKeyRef) ([]byte, error) {
	v, ok := s[ref]
	if !ok {
		return nil, errors.New("not found")
	}
	return v, nil
}

// TestReadKeys: a connection with any key missing or empty is missing, and none of its keys
// is loaded.
func TestReadKeys(t *testing.T) {
	d := &Driver{keyMAC: []byte("test")}
	ref := func(name string) model.SecretKeyRef { return model.SecretKeyRef{Name: name, Key: "psk"} }
	keys := []strongswan.SharedKey{
		{ID: "ike-a", Connection: "a", Secret: ref("a")},
		{ID: "ike-b", Connection: "b", Secret: ref("b")},
		{ID: "ike-b2", Connection: "b", Secret: ref("gone")},
		{ID: "ike-c", Connection: "c", Secret: ref("empty")},
	}
	byConn, missing := d.readKeys(keys, secretMap{ref("a"): []byte("x"), ref("b"): []byte("y"), ref("empty"): {}})
	if len(byConn) != 1 || len(byConn["a"]) != 1 || byConn["a"][0].fp != d.keyFingerprint(keys[0], []byte("x")) {
		t.Errorf("keys by connection %+v", byConn)
	}
	if !strings.Contains(missing["b"], `Secret "gone" key "psk": not found`) || !strings.Contains(missing["c"], `Secret "empty" key "psk" is empty`) || len(missing) != 2 {
		t.Errorf("missing %q", missing)
	}
}

// fakeCharon records the commands and fails those named in fail.
type fakeCharon struct {
	calls []string
	fail  map[string]bool
}

func (f *fakeCharon) do(call string) error {
	f.calls = append(f.calls, call)
	if f.fail[call] {
		return errors.New("refused")
	}
	return nil
}

func (f *fakeCharon) unloadConn(_ context.Context, name string) error {
	return f.do("unload-conn " + name)
}
func (f *fakeCharon) unloadShared(_ context.Context, id string) error {
	return f.do("unload-shared " + id)
}
func (f *fakeCharon) loadShared(_ context.Context, k strongswan.SharedKey, _ []byte) error {
	return f.do("load-shared " + k.ID)
}
func (f *fakeCharon) loadConn(_ context.Context, c strongswan.Connection) error {
	return f.do("load-conn " + c.Name)
}
func (f *fakeCharon) initiate(_ context.Context, c strongswan.Connection) {
	_ = f.do("initiate " + c.Name)
}
func (f *fakeCharon) kick(_ context.Context, c strongswan.Connection) { _ = f.do("kick " + c.Name) }

// TestCarryOut runs plans against a fake charon: unloads first, then each connection's keys
// and the connection; a failed key leaves its connection alone, a replaced key alone kicks it.
func TestCarryOut(t *testing.T) {
	a, b, c := planConn("a", "198.51.100.1"), planConn("b", "198.51.100.2"), planConn("c", "198.51.100.3")
	fpA := mustFingerprint(t, a)
	cfg := &strongswan.Config{Connections: []strongswan.Connection{a, b, c}}
	keys := map[string][]keyLoad{"a": {planKey("a", "ka2")}, "b": {planKey("b", "kb")}, "c": {planKey("c", "kc")}}
	d := &Driver{
		log:         logr.Discard(),
		changes:     make(chan struct{}, 1),
		loadedConns: map[string]string{"a": fpA, "old": "1"},
		loadedKeys:  map[string]string{"ike-a": "ka", "ike-old": "1"},
		loadErrs:    map[string]string{},
		runtime:     map[string]*connRuntime{},
	}
	plan := planApply(cfg, keys, map[string]string{}, d.loadedConns, d.loadedKeys)
	d.track(cfg, plan)
	charon := &fakeCharon{fail: map[string]bool{"load-shared ike-b": true, "unload-shared ike-old": true}}
	err := d.carryOut(context.Background(), plan, charon)
	want := []string{
		"unload-conn old", "unload-shared ike-old",
		"load-shared ike-a", "kick a",
		"load-shared ike-b",
		"load-shared ike-c", "load-conn c", "initiate c",
	}
	if !slices.Equal(charon.calls, want) {
		t.Errorf("calls\n %q\nwant\n %q", charon.calls, want)
	}
	if err == nil || !strings.Contains(err.Error(), "unloading pre-shared key ike-old: refused") ||
		!strings.Contains(err.Error(), `connection b: loading pre-shared key ike-b (Secret "b-psk" key "psk"): refused`) {
		t.Errorf("error %v", err)
	}
	if _, ok := d.loadedConns["old"]; ok || d.loadedKeys["ike-old"] != "1" {
		t.Errorf("unloads recorded wrongly: %v %v", d.loadedConns, d.loadedKeys)
	}
	if d.loadedKeys["ike-a"] != "ka2" || d.loadedKeys["ike-c"] != "kc" || d.loadedConns["c"] == "" || d.loadedConns["b"] != "" {
		t.Errorf("loads recorded wrongly: %v %v", d.loadedConns, d.loadedKeys)
	}
	if d.loadErrs["b"] != "pre-shared key could not be loaded" || len(d.loadErrs) != 1 {
		t.Errorf("load errors %v", d.loadErrs)
	}
}
