package strongswan

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/strongswan/charontest"
)

func TestExplore(t *testing.T) {
	if os.Getenv("EXPLORE") == "" {
		t.Skip()
	}
	charontest.Skip(t)
	run := charontest.NewRun(t)
	site, gw := run.Netns("site"), run.Netns("gw")
	charontest.Veth(site, "veth-site", "198.51.100.2/24", gw, "veth-gw", "198.51.100.1/24")
	site.AddLoopback("203.0.113.1/32")
	gw.AddLoopback("100.64.7.1/32")
	sc := charontest.Start(t, site, "site", charontest.Config{})
	gc := charontest.Start(t, gw, "gw", charontest.Config{})
	psk := os.Getenv("SITEPSK")
	if psk == "" {
		psk = "correct-horse"
	}
	if err := sc.LoadSwanctlConf(fmt.Sprintf(`connections {
  gw {
    version = 2
    local_addrs = 198.51.100.2
    remote_addrs = 198.51.100.1
    proposals = %s
    mobike = no
    dpd_delay = 1s
    local { auth = psk
      id = site-a.example.test }
    remote { auth = psk
      id = gw.example.test }
    children {
      gw {
        local_ts = 203.0.113.0/28
        remote_ts = 100.64.7.0/24
        esp_proposals = %s
        start_action = %s
        dpd_action = restart
      }
    }
  }
}
secrets {
  ike-gw {
    id-1 = site-a.example.test
    id-2 = gw.example.test
    secret = "%s"
  }
}
`, or(os.Getenv("SITEPROP"), "aes256gcm16-prfsha256-ecp256"), or(os.Getenv("SITEESP"), "aes256gcm16-ecp256"), os.Getenv("SITESTART")+"none", psk)); err != nil {
		t.Fatal(err)
	}
	ev, err := vici.NewSession(vici.WithSocketPath(gc.Socket))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan vici.Event, 1000)
	ev.NotifyEvents(ch)
	if err := ev.Subscribe("ike-updown", "child-updown", "ike-rekey", "child-rekey", "log", "ike-update", "ike-state-change"); err != nil {
		t.Log("subscribe:", err)
		if err := ev.Subscribe("ike-updown", "child-updown", "ike-rekey", "child-rekey", "log"); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		for e := range ch {
			t.Logf("EVENT %s %s", e.Name, e.Message)
		}
	}()
	s, err := vici.NewSession(vici.WithSocketPath(gc.Socket))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := vici.NewMessage()
	body := vici.NewMessage()
	for k, v := range map[string]any{"version": "2", "local_addrs": []string{"%any"}, "remote_addrs": []string{"198.51.100.2"}, "proposals": []string{"aes256gcm16-prfsha256-ecp256"}, "mobike": "no", "dpd_delay": "1s", "unique": "replace", "keyingtries": "0"} {
		body.Set(k, v)
	}
	l := vici.NewMessage()
	l.Set("auth", "psk")
	l.Set("id", "gw.example.test")
	r := vici.NewMessage()
	r.Set("auth", "psk")
	r.Set("id", "site-a.example.test")
	body.Set("local", l)
	body.Set("remote", r)
	c := vici.NewMessage()
	c.Set("local_ts", []string{"100.64.7.0/24"})
	c.Set("remote_ts", []string{"203.0.113.0/28"})
	c.Set("esp_proposals", []string{"aes256gcm16-ecp256"})
	c.Set("start_action", os.Getenv("GWSTART"))
	c.Set("dpd_action", "restart")
	c.Set("close_action", "start")
	ch2 := vici.NewMessage()
	ch2.Set("site-a", c)
	body.Set("children", ch2)
	m.Set("site-a", body)
	sh := vici.NewMessage()
	sh.Set("id", "ike-site-a")
	sh.Set("type", "IKE")
	sh.Set("data", "correct-horse")
	sh.Set("owners", []string{"gw.example.test", "site-a.example.test"})
	if _, err := s.Call(ctx, "load-shared", sh); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := s.Call(ctx, "load-conn", m); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("INITSITE") != "" {
		out, err := sc.Swanctl("--initiate", "--child", "gw", "--timeout", "5")
		t.Logf("site initiate: %s %v", out, err)
	}
	if os.Getenv("INIT") != "" {
		in := vici.NewMessage()
		in.Set("child", "site-a")
		in.Set("timeout", "-1")
		rep, err := s.Call(ctx, "initiate", in)
		t.Logf("initiate: %v %v", rep, err)
	}
	time.Sleep(3 * time.Second)
	t.Logf("after %s", time.Since(t0))
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
		t.Logf("SA %v %v", m, err)
	}
	out, _ := site.Run("ping", "-c", "3", "-i", "0.2", "-I", "203.0.113.1", "100.64.7.1")
	t.Log(out)
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
		t.Logf("SA %v %v", m, err)
	}
	if os.Getenv("RELOAD") != "" {
		if _, err := s.Call(ctx, "load-conn", m); err != nil {
			t.Fatal(err)
		}
		t.Log("RELOADED SAME")
		time.Sleep(2 * time.Second)
		for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
			t.Logf("after reload SA %v %v", m, err)
		}
		c.Set("rekey_time", "2h")
		if _, err := s.Call(ctx, "load-conn", m); err != nil {
			t.Fatal(err)
		}
		t.Log("RELOADED CHANGED CHILD")
		time.Sleep(2 * time.Second)
		for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
			t.Logf("after reload2 SA %v %v", m, err)
		}
	}
	if os.Getenv("KILL") != "" {
		sc.Kill()
		t.Log("KILLED")
		for i := 0; i < 12; i++ {
			time.Sleep(500 * time.Millisecond)
			for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
				t.Logf("after kill %d SA %v %v", i, m, err)
			}
		}
		if err := sc.Start(); err != nil {
			t.Fatal(err)
		}
		t.Log("RESTARTED")
		time.Sleep(3 * time.Second)
		for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
			t.Logf("after restart SA %v %v", m, err)
		}
	}
	un := vici.NewMessage()
	un.Set("name", "site-a")
	rep, err := s.Call(ctx, "unload-conn", un)
	t.Logf("unload: %v %v", rep, err)
	time.Sleep(time.Second)
	for m, err := range s.CallStreaming(ctx, "list-sas", "list-sa", nil) {
		t.Logf("after unload SA %v %v", m, err)
	}
	ts := vici.NewMessage()
	ts.Set("ike", "site-a")
	ts.Set("timeout", "-1")
	rep, err = s.Call(ctx, "terminate", ts)
	t.Logf("terminate: %v %v", rep, err)
	time.Sleep(time.Second)
	t.Log(gc.Log())
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
