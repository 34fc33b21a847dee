package main

import (
	"context"

	"github.com/go-logr/logr"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/strongswan"
)

func newIPsecDriver(ctx context.Context, o driverOptions, log logr.Logger) (agent.Driver, error) {
	return strongswan.New(ctx, o.viciSocket, strongswan.Options{Log: log})
}
