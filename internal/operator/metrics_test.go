package operator_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bnerd/bnerd-vpn-operator/internal/operator"
	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// RegisterMetrics adds bnerd_vpn_build_info{version,goversion} = 1 and the manager restarts to
// any registry, and registering twice (Run once per manager's supervisor, tests many times) is
// harmless.
func TestRegisterMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	for range 2 {
		if err := operator.RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buildInfo, restarts bool
	for _, f := range fams {
		switch f.GetName() {
		case "bnerd_vpn_operator_manager_restarts_total":
			restarts = true
		case version.BuildInfoName:
			buildInfo = true
			if len(f.Metric) != 1 {
				t.Fatalf("%d build info series", len(f.Metric))
			}
			m := f.Metric[0]
			labels := map[string]string{}
			for _, l := range m.Label {
				labels[l.GetName()] = l.GetValue()
			}
			if m.GetGauge().GetValue() != 1 || len(labels) != 2 || labels["version"] != version.Get() || labels["goversion"] != runtime.Version() {
				t.Errorf("build info %v", m)
			}
		}
	}
	if !buildInfo || !restarts {
		t.Errorf("build info registered: %v, manager restarts: %v", buildInfo, restarts)
	}
}

// The operator's /metrics (controller-runtime's registry) carries the build info from the
// start, before the API server answers.
func TestBuildInfoServedBeforeTheAPIServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the operator waits for its API server
	r := newRunner(t, "default", hostConfig(addr), false)
	r.Config.MetricsAddr = "127.0.0.1:0"
	listening := make(chan string, 1)
	r.Listening = func(_, metrics string) { listening <- metrics }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return within 30s of its context's end")
		}
	}()
	var metrics string
	select {
	case metrics = <-listening:
	case err := <-done:
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening within 10s")
	}
	want := fmt.Sprintf("%s{goversion=%q,version=%q} 1\n", version.BuildInfoName, runtime.Version(), version.Get())
	code, body := get(t, metrics, "/metrics")
	if code != 200 || !strings.Contains(body, want) {
		t.Errorf("/metrics: %d, no line %q in\n%s", code, want, body)
	}
	if s := r.Status(); s.Phase != operator.PhaseWaitingForAPIServer {
		t.Errorf("status %s, want still waiting for the API server", s)
	}
}
