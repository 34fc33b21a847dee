package version

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfoName is the metric NewBuildInfo exports.
const BuildInfoName = "bnerd_vpn_build_info"

// NewBuildInfo is a gauge, always 1, whose labels say which build is running: version (Get)
// and goversion. Each binary registers it into its own registry (the operator into
// controller-runtime's, the gateway agent into the one its /metrics serves).
func NewBuildInfo() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        BuildInfoName,
		Help:        "Always 1; the labels say which build is running (version, goversion).",
		ConstLabels: prometheus.Labels{"version": Get(), "goversion": runtime.Version()},
	})
	g.Set(1)
	return g
}
