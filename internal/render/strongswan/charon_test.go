package strongswan

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/netns"
)

// TestCharonLoadsBothForms loads every golden case, and gateways with hostile identities, into a
// real charon (strongSwan's charon-systemd, in a network namespace of its own so initiations go
// nowhere): once as the agent will, with load-conn / load-shared over VICI, and once as an
// engineer would, with swanctl --load-conns from the rendered swanctl.conf. charon must accept
// both, and list the same connections for both. Skipped without root or strongSwan (Debian:
// charon-systemd strongswan-swanctl libstrongswan-standard-plugins).
func TestCharonLoadsBothForms(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	netns.Skip(t, "charon-systemd", "swanctl")
	charon, _ := exec.LookPath("charon-systemd")
	swanctl, _ := exec.LookPath("swanctl")

	dir := t.TempDir()
	sock := filepath.Join(dir, "charon.vici")
	conf := filepath.Join(dir, "strongswan.conf")
	plugins := "random nonce openssl aes sha1 sha2 hmac gcm pem pkcs1 x509 kdf pubkey curve25519 gmp kernel-netlink socket-default vici"
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`charon-systemd {
  load_modular = no
  load = %s
  plugins { vici { socket = unix://%s } }
  journal { default = -1 }
  filelog { f { path = %s
                default = 1 } }
}
swanctl {
  load = pem pkcs1 x509 revocation constraints pubkey openssl random
  socket = unix://%s
}
`, plugins, sock, filepath.Join(dir, "charon.log"), sock)), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "STRONGSWAN_CONF="+conf)
	daemon := exec.Command(charon)
	daemon.Env = env
	daemon.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := daemon.Start(); err != nil {
		netns.SkipUnavailable(t, fmt.Errorf("cannot start charon in a network namespace: %w", err))
		return
	}
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
	})
	var s *vici.Session
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s, err = vici.NewSession(vici.WithSocketPath(sock)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "charon.log"))
			t.Fatalf("charon does not answer on %s: %v\n%s", sock, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Listing goes through swanctl: govici's streamed calls can lose or misplace events
	// (notes/dataplane-lab.md), and here every event must be seen.
	listConns := func(t *testing.T) map[string]string {
		cmd := exec.CommandContext(ctx, swanctl, "--list-conns", "--raw")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("swanctl --list-conns: %v", err)
		}
		conns := map[string]string{}
		for _, l := range strings.Split(string(out), "\n") {
			rest, ok := strings.CutPrefix(l, "list-conn event {")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(rest, " ")
			conns[name] = l
		}
		return conns
	}
	unload := func(t *testing.T, cfg *Config) {
		for _, c := range cfg.Connections {
			in := vici.NewMessage()
			_ = in.Set("name", c.Name)
			if _, err := s.Call(ctx, "unload-conn", in); err != nil {
				t.Fatalf("unload-conn %s: %v", c.Name, err)
			}
		}
	}

	all := cases()
	for i, id := range []string{`C=DE, O=Example "Quoted" Org, CN=fw 01`, `x" } evil { a = "b`, `back\slash\`, `# not a comment`} {
		gw := cases()[0].gw
		gw.Peers[0].IPsec.RemoteID = id
		gw.IPsec.LocalID = id + "-local"
		all = append(all, testCase{name: fmt.Sprintf("hostile-id-%d", i), gw: gw})
	}
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			cfg, text := render(t, tc.gw, tc.opts)

			// The agent's way.
			for _, c := range cfg.Connections {
				m, err := c.LoadConnMessage()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Call(ctx, "load-conn", m); err != nil {
					t.Fatalf("load-conn %s: %v\n%s", c.Name, err, m)
				}
			}
			for _, k := range cfg.SharedKeys {
				m, err := k.LoadSharedMessage([]byte("not-a-real-key"))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Call(ctx, "load-shared", m); err != nil {
					t.Fatalf("load-shared %s: %v", k.ID, err)
				}
			}
			viaVICI := listConns(t)
			if len(viaVICI) != len(cfg.Connections) {
				t.Fatalf("charon lists %d connections, %d loaded", len(viaVICI), len(cfg.Connections))
			}
			unload(t, cfg)

			// The engineer's way, from the ConfigMap's text.
			file := filepath.Join(t.TempDir(), "swanctl.conf")
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(ctx, swanctl, "--load-conns", "--file", file)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil || strings.Contains(string(out), "failed") {
				t.Fatalf("swanctl --load-conns: %v\n%s", err, out)
			}
			viaText := listConns(t)
			unload(t, cfg)

			for name, want := range viaVICI {
				if got := viaText[name]; got != want {
					t.Errorf("connection %s differs\n  via VICI: %s\n  via text: %s", name, want, got)
				}
			}
			if len(viaText) != len(viaVICI) {
				t.Errorf("%d connections via the text, %d via VICI", len(viaText), len(viaVICI))
			}
		})
	}
}
