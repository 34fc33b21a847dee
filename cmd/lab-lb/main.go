// Command lab-lb is the lab's load balancer for Services of one load balancer class
// (internal/lab/lablb): it publishes the lab's address in their status and forwards its ports to
// a ready endpoint of each, on the machine that routes the client sites. Lab tooling: neither the
// operator nor the gateway agent links it.
package main

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/bnerd/bnerd-vpn-operator/internal/lab/lablb"
)

func main() {
	if err := command().Execute(); err != nil {
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var kubeconfig, class, address string
	cmd := &cobra.Command{
		Use:          "lab-lb",
		Short:        "Publish an address for LoadBalancer Services of a class and forward it to their ready endpoints (lab only)",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			addr, err := netip.ParseAddr(address)
			if err != nil || !addr.Is4() {
				return fmt.Errorf("--address %q: an IPv4 address is needed", address)
			}
			zl, err := zap.NewDevelopment()
			if err != nil {
				return err
			}
			log := zapr.NewLogger(zl)
			ctrl.SetLogger(log)
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return err
			}
			mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
			if err != nil {
				return err
			}
			c := &lablb.Controller{Client: mgr.GetClient(), Class: class, Address: addr, Log: log.WithName("lab-lb")}
			if err := c.SetupWithManager(mgr); err != nil {
				return err
			}
			return mgr.Start(ctrl.SetupSignalHandler())
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "the kubeconfig to use")
	cmd.Flags().StringVar(&class, "class", "lab.bnerd.net/static", "the Services' spec.loadBalancerClass")
	cmd.Flags().StringVar(&address, "address", "", "the load balancer's IPv4 address")
	_ = cmd.MarkFlagRequired("kubeconfig")
	_ = cmd.MarkFlagRequired("address")
	return cmd
}
