package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
)

// pluginConf is lab-cloud's configuration as a CNI plugin, chained after the cluster network
// in the runtime's conflist: {"type": "lab-cloud", "kubeconfig": "...", "cacheDir": "..."}.
type pluginConf struct {
	types.PluginConf
	// Kubeconfig reaches the API server (the pod's annotation and its NADs).
	Kubeconfig string `json:"kubeconfig"`
	// CacheDir keeps the delegated plugins' results (libcni's /var/lib/cni when empty).
	CacheDir string `json:"cacheDir,omitempty"`
	// NodeNetns, when set, runs the delegated plugins in that namespace (labcloud.Attacher).
	NodeNetns string `json:"nodeNetns,omitempty"`
}

// cniPlugin runs lab-cloud as a CNI plugin (the runtime set CNI_COMMAND): Multus' part of a
// pod sandbox's network setup, for the lab, where Multus cannot be had. See labcloud.Dispatch.
func cniPlugin() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:   func(a *skel.CmdArgs) error { return cniDispatch(a, true) },
		Del:   func(a *skel.CmdArgs) error { return cniDispatch(a, false) },
		Check: func(*skel.CmdArgs) error { return nil },
	}, version.All, "lab-cloud: the lab's stand-in for Multus' dispatch of NetworkAttachmentDefinitions")
}

func cniDispatch(args *skel.CmdArgs, add bool) error {
	conf := &pluginConf{}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return fmt.Errorf("lab-cloud: parsing the CNI config: %w", err)
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return fmt.Errorf("lab-cloud: the previous result: %w", err)
	}
	kv := map[string]string{}
	for _, pair := range strings.Split(args.Args, ";") {
		if k, v, ok := strings.Cut(pair, "="); ok {
			kv[k] = v
		}
	}
	pod := labcloud.Pod{Namespace: kv["K8S_POD_NAMESPACE"], Name: kv["K8S_POD_NAME"], UID: kv["K8S_POD_UID"],
		ContainerID: args.ContainerID, NetNS: args.Netns}
	if pod.Namespace != "" && pod.Name != "" {
		restCfg, err := clientcmd.BuildConfigFromFlags("", conf.Kubeconfig)
		if err != nil {
			return fmt.Errorf("lab-cloud: kubeconfig %s: %w", conf.Kubeconfig, err)
		}
		restCfg.Timeout = 20 * time.Second
		c, err := client.New(restCfg, client.Options{})
		if err != nil {
			return fmt.Errorf("lab-cloud: %w", err)
		}
		a := &labcloud.Attacher{PluginDirs: filepath.SplitList(args.Path), CacheDir: conf.CacheDir, NodeNetns: conf.NodeNetns}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.Dispatch(ctx, c, add, pod); err != nil {
			return fmt.Errorf("lab-cloud: %w", err)
		}
	}
	if !add {
		return nil
	}
	res := conf.PrevResult
	if res == nil {
		res = &current.Result{CNIVersion: conf.CNIVersion}
	}
	return types.PrintResult(res, conf.CNIVersion)
}
