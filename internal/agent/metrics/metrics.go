// Package metrics exposes the gateway's per-peer tunnel and authorization figures, its
// ruleset repairs, (kernel ESP) its spoofed-source drops and (active/standby gateways) the
// pod's role and takeovers, to Prometheus. Labels are names only (namespace, gateway, peer, direction):
// never a key.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// NewRegistry is the registry the agent's /metrics serves: the Go runtime's and the process's
// metrics, bnerd_vpn_build_info, and c. A registry of its own, never the global one.
func NewRegistry(c *Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		version.NewBuildInfo(), c)
	return reg
}

// Collector reads the engine's latest snapshot at scrape time.
type Collector struct {
	Namespace, Gateway string
	Snapshot           func() agent.Snapshot
	// Repairs is the engine's count of ruleset repairs (agent.Engine.Repairs); nil leaves the
	// metric out.
	Repairs func() uint64
	// Rejected is the count of configurations refused (a ConfigMap holding anything but a
	// model that verifies); nil leaves the metric out.
	Rejected func() uint64
	// Availability is the pod's side of an active/standby gateway; nil (a gateway without a
	// standby) leaves its metrics out.
	Availability func() Availability
}

// Availability is what the active/standby metrics show.
type Availability struct {
	// Active: this pod carries the gateway's tunnels.
	Active bool
	// StandbyReady: this pod is active and its standby probed it lately.
	StandbyReady bool
	// Takeovers this pod made, by reason (availability.Reason*).
	Takeovers map[string]uint64
}

