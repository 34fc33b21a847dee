// Command kube is kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
// and kubectl in one binary (saves ~300 MB of disk and ~200 MiB of memory against six, and a
// fresh machine's Debian has no kubectl package): it runs the
// component named by its program name (argv[0], e.g. a symlink "kubelet" -> "kube"), or by its
// first argument ("kube kubelet --flags...").
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	_ "time/tzdata" // CronJob time zones

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"

	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	known := func(n string) bool { _, ok := commands[n]; return ok || n == "kubectl" }
	if !known(name) && len(os.Args) > 1 {
		if known(os.Args[1]) {
			name = os.Args[1]
			os.Args = os.Args[1:]
		}
	}
	if name == "kubectl" {
		// as k8s.io/kubernetes/cmd/kubectl does it
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCmd, ok := commands[name]
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: kube {kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl} [flags] (or call it by one of those names)")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCmd()))
}
