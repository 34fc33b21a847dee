package wireguard_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent/wireguard"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
	"github.com/bnerd/bnerd-vpn-operator/internal/testing/wgtest"
)

// The gateway pod's WireGuard device runs in a container of its own (wireguard.RunDevice) and
// the agent configures it over its UAPI socket (ModeExternal). A roaming site pings the gateway
// every 100 ms through the tunnel:
//   - the agent killed (SIGKILL): its pings go on being answered while no agent runs — the
//     device, its keys and the site's endpoint are untouched;
//   - a new agent adopts the device as it is (the site's endpoint kept) and its Close leaves the
//     device in place;
//   - the device's own container restarted: the agent notices the empty device (NeedsApply),
//     and its next configuration restores the site's endpoint from the state file, so the
//     gateway reaches the site again without waiting for it.
func TestExternalDeviceOutlivesTheAgent(t *testing.T) {
	netns.Skip(t, "ping")
	run := netns.NewRun(t, nsPrefix)
	gw, site := run.NS("gw"), run.NS("site")
	netns.Veth(site, "vsite", gw, "vgw")
	site.MustRun("ip", "addr", "add", "198.51.100.1/24", "dev", "vsite")
	gw.MustRun("ip", "addr", "add", "198.51.100.2/24", "dev", "vgw")

	gwKey, siteKey := wgtest.NewKey(t), wgtest.NewKey(t)
	keys := map[string]wgtypes.Key{"gateway private key": gwKey, "site private key": siteKey}
	secrets := wgtest.Secrets{gwKeyRef: []byte(gwKey.String()), siteKeyRef: []byte(siteKey.String())}
	name := wgtest.UniqueInterfaceName("x")
	state := filepath.Join(t.TempDir(), "endpoints.json")
	startDevice := func() *wgtest.Node { return wgtest.Start(t, gw, wgtest.Options{InterfaceName: name, DeviceOnly: true}) }
	device := startDevice()
	agentOpts := wgtest.Options{InterfaceName: name, Mode: wireguard.ModeExternal, StateFile: state}
	agent := wgtest.Start(t, gw, agentOpts)
	siteNode := wgtest.Start(t, site, wgtest.Options{InterfaceName: wgtest.UniqueInterfaceName("s"), Mode: wireguard.ModeUserspace})
	var agent2 *wgtest.Node
	defer expectNoKeysInLogs(t, keys, &device, &agent, &agent2, &siteNode)

	roaming := connectRoamingSite(t, agent, siteNode, site, gwKey, siteKey, secrets)
	stream := startPings(site, "100.64.7.1", 100*time.Millisecond)
	defer stream.stop()
	waitAnswers := func(what string, n int) {
		t.Helper()
		before := stream.answered()
		if err := netns.Eventually(5*time.Second, func() error {
			if got := stream.answered() - before; got < n {
				return fmt.Errorf("%s: %d answers", what, got)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitAnswers("before", 5)

	t.Run("the agent killed: the tunnel carries on without it", func(t *testing.T) {
		agent.Kill()
		waitAnswers("while no agent runs", 10)
		if p := devicePeer(t, device, siteKey.PublicKey()); p == nil || p.Endpoint == nil || p.Endpoint.String() != "198.51.100.1:51820" {
			t.Fatalf("the device's peer for the site after the agent died: %+v", p)
		}
	})

	agent2 = wgtest.Start(t, gw, agentOpts) // (started here: a subtest's cleanup would stop it)
	t.Run("a new agent adopts the device as it is", func(t *testing.T) {
		if err := agent2.Apply(gatewayConfig(roaming), secrets); err != nil {
			t.Fatal(err)
		}
		if p := devicePeer(t, device, siteKey.PublicKey()); p == nil || p.Endpoint == nil || p.Endpoint.String() != "198.51.100.1:51820" {
			t.Fatalf("the device's peer for the site after a new agent applied: %+v", p)
		}
		waitAnswers("with the new agent", 5)
		if need, err := agent2.NeedsApply(); err != nil || need {
			t.Fatalf("a configured device needs applying: %v %v", need, err)
		}
	})
	gap := stream.finish()
	t.Logf("longest gap between answers across the agent's death and replacement: %s", gap.Round(time.Millisecond))

	t.Run("the device's container restarted: the agent re-applies and restores the site's endpoint", func(t *testing.T) {
		device.Kill()
		device = startDevice()
		if err := netns.Eventually(10*time.Second, func() error {
			need, err := agent2.NeedsApply()
			if err != nil || !need {
				return fmt.Errorf("NeedsApply %v %v", need, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if err := agent2.Apply(gatewayConfig(roaming), secrets); err != nil {
			t.Fatal(err)
		}
		if p := devicePeer(t, device, siteKey.PublicKey()); p == nil || p.Endpoint == nil || p.Endpoint.String() != "198.51.100.1:51820" {
			t.Fatalf("the new device's peer for the site: %+v (want the remembered endpoint)", p)
		} else if p.PersistentKeepaliveInterval != 0 {
			t.Errorf("the roaming site's persistent keepalive is %s after the handshake was initiated, want none (as configured)", p.PersistentKeepaliveInterval)
		}
		if err := netns.Eventually(10*time.Second, func() error { return quickPing(site, "100.64.7.1") }); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the agent's Close never removes the external device", func(t *testing.T) {
		agent2.Stop()
		if _, err := device.Device(); err != nil {
			t.Fatalf("the device is gone after the agent stopped: %v", err)
		}
	})
}