var (
	gwLabels  = []string{"namespace", "gateway"}
	labels    = []string{"namespace", "gateway", "peer"}
	dirLabels = []string{"namespace", "gateway", "peer", "direction"}

	descRepairs = prometheus.NewDesc("bnerd_vpn_ruleset_repairs_total",
		"Times the agent found the gateway's nftables table missing or changed and re-applied the rendered ruleset.", gwLabels, nil)

	descRejected = prometheus.NewDesc("bnerd_vpn_config_rejected_total",
		"Gateway configurations the agent refused (anything but a model that verifies); the last good one stays applied.", gwLabels, nil)

	descActive = prometheus.NewDesc("bnerd_vpn_gateway_active",
		"1 when this gateway pod is the active one of an active/standby gateway, 0 when it is the standby.", gwLabels, nil)
	descStandbyReady = prometheus.NewDesc("bnerd_vpn_gateway_standby_ready",
		"1 when this gateway pod is active and its standby probed it within the last second: a takeover could happen now.", gwLabels, nil)
	descTakeovers = prometheus.NewDesc("bnerd_vpn_gateway_takeovers_total",
		"Times this gateway pod became the active one, by reason (Initial, ActiveGone, ActiveUnhealthy, HandedOver).", append(gwLabels[:2:2], "reason"), nil)

	descSpoofed = prometheus.NewDesc("bnerd_vpn_spoofed_drops_total",
		"Packets from the tunnel dropped because their source is not in the subnets of the peer whose SA carried them: a peer sending from another peer's or no peer's addresses (kernel ESP only).", gwLabels, nil)
	descSpoofedBytes = prometheus.NewDesc("bnerd_vpn_spoofed_dropped_bytes_total",
		"Bytes of the packets counted in bnerd_vpn_spoofed_drops_total.", gwLabels, nil)

	descUp         = prometheus.NewDesc("bnerd_vpn_peer_up", "1 when the peer's tunnel is established.", labels, nil)
	descAuthorized = prometheus.NewDesc("bnerd_vpn_peer_authorized", "1 when the peer holds a valid grant.", labels, nil)
	descBytes      = prometheus.NewDesc("bnerd_vpn_peer_bytes_total", "Bytes through the peer's tunnel.", dirLabels, nil)
	descPackets    = prometheus.NewDesc("bnerd_vpn_peer_packets_total", "Packets through the peer's tunnel (IPsec only).", dirLabels, nil)
	descEstab      = prometheus.NewDesc("bnerd_vpn_peer_established_seconds", "Seconds since the peer's current tunnel came up (0 when down).", labels, nil)
	descRekeys     = prometheus.NewDesc("bnerd_vpn_peer_rekeys_total", "Rekeys of the peer's SAs since the agent started.", labels, nil)
	descRefused    = prometheus.NewDesc("bnerd_vpn_peer_child_sas_refused_total", "CHILD_SAs the peer negotiated beyond its limit (two per configured child), terminated (IPsec).", labels, nil)
	descHandshake  = prometheus.NewDesc("bnerd_vpn_peer_last_handshake_timestamp_seconds", "Unix time of the peer's last WireGuard handshake.", labels, nil)
	descDrops      = prometheus.NewDesc("bnerd_vpn_peer_authorization_drops_total", "Packets from (in) or toward (out) the peer's subnets dropped by authorization.", dirLabels, nil)
	descDropBytes  = prometheus.NewDesc("bnerd_vpn_peer_authorization_dropped_bytes_total", "Bytes from (in) or toward (out) the peer's subnets dropped by authorization.", dirLabels, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descAuthorized, descBytes, descPackets, descEstab, descRekeys, descRefused, descHandshake, descDrops, descDropBytes, descRepairs, descRejected, descSpoofed, descSpoofedBytes, descActive, descStandbyReady, descTakeovers} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.Repairs != nil {
		ch <- prometheus.MustNewConstMetric(descRepairs, prometheus.CounterValue, float64(c.Repairs()), c.Namespace, c.Gateway)
	}
	if c.Rejected != nil {
		ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(c.Rejected()), c.Namespace, c.Gateway)
	}
	if c.Availability != nil {
		a := c.Availability()
		ch <- prometheus.MustNewConstMetric(descActive, prometheus.GaugeValue, b2f(a.Active), c.Namespace, c.Gateway)
		ch <- prometheus.MustNewConstMetric(descStandbyReady, prometheus.GaugeValue, b2f(a.StandbyReady), c.Namespace, c.Gateway)
		for reason, n := range a.Takeovers {
			ch <- prometheus.MustNewConstMetric(descTakeovers, prometheus.CounterValue, float64(n), c.Namespace, c.Gateway, reason)
		}
	}
	snap := c.Snapshot()
	if s := snap.Spoofed; s != nil {
		ch <- prometheus.MustNewConstMetric(descSpoofed, prometheus.CounterValue, float64(s.Packets), c.Namespace, c.Gateway)
		ch <- prometheus.MustNewConstMetric(descSpoofedBytes, prometheus.CounterValue, float64(s.Bytes), c.Namespace, c.Gateway)
	}
	for name, p := range snap.Peers {
		l := []string{c.Namespace, c.Gateway, name}
		in, out := append(l[:3:3], "in"), append(l[:3:3], "out")
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, b2f(p.Connected()), l...)
		ch <- prometheus.MustNewConstMetric(descAuthorized, prometheus.GaugeValue, b2f(p.Authorized), l...)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(p.BytesIn), in...)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(p.BytesOut), out...)
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(p.PacketsIn), in...)
		ch <- prometheus.MustNewConstMetric(descPackets, prometheus.CounterValue, float64(p.PacketsOut), out...)
		estab := 0.0
		if p.Connected() && !p.EstablishedAt.IsZero() {
			estab = snap.Taken.Sub(p.EstablishedAt).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(descEstab, prometheus.GaugeValue, estab, l...)
		ch <- prometheus.MustNewConstMetric(descRekeys, prometheus.CounterValue, float64(p.Rekeys), l...)
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(p.ChildSAsRefused), l...)
		if !p.LastHandshake.IsZero() {
			ch <- prometheus.MustNewConstMetric(descHandshake, prometheus.GaugeValue, float64(p.LastHandshake.UnixNano())/float64(time.Second), l...)
		}
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(p.DropsIn.Packets), in...)
		ch <- prometheus.MustNewConstMetric(descDrops, prometheus.CounterValue, float64(p.DropsOut.Packets), out...)
		ch <- prometheus.MustNewConstMetric(descDropBytes, prometheus.CounterValue, float64(p.DropsIn.Bytes), in...)
		ch <- prometheus.MustNewConstMetric(descDropBytes, prometheus.CounterValue, float64(p.DropsOut.Bytes), out...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
