// Command gateway-agent runs inside each gateway pod. `init` installs the rendered nftables
// ruleset before any tunnel exists (fail closed); `run` converges strongSwan or WireGuard and
// the ruleset to the gateway's rendered configuration, reports each peer's tunnel to its
// VPNPeer status, and serves /metrics, /healthz and /readyz.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kubeconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/availability"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/firewall"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/metrics"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/source"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/status"
	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/nft"
	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

func main() {
	if err := command().Execute(); err != nil {
		os.Exit(1)
	}
}

func command() *cobra.Command {
	zapOpts := zap.Options{}
	root := &cobra.Command{
		Use:           "gateway-agent",
		Short:         "Apply a VPN gateway's rendered dataplane and report its tunnels",
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: false,
		PersistentPreRun: func(*cobra.Command, []string) {
			ctrllog.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
		},
	}
	logFlags := flag.NewFlagSet("log", flag.ContinueOnError)
	zapOpts.BindFlags(logFlags)
	root.PersistentFlags().AddGoFlagSet(logFlags)
	root.AddCommand(initCommand(), runCommand(), renderCommand(), wireguardDeviceCommand())
	return root
}

func initCommand() *cobra.Command {
	var configDir, gateway, namespace, kind string
	var opts render.Options
	var where placementFlags
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Render the nftables ruleset from the gateway's verified model, install it with the startup gate and enable forwarding, then exit (fail closed)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			kind, err := gatewayKind(kind)
			if err != nil {
				return err
			}
			if opts.Placement, err = where.placement(cmd.Flags(), namespace, gateway, kind); err != nil {
				return err
			}
			b, err := readBundle(configDir, opts)
			if err != nil {
				return err
			}
			// One transaction: the ruleset and the startup gate that keeps IKE out until the
			// agent has loaded the peers (it opens the gate then).
			if err := (&firewall.Firewall{}).Apply(cmd.Context(), b.Ruleset+nft.StartupGate(b.Model)); err != nil {
				return err
			}
			return enableForwarding()
		},
	}
	cmd.Flags().StringVar(&configDir, "config-dir", "/etc/vpn-gateway", "directory holding the gateway's ConfigMap data")
	cmd.Flags().BoolVar(&opts.UserspaceDataplane, "userspace-dataplane", false, "the gateway runs userspace ESP (kernel-libipsec) instead of kernel ESP")
	cmd.Flags().StringVar(&gateway, "gateway", "", "the gateway's name (with --host-network: the model must be this gateway's)")
	cmd.Flags().StringVar(&namespace, "namespace", "", "the gateway's namespace")
	cmd.Flags().StringVar(&kind, "gateway-kind", "", "the gateway's kind when it is not a VPNGateway: IPsecGateway")
	where.bind(cmd.Flags())
	return cmd
}

// gatewayKind is the model's Kind for a --gateway-kind flag: "" for a VPNGateway.
func gatewayKind(flag string) (string, error) {
	switch flag {
	case "", "VPNGateway":
		return "", nil
	case model.KindIPsecGateway:
		return flag, nil
	default:
		return "", fmt.Errorf("--gateway-kind %q: must be VPNGateway or %s", flag, model.KindIPsecGateway)
	}
}

func renderCommand() *cobra.Command {
	var configDir string
	var opts render.Options
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print the dataplane the agent renders from the gateway's model (strongSwan or WireGuard configuration and the nftables ruleset)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := readBundle(configDir, opts)
			if err != nil {
				return err
			}
			text, err := b.Text()
			if err != nil {
				return err
			}
			for _, k := range []string{render.KeySwanctlConf, render.KeyWireGuardConf, render.KeyRuleset} {
				if t, ok := text[k]; ok {
					fmt.Fprintf(cmd.OutOrStdout(), "### %s\n%s\n", k, t)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configDir, "config-dir", "/etc/vpn-gateway", "directory holding the gateway's ConfigMap data")
	cmd.Flags().BoolVar(&opts.UserspaceDataplane, "userspace-dataplane", false, "the gateway runs userspace ESP (kernel-libipsec) instead of kernel ESP")
	return cmd
}

// readBundle reads the mounted ConfigMap: the verified model, rendered by the agent itself.
func readBundle(configDir string, opts render.Options) (*render.Bundle, error) {
	data := map[string]string{}
	entries, err := os.ReadDir(configDir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), "..") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(configDir, e.Name()))
		if err != nil {
			return nil, err
		}
		data[e.Name()] = string(raw)
	}
	return render.FromConfigMapData(data, opts)
}

