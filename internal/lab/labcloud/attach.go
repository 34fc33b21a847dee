package labcloud

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
)

// DefaultPluginDirs are where Debian's containernetworking-plugins and the usual installs put
// the CNI plugins.
var DefaultPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

// Attacher stands in for Multus' dispatch (Multus itself cannot be had here): it executes a
// NetworkAttachmentDefinition's CNI config, unchanged, with the real CNI plugins against a
// pod's network namespace as net1 — CNI_COMMAND=ADD/DEL, CNI_IFNAME=net1, CNI_NETNS,
// CNI_CONTAINERID, CNI_PATH and the K8S_POD_* CNI_ARGS, through libcni, as Multus does.
type Attacher struct {
	// PluginDirs is CNI_PATH; DefaultPluginDirs when empty.
	PluginDirs []string
	// CacheDir keeps libcni's results (DEL reads them); libcni's /var/lib/cni when empty.
	CacheDir string
	// NodeNetns, when set, is the namespace the plugins run in (the node's: a macvlan's
	// master or a host-device's NIC is looked up there); the caller's when empty.
	NodeNetns string
}

// Pod names the pod being attached.
type Pod struct {
	Namespace, Name, UID string
	// ContainerID is the sandbox's ID; NetNS the path of its network namespace
	// (/run/netns/NAME for an ip-netns namespace).
	ContainerID, NetNS string
	// IfName is the interface's name in the pod; net1 when empty.
	IfName string
}

func (a *Attacher) dirs() []string {
	if len(a.PluginDirs) == 0 {
		return DefaultPluginDirs
	}
	return a.PluginDirs
}

func (a *Attacher) cni() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(a.dirs(), a.CacheDir, &nodeExec{netns: a.NodeNetns})
}

// Find is the path of a plugin in PluginDirs.
func (a *Attacher) Find(plugin string) (string, error) {
	return invoke.FindInPath(plugin, a.dirs())
}

func runtimeConf(p Pod) *libcni.RuntimeConf {
	ifName := p.IfName
	if ifName == "" {
		ifName = cloud.NetworkAttachmentInterface
	}
	return &libcni.RuntimeConf{
		ContainerID: p.ContainerID, NetNS: p.NetNS, IfName: ifName,
		Args: [][2]string{
			{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", p.Namespace}, {"K8S_POD_NAME", p.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.ContainerID}, {"K8S_POD_UID", p.UID},
		},
	}
}

// confList reads a NAD's spec.config: a plugin list, or (as the operator renders it) one
// plugin, which Multus runs as a list of one.
func confList(config string) (*libcni.NetworkConfigList, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(config), &probe); err != nil {
		return nil, fmt.Errorf("the NAD config is not JSON: %w", err)
	}
	if _, ok := probe["plugins"]; ok {
		return libcni.ConfListFromBytes([]byte(config))
	}
	c, err := libcni.NetworkPluginConfFromBytes([]byte(config))
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromConf(c)
}

// Add attaches the pod (CNI ADD) and returns the plugins' result.
func (a *Attacher) Add(ctx context.Context, config string, p Pod) (types.Result, error) {
	l, err := confList(config)
	if err != nil {
		return nil, err
	}
	res, err := a.cni().AddNetworkList(ctx, l, runtimeConf(p))
	if err != nil {
		return nil, fmt.Errorf("CNI ADD %s into %s: %w", l.Name, p.NetNS, err)
	}
	return res, nil
}

// Del detaches the pod (CNI DEL); deleting what is not there succeeds, as CNI requires.
func (a *Attacher) Del(ctx context.Context, config string, p Pod) error {
	l, err := confList(config)
	if err != nil {
		return err
	}
	if err := a.cni().DelNetworkList(ctx, l, runtimeConf(p)); err != nil {
		return fmt.Errorf("CNI DEL %s from %s: %w", l.Name, p.NetNS, err)
	}
	return nil
}

// nodeExec runs the plugins as invoke.RawExec does, inside netns when it is set.
type nodeExec struct {
	netns string
	raw   invoke.RawExec
	version.PluginDecoder
}

func (e *nodeExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	if e.netns == "" {
		return e.raw.ExecPlugin(ctx, path, stdin, environ)
	}
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", e.netns, path)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var perr types.Error
		if json.Unmarshal(stdout.Bytes(), &perr) == nil && perr.Msg != "" {
			return nil, &perr
		}
		return nil, fmt.Errorf("%s in %s: %v: %s", path, e.netns, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

func (e *nodeExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}
