// Command lab-cloud is the lab's OpenStack: it serves the in-repo Neutron/Keystone
// (internal/testing/neutronfake) over HTTP and plays the cloud's L3 agent, programming
// a "cloud router" network namespace from Neutron's state (internal/lab/labcloud). It is lab
// tooling, built on its own: neither the operator nor the gateway agent links it.
//
// It creates a provider network (ports' fixed IPs; its gateway address goes on the router's
// provider link) and an external network (floating IPs), writes a clouds.yaml with a fresh
// password for the operator (mode 0600, never printed), prints the networks' IDs as one JSON
// line on stdout, and serves an admin API (faults, quotas, VMs' ports, state) on its own
// address. The provider link is a bridge, the provider network's switch: lab-cloud is its L2
// agent too (labcloud.Switch: trunks' subports as VLAN links on their parents' taps, port
// security on every port plugged in).
//
// It stands in for Multus too (which cannot be had here): run by a container runtime as a CNI
// plugin (CNI_COMMAND set), chained after the cluster network in the runtime's conflist, it
// dispatches the NetworkAttachmentDefinitions a pod's k8s.v1.cni.cncf.io/networks annotation
// names with the real CNI plugins (labcloud.Attacher.Dispatch); cni-add and cni-del do one
// config by hand, install-nad-crd installs the NetworkAttachmentDefinition CRD.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/secretfile"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/neutronfake"
)

// Networks is the JSON line printed on stdout once the cloud serves.
type Networks struct {
	AuthURL           string `json:"auth_url"`
	Admin             string `json:"admin"`
	ProviderNetworkID string `json:"provider_network_id"`
	ProviderSubnetID  string `json:"provider_subnet_id"`
	ProviderGateway   string `json:"provider_gateway"`
	FloatingNetworkID string `json:"floating_network_id"`
	FloatingNetwork   string `json:"floating_network"`
}

func main() {
	if os.Getenv("CNI_COMMAND") != "" { // invoked by a container runtime as a CNI plugin
		cniPlugin()
		return
	}
	if err := command().Execute(); err != nil {
		os.Exit(1)
	}
}