// enableForwarding turns IPv4 forwarding on, or checks that the pod's sysctls already did
// (/proc/sys is read-only in an unprivileged container).
func enableForwarding() error {
	const path = "/proc/sys/net/ipv4/ip_forward"
	if cur, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(cur)) == "1" {
		return nil
	}
	if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("IPv4 forwarding is off and cannot be enabled (set the pod sysctl net.ipv4.ip_forward=1): %w", err)
	}
	return nil
}

type runOptions struct {
	gateway, namespace, configMap string
	// kind of the gateway's custom resource: "" (VPNGateway) or IPsecGateway.
	kind                  string
	configDir, secretsDir string
	metricsAddr           string
	statusInterval        time.Duration
	verifyInterval        time.Duration
	teardownWait          time.Duration
	render                render.Options
	drivers               driverOptions
	where                 placementFlags
	standby               standbyFlags
	// flags are the command's, to tell which were given.
	flags *pflag.FlagSet
}

// wireguardDeviceCommand runs the gateway pod's wireguard container: the userspace device in
// a process of its own, so that the agent — which configures it over its UAPI socket — can
// restart without cutting a tunnel (as charon's own container does for IPsec).
func wireguardDeviceCommand() *cobra.Command {
	var iface string
	cmd := &cobra.Command{
		Use:   "wireguard-device",
		Short: "Run the gateway's userspace WireGuard device (a TUN, wireguard-go and its UAPI socket) until stopped; the agent (--wireguard-mode=external) configures it",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			return wireguard.RunDevice(ctx, iface, ctrllog.Log.WithName("wireguard-device"))
		},
	}
	cmd.Flags().StringVar(&iface, "interface", nft.WireGuardInterface, "the device's name (the gateway's WireGuard device name: wg0 in a pod, per gateway on the host network)")
	return cmd
}

func runCommand() *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Converge the dataplane to the gateway's configuration and report tunnel state",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer cancel()
			log := ctrllog.Log.WithName("agent")
			log.Info("gateway agent starting", "version", version.Get(), "goversion", runtime.Version())
			return run(ctx, o, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.gateway, "gateway", "", "the VPNGateway's name")
	f.StringVar(&o.kind, "gateway-kind", "", "the gateway's kind when it is not a VPNGateway: IPsecGateway (legacy; its tunnels are reported to its status, not to VPNPeers)")
	f.StringVar(&o.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the gateway's namespace")
	f.StringVar(&o.configMap, "config-map", "", "the gateway's ConfigMap (default <gateway>-gateway-config)")
	f.StringVar(&o.configDir, "config-dir", "", "read the configuration from this directory instead of the API (lab, tests)")
	f.StringVar(&o.secretsDir, "secrets-dir", "", "with --config-dir: read Secrets from <dir>/<secret>/<key>")
	f.StringVar(&o.metricsAddr, "metrics-addr", ":9090", "address of /metrics, /healthz and /readyz (empty disables)")
	f.DurationVar(&o.statusInterval, "status-interval", 15*time.Second, "shortest time between two VPNPeer status writes that only update counters (state changes are written at once)")
	f.DurationVar(&o.verifyInterval, "ruleset-check-interval", time.Second, "how often the nftables ruleset is checked against the one applied and re-applied when it was deleted or changed")
	f.DurationVar(&o.teardownWait, "teardown-wait", model.TeardownWait, "how long a stopping host-network agent waits for its tunnels to go before it takes the gateway's ruleset and address off the node (still up: the agent alone is restarting, and all stays); inside the pod's termination grace period")
	f.BoolVar(&o.render.UserspaceDataplane, "userspace-dataplane", false, "the gateway runs userspace ESP (kernel-libipsec) instead of kernel ESP")
	o.drivers.bindFlags(f)
	o.where.bind(f)
	o.standby.bind(f)
	o.flags = f
	return cmd
}

