package labcloud_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/lab/labcloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testenv"
)

// lab-cloud as a CNI plugin chained in a runtime's conflist (after the cluster network, here
// loopback), against a real API server: the pod's networks annotation names the NAD the
// operator's provider rendered, and the sandbox's ADD — run by libcni as a container runtime
// runs it — gives the pod net1 with the port's MAC and fixed IP and passes the previous
// plugin's result on; DEL takes net1 away; a pod that names a missing NAD fails its ADD.
func TestLabCloudAsChainedCNIPlugin(t *testing.T) {
	c := newLabCloud(t)
	tp := newTopology(t, c)
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	if err := labcloud.InstallNADCRD(ctx, env.Config); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, "lab-cloud"), "./cmd/lab-cloud") // as make test builds: cached
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building lab-cloud: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData, Token: env.Config.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	p := c.provider(t, onVeth)
	req := gatewayRequest()
	att := ensureReady(t, p, req).Pod.NetworkAttachment
	t.Cleanup(func() { _ = p.Delete(ctx, req) })
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: req.Namespace}}); err != nil {
		t.Fatal(err)
	}
	nad := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"config": att.Config}}}
	nad.SetAPIVersion("k8s.cni.cncf.io/v1")
	nad.SetKind("NetworkAttachmentDefinition")
	nad.SetNamespace(att.Namespace)
	nad.SetName(att.Name)
	if err := env.Client.Create(ctx, nad); err != nil {
		t.Fatal(err)
	}
	newPod := func(name, annotation string) {
		t.Helper()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: name, Annotations: map[string]string{cloud.NetworksAnnotation: annotation}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gateway", Image: "bnerd-vpn-gateway:lab"}}}}
		if err := env.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	newPod("edge-0", att.PodAnnotation())
	newPod("stray-0", `[{"name":"missing-uplink","interface":"net1"}]`)

	conflist, _ := json.Marshal(map[string]any{"cniVersion": "0.4.0", "name": "lab-pods", "plugins": []map[string]any{
		{"type": "loopback"},
		{"type": "lab-cloud", "kubeconfig": kubeconfig, "cacheDir": filepath.Join(dir, "delegated"), "nodeNetns": tp.port.Name},
	}})
	runtime := &labcloud.Attacher{PluginDirs: append([]string{bin}, labcloud.DefaultPluginDirs...), CacheDir: filepath.Join(dir, "runtime")}
	pod := tp.run.NS("pod")
	sandbox := labcloud.Pod{Namespace: req.Namespace, Name: "edge-0", ContainerID: "sandbox-edge-0", NetNS: "/run/netns/" + pod.Name, IfName: "eth0"}
	res, err := runtime.Add(ctx, string(conflist), sandbox)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(res)
	t.Logf("the sandbox's CNI result: %s", out)
	if !strings.Contains(string(out), `"name":"lo"`) {
		t.Errorf("the previous plugin's result was not passed on: %s", out)
	}
	net1, ok := links(t, pod)["net1"]
	if !ok || !strings.EqualFold(net1.Address, att.MAC) || !hasAddr(net1, att.FixedIP+"/24") {
		t.Fatalf("net1 %+v (present %v), want the port's %s %s/24", net1, ok, att.MAC, att.FixedIP)
	}
	t.Logf("net1: %s %s/24", net1.Address, att.FixedIP)
	if err := runtime.Del(ctx, string(conflist), sandbox); err != nil {
		t.Fatal(err)
	}
	if _, ok := links(t, pod)["net1"]; ok {
		t.Fatal("net1 is still there after the sandbox's DEL")
	}

	stray := tp.run.NS("stray")
	_, err = runtime.Add(ctx, string(conflist), labcloud.Pod{Namespace: req.Namespace, Name: "stray-0", ContainerID: "sandbox-stray-0", NetNS: "/run/netns/" + stray.Name, IfName: "eth0"})
	if err == nil || !strings.Contains(err.Error(), "missing-uplink") {
		t.Fatalf("a pod naming a missing NAD: ADD %v, want it to fail naming the NAD", err)
	}
	t.Logf("a pod naming a missing NAD: %v", err)
}