func command() *cobra.Command {
	var (
		listen, url, adminListen, cloudsYAML, cloudName string
		routerNetns, clientLink, providerLink           string
		providerCIDR, fipCIDR, fipNetwork               string
	)
	cmd := &cobra.Command{
		Use:          "lab-cloud",
		Short:        "Serve the in-repo Neutron/Keystone and program a cloud router namespace from it (lab only)",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			zl, err := zap.NewDevelopment()
			if err != nil {
				return err
			}
			log := zapr.NewLogger(zl)
			provider, err := netip.ParsePrefix(providerCIDR)
			if err != nil {
				return fmt.Errorf("--provider-cidr: %w", err)
			}
			if _, err := netip.ParsePrefix(fipCIDR); err != nil {
				return fmt.Errorf("--floating-cidr: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()

			l, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			c := neutronfake.Serve(l, url)
			defer c.Close()
			pw := make([]byte, 24)
			if _, err := rand.Read(pw); err != nil {
				return err
			}
			password := hex.EncodeToString(pw)
			c.AddUser("vpn-operator", password)
			out := Networks{AuthURL: c.AuthURL(), FloatingNetwork: fipNetwork}
			out.FloatingNetworkID, _ = c.AddNetwork(fipNetwork, true, fipCIDR)
			out.ProviderNetworkID, out.ProviderSubnetID = c.AddNetwork("provider", false, provider.String())
			gw := netip.PrefixFrom(provider.Masked().Addr().Next(), provider.Bits())
			out.ProviderGateway = gw.Addr().String()
			if cloudsYAML != "" {
				doc := fmt.Sprintf("clouds:\n  %s:\n    auth:\n      auth_url: %s\n      username: vpn-operator\n      password: '%s'\n      project_name: vpn\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: public\n",
					cloudName, c.AuthURL(), password)
				if err := secretfile.Write(cloudsYAML, []byte(doc)); err != nil {
					return err
				}
			}

			al, err := net.Listen("tcp", adminListen)
			if err != nil {
				return err
			}
			out.Admin = "http://" + al.Addr().String()
			admin := &http.Server{Handler: labcloud.Admin(c, out.ProviderNetworkID), ReadHeaderTimeout: 10 * time.Second}
			go func() {
				if err := admin.Serve(al); err != nil && !errors.Is(err, http.ErrServerClosed) {
					log.Error(err, "admin API")
				}
			}()
			defer admin.Close()

			if routerNetns != "" {
				r := &labcloud.Router{Netns: routerNetns, Links: labcloud.Links{Client: clientLink, Provider: providerLink}, Log: log}
				if err := r.Setup(gw); err != nil {
					return err
				}
				defer func() {
					if err := r.Teardown(); err != nil {
						log.Error(err, "removing the router's table")
					}
				}()
				go r.Run(ctx, c, 2*time.Second)
				sw := &labcloud.Switch{Netns: routerNetns, Bridge: providerLink, Log: log}
				if err := sw.Setup(); err != nil {
					return err
				}
				defer func() {
					if err := sw.Teardown(); err != nil {
						log.Error(err, "removing the port security table")
					}
				}()
				go sw.Run(ctx, c, 2*time.Second)
			}
			if err := json.NewEncoder(cmd.OutOrStdout()).Encode(out); err != nil {
				return err
			}
			<-ctx.Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:9696", "address the Keystone/Neutron API listens on")
	f.StringVar(&url, "url", "", "URL clients reach the API at (the service catalog's endpoint); http://<listen> when empty")
	f.StringVar(&adminListen, "admin-listen", "127.0.0.1:9697", "address of the admin API (POST/DELETE /faults, POST /quota, POST /vm-ports, GET /state)")
	f.StringVar(&cloudsYAML, "clouds-yaml", "", "write the operator's clouds.yaml here (mode 0600)")
	f.StringVar(&cloudName, "cloud", "lab", "name of the cloud in the clouds.yaml")
	f.StringVar(&routerNetns, "router-netns", "", "network namespace to program as the cloud router (empty: API only)")
	f.StringVar(&clientLink, "client-link", "client", "the router's link toward the client sites")
	f.StringVar(&providerLink, "provider-link", "provider", "the router's link on the provider network, a bridge the ports' taps are plugged into (gets the subnet's gateway address)")
	f.StringVar(&providerCIDR, "provider-cidr", "198.51.100.0/24", "the provider network's subnet (ports' fixed IPs; its first address is the router's)")
	f.StringVar(&fipCIDR, "floating-cidr", "203.0.113.0/24", "the external network's subnet (floating IPs)")
	f.StringVar(&fipNetwork, "floating-network", "public", "name of the external network (a gateway's floatingIPPool)")
	cmd.AddCommand(cniCommand("add"), cniCommand("del"), installNADCRDCommand(), leaksCommand())
	return cmd
}

// leaksCommand prints the leak table of a running lab cloud (labcloud.Leaks) and fails when
// anything of the operator's is left but the pinned addresses, detached.
func leaksCommand() *cobra.Command {
	var (
		admin  string
		pinned []string
	)
	cmd := &cobra.Command{
		Use:          "leaks",
		Short:        "Print what the operator left in the lab cloud (ports, security groups, floating IPs); fail on leaks",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: 10 * time.Second}
			resp, err := client.Get(strings.TrimSuffix(admin, "/") + "/state")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var st labcloud.State
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				return fmt.Errorf("GET /state: %w", err)
			}
			leaks := labcloud.Leaks(st, pinned...)
			fmt.Fprint(cmd.OutOrStdout(), labcloud.LeakTable(leaks))
			if n := labcloud.Leaked(leaks); n > 0 {
				return fmt.Errorf("%d leaked", n)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&admin, "admin", "http://127.0.0.1:9697", "the lab cloud's admin API")
	cmd.Flags().StringSliceVar(&pinned, "pinned", nil, "pinned floating IP addresses, which must be kept (detached)")
	return cmd
}

// installNADCRDCommand installs the NetworkAttachmentDefinition CRD (labcloud.NADCRD).
func installNADCRDCommand() *cobra.Command {
	var kubeconfig string
	cmd := &cobra.Command{
		Use:          "install-nad-crd",
		Short:        "Install the NetworkAttachmentDefinition CRD (what Multus ships) and wait until it is served",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return err
			}
			return labcloud.InstallNADCRD(cmd.Context(), cfg)
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the cluster's kubeconfig")
	return cmd
}

// cniCommand is "lab-cloud cni-add|cni-del": Multus' dispatch of one NetworkAttachmentDefinition
// config into a pod's namespace as net1 (internal/lab/labcloud.Attacher).
func cniCommand(verb string) *cobra.Command {
	var (
		a                labcloud.Attacher
		pod              labcloud.Pod
		config, confFile string
	)
	cmd := &cobra.Command{
		Use:          "cni-" + verb,
		Short:        "CNI " + strings.ToUpper(verb) + " of a NetworkAttachmentDefinition's config (spec.config, unchanged) into a pod's network namespace as net1, as Multus does",
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if confFile != "" {
				b, err := os.ReadFile(confFile)
				if err != nil {
					return err
				}
				config = string(b)
			}
			if config == "" || pod.NetNS == "" || pod.ContainerID == "" {
				return errors.New("--config or --config-file, --netns and --container-id are required")
			}
			if verb == "del" {
				return a.Del(cmd.Context(), config, pod)
			}
			res, err := a.Add(cmd.Context(), config, pod)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	f := cmd.Flags()
	f.StringVar(&config, "config", "", "the CNI config (a NAD's spec.config)")
	f.StringVar(&confFile, "config-file", "", "read the CNI config from this file")
	f.StringVar(&pod.NetNS, "netns", "", "path of the pod's network namespace (CNI_NETNS)")
	f.StringVar(&pod.ContainerID, "container-id", "", "the pod sandbox's ID (CNI_CONTAINERID)")
	f.StringVar(&pod.Namespace, "pod-namespace", "", "K8S_POD_NAMESPACE")
	f.StringVar(&pod.Name, "pod-name", "", "K8S_POD_NAME")
	f.StringVar(&pod.UID, "pod-uid", "", "K8S_POD_UID")
	f.StringSliceVar(&a.PluginDirs, "cni-path", labcloud.DefaultPluginDirs, "CNI_PATH")
	f.StringVar(&a.CacheDir, "cache-dir", "", "libcni's result cache (default /var/lib/cni)")
	f.StringVar(&a.NodeNetns, "node-netns", "", "run the plugins in this network namespace (the node's), not the caller's")
	return cmd
}