func run(ctx context.Context, o runOptions, log logr.Logger) error {
	if o.configDir == "" && (o.gateway == "" || o.namespace == "") {
		return errors.New("--gateway and --namespace are required (or --config-dir)")
	}
	var err error
	if o.kind, err = gatewayKind(o.kind); err != nil {
		return err
	}
	if o.render.Placement, err = o.where.placement(o.flags, o.namespace, o.gateway, o.kind); err != nil {
		return err
	}
	if o.configMap == "" {
		o.configMap = children.ConfigMapNameFor(o.kind, o.gateway)
	}
	updates := make(chan agent.Update)
	var reporter agent.Reporter
	var lastSeen wireguard.LastSeen
	var feed func(context.Context) error
	var rejected atomic.Uint64
	var events *status.Events
	var cs kubernetes.Interface
	reject := func(err error) {
		rejected.Add(1)
		if events != nil {
			events.GatewayEvent(o.namespace, o.gateway, corev1.EventTypeWarning, "ConfigRejected",
				"the gateway's configuration was refused and the last good one stays applied: "+truncate(err.Error(), 900))
		}
	}
	if o.configDir != "" {
		files := &source.Files{ConfigDir: o.configDir, SecretsDir: o.secretsDir, Log: log.WithName("files"), Render: o.render, Rejected: reject}
		feed = func(ctx context.Context) error { return files.Run(ctx, updates) }
	}
	if o.gateway != "" && o.namespace != "" {
		cfg, err := kubeconfig.GetConfig()
		if err != nil && o.configDir == "" {
			return err
		}
		if err == nil {
			c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
			if err != nil {
				return err
			}
			writer := &status.Writer{Client: c, Namespace: o.namespace, MinInterval: o.statusInterval}
			reporter, lastSeen = writer, writer.LastSeen
			clientset, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			cs = clientset
			events = status.NewEvents(cs)
			events.Kind = o.kind
			defer events.Stop()
			if o.configDir == "" {
				api := &source.API{Client: cs, Namespace: o.namespace, ConfigMap: o.configMap, Log: log.WithName("api"), Render: o.render, Rejected: reject}
				feed = func(ctx context.Context) error { return api.Run(ctx, updates) }
			}
		}
	}

	driver := &lazyDriver{opts: o.drivers, log: log, lastSeen: lastSeen}
	// The agent and nft share the network namespace: the kernel's nftables generation tells
	// the ruleset check when there is anything to list.
	fw := &firewall.Firewall{Generation: firewall.KernelGeneration, Log: log.WithName("firewall")}
	defer fw.Close() // the deltas' netfilter socket; the table stays or goes with the engine's teardown
	engine := &agent.Engine{Driver: driver, Firewall: fw, Reporter: reporter, Log: log, VerifyEvery: o.verifyInterval}
	if events != nil {
		engine.Events = events
	}
	elector, err := o.standby.elector(o, cs, events, engine, driver, log)
	if err != nil {
		return err
	}

	if o.metricsAddr != "" {
		srv := metricsServer(o, engine, rejected.Load, elector)
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "metrics server")
			}
		}()
		defer srv.Shutdown(context.Background()) //nolint:errcheck
	}
	// The pair's first role (fenced unless the Lease names this pod) before anything is
	// configured: a standby's charon or device never reaches a site.
	electorDone := make(chan struct{})
	electorCtx, stopElector := context.WithCancel(ctx)
	defer stopElector()
	if elector != nil {
		if err := elector.Start(ctx); err != nil {
			return err
		}
		go func() {
			defer close(electorDone)
			_ = elector.Run(electorCtx)
		}()
	} else {
		close(electorDone)
	}
	errs := make(chan error, 2)
	go func() { errs <- feed(ctx) }()
	go func() { errs <- engine.Run(ctx, updates) }()
	err = <-errs
	stopElector()
	<-electorDone
	if elector != nil && ctx.Err() != nil {
		// Stopped by a signal: an active pod with a ready standby hands over and is fenced
		// (the driver still open), while /availability still answers.
		hctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		elector.Shutdown(hctx)
		cancel()
	}
	closeErr := driver.Close()
	if ctx.Err() != nil {
		// Stopped by a signal: the pod is going (or the agent alone restarting). A host-network
		// gateway takes its ruleset and addresses off the node once its tunnels are gone.
		tctx, cancel := context.WithTimeout(context.Background(), o.teardownWait+time.Second)
		defer cancel()
		if terr := engine.TearDown(tctx, o.teardownWait); terr != nil {
			log.Error(terr, "removing the gateway's ruleset and addresses from the node")
		}
	}
	return errors.Join(err, closeErr)
}

func metricsServer(o runOptions, e *agent.Engine, rejected func() uint64, elector *availability.Elector) *http.Server {
	c := &metrics.Collector{Namespace: o.namespace, Gateway: o.gateway, Snapshot: e.Last, Repairs: e.Repairs, Rejected: rejected}
	mux := http.NewServeMux()
	if elector != nil {
		c.Availability = availabilityMetrics(elector)
		mux.Handle("/availability", elector)
	}
	reg := metrics.NewRegistry(c)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.Ready() {
			http.Error(w, "no configuration applied yet", http.StatusServiceUnavailable)
			return
		}
		if elector != nil && !elector.Joined() {
			http.Error(w, "standby: the active pod has not answered this pod's probes as its standby's yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return &http.Server{Addr: o.metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
