package cloud_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

type fakeProvider struct {
	name    string
	deletes int
	err     error
}

func (f *fakeProvider) Ensure(context.Context, cloud.Request) (cloud.Result, error) {
	return cloud.Result{Ready: true, Reason: cloud.ReasonReady, Message: f.name}, nil
}

func (f *fakeProvider) Delete(context.Context, cloud.Request) error { f.deletes++; return f.err }

func req(kind model.EndpointKind) cloud.Request {
	return cloud.Request{Namespace: "ns", Name: "gw", UID: "uid-1", Protocol: model.ProtocolIPsec, Endpoint: model.Endpoint{Kind: kind}}
}

func TestChooser(t *testing.T) {
	ctx := context.Background()
	lb, host := &fakeProvider{name: "lb"}, &fakeProvider{name: "host"}
	ch := cloud.NewChooser(nil, lb, host)

	for kind, want := range map[model.EndpointKind]string{model.EndpointLoadBalancer: "lb", model.EndpointHostNetwork: "host"} {
		res, err := ch.Ensure(ctx, req(kind))
		if err != nil || res.Message != want {
			t.Errorf("%s: %+v, %v", kind, res, err)
		}
	}
	for _, kind := range []model.EndpointKind{model.EndpointFloatingIP, model.EndpointFloatingIPPool} {
		p, err := ch.For(kind)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Ensure(ctx, req(kind))
		if err != nil || res.Reason != cloud.ReasonProviderNotConfigured || !res.Terminal || res.Ready || res.RetryAfter != 0 {
			t.Errorf("%s without OpenStack: %+v, %v", kind, res, err)
		}
		if err := p.Delete(ctx, req(kind)); err != nil {
			t.Errorf("Delete of an unconfigured provider: %v", err)
		}
	}
	if _, err := ch.For("bogus"); err == nil {
		t.Error("unknown kind accepted")
	}
	if res, err := ch.Ensure(ctx, req("bogus")); err != nil || res.Reason != cloud.ReasonInvalidConfiguration || !res.Terminal {
		t.Errorf("unknown kind: %+v, %v", res, err)
	}

	if err := ch.DeleteAll(ctx, req(model.EndpointHostNetwork)); err != nil || lb.deletes != 1 || host.deletes != 1 {
		t.Errorf("DeleteAll: %v, deletes lb=%d host=%d", err, lb.deletes, host.deletes)
	}
	lb.err = errors.New("boom")
	if err := ch.DeleteAll(ctx, req(model.EndpointHostNetwork)); err == nil {
		t.Error("DeleteAll swallowed an error")
	}
}

func TestSettle(t *testing.T) {
	res, err := cloud.Settle(cloud.Terminalf(cloud.ReasonQuotaExceeded, 5*time.Minute, "over quota"))
	if err != nil || !res.Terminal || res.Reason != cloud.ReasonQuotaExceeded || res.RetryAfter != 5*time.Minute || res.Message != "over quota" {
		t.Errorf("terminal: %+v, %v", res, err)
	}
	res, err = cloud.Settle(cloud.Transient(context.DeadlineExceeded, "timed out"))
	if err == nil || res.Terminal || res.Reason != cloud.ReasonProvisioning || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("transient: %+v, %v", res, err)
	}
	res, err = cloud.Settle(errors.New("plain"))
	if ce, ok := cloud.AsError(err); !ok || ce.Terminal || res.Reason != cloud.ReasonProvisioning || res.Message != "plain" {
		t.Errorf("plain error: %+v, %v", res, err)
	}
	if got := cloud.ResultFromError(errors.New("x")); got.Reason != cloud.ReasonProvisioning || got.Message != "x" {
		t.Errorf("ResultFromError: %+v", got)
	}
}

func TestTunnelPorts(t *testing.T) {
	if got := cloud.TunnelPorts(model.ProtocolIPsec, 51820); !slices.Equal(got, []cloud.Port{{"udp", 500}, {"udp", 4500}}) {
		t.Errorf("ipsec: %v", got)
	}
	if got := cloud.TunnelPorts(model.ProtocolWireGuard, 0); !slices.Equal(got, []cloud.Port{{"udp", 51820}}) {
		t.Errorf("wireguard default: %v", got)
	}
	if got := cloud.TunnelPorts(model.ProtocolWireGuard, 443); !slices.Equal(got, []cloud.Port{{"udp", 443}}) {
		t.Errorf("wireguard: %v", got)
	}
}

func TestRequestValidate(t *testing.T) {
	good := req(model.EndpointHostNetwork)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*cloud.Request){
		func(r *cloud.Request) { r.UID = "" },
		func(r *cloud.Request) { r.Name = "" },
		func(r *cloud.Request) { r.Protocol = "gre" },
	} {
		r := good
		mut(&r)
		if r.Validate() == nil {
			t.Errorf("invalid request accepted: %+v", r)
		}
	}
}
