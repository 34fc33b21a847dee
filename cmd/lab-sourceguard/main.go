// Command lab-sourceguard is the lab's pod source guard (internal/lab/labnet): run by the container
// runtime as a CNI plugin (CNI_COMMAND set), chained right after the bridge plugin, it admits a
// new pod's veth with the pod's addresses and removes them when the sandbox goes; "install" and
// "uninstall" create and delete its nftables table when the lab starts and stops. Lab tooling,
// built on its own: neither the operator nor the gateway agent links it.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/spf13/cobra"

	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labnet"
)

// pluginConf is the plugin's entry in the runtime's conflist:
// {"type": "lab-sourceguard", "bridge": "<the bridge plugin's bridge>"} (the bridge tells the
// pod's host-side veth from the bridge in the bridge plugin's result).
type pluginConf struct {
	types.PluginConf
	Bridge string `json:"bridge"`
}

func main() {
	if os.Getenv("CNI_COMMAND") != "" {
		skel.PluginMainFuncs(skel.CNIFuncs{
			Add:   func(a *skel.CmdArgs) error { return cni(a, true) },
			Del:   func(a *skel.CmdArgs) error { return cni(a, false) },
			Check: func(*skel.CmdArgs) error { return nil },
		}, version.All, "lab-sourceguard: a pod sends only from its own addresses (the lab's pod network)")
		return
	}
	if err := command().Execute(); err != nil {
		os.Exit(1)
	}
}

func command() *cobra.Command {
	root := &cobra.Command{Use: "lab-sourceguard", Short: "The lab's pod source guard (a bridge-family nftables table)", SilenceUsage: true}
	root.AddCommand(&cobra.Command{
		Use: "install", Short: "Create the guard's table, guarding no port yet",
		RunE: func(cmd *cobra.Command, _ []string) error { return labnet.Guard{}.Install(cmd.Context()) },
	}, &cobra.Command{
		Use: "uninstall", Short: "Delete the guard's table",
		RunE: func(cmd *cobra.Command, _ []string) error { return labnet.Guard{}.Uninstall(cmd.Context()) },
	})
	return root
}

func cni(args *skel.CmdArgs, add bool) error {
	conf := &pluginConf{}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return fmt.Errorf("lab-sourceguard: parsing the CNI config: %w", err)
	}
	if conf.Bridge == "" {
		return fmt.Errorf("lab-sourceguard: the CNI config names no bridge")
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return fmt.Errorf("lab-sourceguard: the previous result: %w", err)
	}
	var res *current.Result
	if conf.PrevResult != nil {
		r, err := current.NewResultFromResult(conf.PrevResult)
		if err != nil {
			return fmt.Errorf("lab-sourceguard: the previous result: %w", err)
		}
		res = r
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := labnet.Guard{}
	if !add {
		// DEL is best effort and idempotent: without a cached result there is no port to
		// forget, and a stale element is replaced when its port name or address is reused.
		if port, _, err := labnet.PodSources(res, conf.Bridge); err == nil {
			if err := g.Revoke(ctx, port); err != nil {
				return fmt.Errorf("lab-sourceguard: %w", err)
			}
		}
		return nil
	}
	port, addrs, err := labnet.PodSources(res, conf.Bridge)
	if err != nil {
		return fmt.Errorf("lab-sourceguard: %w", err)
	}
	if err := g.Admit(ctx, port, addrs); err != nil {
		return fmt.Errorf("lab-sourceguard: %w", err)
	}
	return types.PrintResult(conf.PrevResult, conf.CNIVersion)
}
