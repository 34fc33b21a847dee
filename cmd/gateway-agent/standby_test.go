package main

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/availability"
)

// The agent's wiring of a standby: on the host network the VIP (--vip) becomes the Elector's
// announcer and the fence's scope, and a host-network standby without one is refused; in the
// pod network there is neither, and the fence drops all tunnel traffic of the pod.
func TestStandbyWiring(t *testing.T) {
	build := func(args ...string) (*availability.Elector, error) {
		var o runOptions
		f := pflag.NewFlagSet("run", pflag.ContinueOnError)
		o.where.bind(f)
		o.standby.bind(f)
		if err := f.Parse(append([]string{"--standby-lease=acme-gateway-active", "--pod-name=p", "--pod-ip=198.51.100.11"}, args...)); err != nil {
			t.Fatal(err)
		}
		o.namespace, o.gateway, o.metricsAddr = "tenant", "acme", ":9090"
		return o.standby.elector(o, fake.NewClientset(), nil, &agent.Engine{}, &lazyDriver{}, logr.Discard())
	}

	el, err := build("--host-network", "--vip=198.51.100.10")
	if err != nil {
		t.Fatal(err)
	}
	vip, ok := el.Announcer.(*availability.VIP)
	if !ok || vip.Address != netip.MustParseAddr("198.51.100.10") {
		t.Fatalf("announcer %#v, want the VIP", el.Announcer)
	}
	if f, ok := el.Fence.(*availability.Fence); !ok || f.Scope != vip.Address {
		t.Fatalf("fence %#v, want one scoped to the VIP", el.Fence)
	}

	if _, err := build("--host-network"); err == nil || !strings.Contains(err.Error(), "needs --vip") {
		t.Fatalf("a host-network standby without a VIP: %v", err)
	}
	if _, err := build("--host-network", "--vip=2001:db8::1"); err == nil {
		t.Fatal("an IPv6 VIP was taken")
	}

	el, err = build()
	if err != nil {
		t.Fatal(err)
	}
	if el.Announcer != nil {
		t.Fatalf("a pod-network standby has an announcer %#v", el.Announcer)
	}
	if f := el.Fence.(*availability.Fence); f.Scope.IsValid() {
		t.Fatalf("a pod-network fence is scoped to %s", f.Scope)
	}
}

// --vip is a placement flag: only with --host-network, and the model must carry the same VIP.
func TestVIPPlacement(t *testing.T) {
	parse := func(args ...string) error {
		var p placementFlags
		f := pflag.NewFlagSet("run", pflag.ContinueOnError)
		p.bind(f)
		if err := f.Parse(args); err != nil {
			return err
		}
		pl, err := p.placement(f, "tenant", "acme", "")
		if err == nil && pl != nil && pl.VIP != netip.MustParseAddr("198.51.100.10") {
			t.Errorf("placement VIP %s", pl.VIP)
		}
		return err
	}
	if err := parse("--host-network", "--vip=198.51.100.10"); err != nil {
		t.Fatal(err)
	}
	if err := parse("--host-network=false", "--vip=198.51.100.10"); err == nil {
		t.Fatal("--vip in the pod network was taken")
	}
}
