package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bnerd/bnerd-vpn-operator/internal/kube"
	"github.com/bnerd/bnerd-vpn-operator/internal/kubectlvpn/gateways"
	buildversion "github.com/bnerd/bnerd-vpn-operator/internal/version"
)

// options are the flags every subcommand shares: kubeconfig, context, namespace, ...
type options struct {
	flags   *genericclioptions.ConfigFlags
	streams genericiooptions.IOStreams
	// newClient, newAgentAccess and now are replaceable in tests.
	newClient      func() (client.Client, error)
	newAgentAccess func() (gateways.AgentAccess, error)
	now            func() time.Time
}

func newRootCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newRoot(streams, nil)
}

// newRoot is the command with its options adjusted by configure (tests: a fixed clock, a
// fake pod access).
func newRoot(streams genericiooptions.IOStreams, configure func(*options)) *cobra.Command {
	o := &options{flags: genericclioptions.NewConfigFlags(true), streams: streams}
	o.newClient, o.newAgentAccess, o.now = o.client, o.agentAccess, time.Now
	if configure != nil {
		configure(o)
	}
	cmd := &cobra.Command{
		Use:   "kubectl-vpn",
		Short: "Work with bnerd-vpn-operator's VPN gateways and peers",
		Long: `kubectl vpn: the client device's configuration for a VPNPeer (peer-config), a
parameter sheet turned into VPNGateway/VPNPeer/Secret manifests (import), the gateways and
their peers' tunnels at a glance (status), a verdict per peer with the next step
(diagnose), and a legacy IPsecGateway moved to a VPNGateway and its VPNPeers (migrate).`,
		Version:       cmp.Or(version, buildversion.Get()),
		SilenceUsage:  true,
		SilenceErrors: false,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl vpn"},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	o.flags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(newPeerConfigCommand(o), newImportCommand(o), newStatusCommand(o), newDiagnoseCommand(o), newMigrateCommand(o))
	return cmd
}

func (o *options) client() (client.Client, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: kube.Scheme()})
}

// namespace is -n, else the kubeconfig context's namespace, else "default".
func (o *options) namespace() (string, bool, error) {
	return o.flags.ToRawKubeConfigLoader().Namespace()
}

// explicitNamespace is -n when given.
func (o *options) explicitNamespace() string {
	if o.flags.Namespace != nil {
		return strings.TrimSpace(*o.flags.Namespace)
	}
	return ""
}

// agentAccess reaches the gateway pods' agents through the API server.
func (o *options) agentAccess() (gateways.AgentAccess, error) {
	cfg, err := o.flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return gateways.APIServerAccess(cs), nil
}

// kubectl is the kubectl command line with the --kubeconfig and --context this run was given.
func (o *options) kubectl() string {
	out := "kubectl"
	if f := o.flags; f != nil {
		if f.KubeConfig != nil && *f.KubeConfig != "" {
			out += " --kubeconfig " + *f.KubeConfig
		}
		if f.Context != nil && *f.Context != "" {
			out += " --context " + *f.Context
		}
	}
	return out
}

func warnf(o *options, format string, args ...any) {
	fmt.Fprintf(o.streams.ErrOut, "warning: "+format+"\n", args...)
}

// contextOf is the command's context, or a background one when it was run without.
func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}
