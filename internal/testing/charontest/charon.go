package charontest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/strongswan/govici/vici"
)

// DefaultPlugins is the load list that runs IKEv2 with PSKs and userspace ESP on these
// machines: kdf must be loaded or key derivation fails, and kernel-libipsec (which Debian
// ships with load = no) provides ESP where the kernel has none.
var DefaultPlugins = []string{
	"random", "nonce", "openssl", "aes", "sha1", "sha2", "hmac", "gcm", "pem", "pkcs1", "x509",
	"kdf", "pubkey", "gmp", "kernel-libipsec", "kernel-netlink", "socket-default",
	"vici", "updown",
}

// Config is one daemon's strongswan.conf. Zero fields take the defaults noted.
type Config struct {
	// Plugins is the load list (DefaultPlugins).
	Plugins []string
	// RetransmitTimeout, RetransmitBase and RetransmitTries (0.5 s, 1.0, 2) make a dead peer
	// detected in about 2.5 s with dpd_delay = 1s (charon's defaults take minutes).
	RetransmitTimeout float64
	RetransmitBase    float64
	RetransmitTries   int
	// LogLevel is the file log's default level (1). Above 3, charon logs key material: the
	// tests that scan the log for secrets rely on the default.
	LogLevel int
	// Extra is appended inside the charon { } section.
	Extra string
}

func (c Config) withDefaults() Config {
	if len(c.Plugins) == 0 {
		c.Plugins = DefaultPlugins
	}
	if c.RetransmitTimeout == 0 {
		c.RetransmitTimeout = 0.5
	}
	if c.RetransmitBase == 0 {
		c.RetransmitBase = 1.0
	}
	if c.RetransmitTries == 0 {
		c.RetransmitTries = 2
	}
	if c.LogLevel == 0 {
		c.LogLevel = 1
	}
	return c
}

// Charon is one charon-systemd daemon inside a namespace, with its own strongswan.conf, VICI
// socket and log file in a directory of its own.
type Charon struct {
	// Name labels the daemon in messages ("site", "gw").
	Name string
	NS   *Netns
	// Dir holds ConfPath, Socket, LogPath and the daemon's stderr.
	Dir      string
	ConfPath string
	Socket   string
	LogPath  string

	t    testing.TB
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// ReadyTimeout bounds the wait for a started daemon to answer on its VICI socket (it answers
// after about 150 ms; the margin is for loaded CI machines).
const ReadyTimeout = 20 * time.Second

// Start writes a strongswan.conf for cfg and starts charon-systemd in ns; it returns once the
// daemon answers on its VICI socket. The daemon is killed at cleanup (before ns is deleted,
// which kills whatever is left), and its log is printed when the test failed.
func Start(t testing.TB, ns *Netns, name string, cfg Config) *Charon {
	t.Helper()
	// A short directory: a unix socket path has at most 107 bytes, and t.TempDir() is named
	// after the test.
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-charon-%s-", Prefix, os.Getpid(), name))
	if err != nil {
		t.Fatal(err)
	}
	c := &Charon{
		Name: name, NS: ns, Dir: dir, t: t,
		ConfPath: filepath.Join(dir, "strongswan.conf"),
		Socket:   filepath.Join(dir, "charon.vici"),
		LogPath:  filepath.Join(dir, "charon.log"),
	}
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("charon %s (%s) log:\n%s", name, ns.Name, tail(c.Log(), 200))
		}
		_ = os.RemoveAll(dir)
	})
	if err := os.WriteFile(c.ConfPath, []byte(c.conf(cfg.withDefaults())), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *Charon) conf(cfg Config) string {
	return fmt.Sprintf(`# charontest daemon %[1]s in namespace %[2]s
charon {
  load_modular = no
  load = %[3]s
  retransmit_timeout = %[4]g
  retransmit_base = %[5]g
  retransmit_tries = %[6]d
  plugins {
    vici {
      socket = unix://%[7]s
    }
  }
  filelog {
    file {
      path = %[8]s
      default = %[9]d
      ike_name = yes
      time_format = %%T
      flush_line = yes
    }
  }
%[10]s
}
charon-systemd {
  journal {
    default = -1
  }
}
swanctl {
  load = pem pkcs1 x509 revocation constraints pubkey openssl random
  socket = unix://%[7]s
}
`, c.Name, c.NS.Name, strings.Join(cfg.Plugins, " "), cfg.RetransmitTimeout, cfg.RetransmitBase,
		cfg.RetransmitTries, c.Socket, c.LogPath, cfg.LogLevel, cfg.Extra)
}

// URI is the daemon's VICI socket as the agent's driver takes it (unix:///path).
func (c *Charon) URI() string { return "unix://" + c.Socket }

// Env is the environment that points strongSwan's tools (swanctl) at this daemon.
func (c *Charon) Env() []string { return append(os.Environ(), "STRONGSWAN_CONF="+c.ConfPath) }

// Start (re)starts the daemon after Kill or Stop, and waits until it answers on VICI.
func (c *Charon) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		select {
		case <-c.done:
		default:
			return fmt.Errorf("charon %s is running", c.Name)
		}
	}
	_ = os.Remove(c.Socket)
	stderr, err := os.OpenFile(filepath.Join(c.Dir, "stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := c.NS.Command(context.Background(), "charon-systemd")
	cmd.Env = c.Env()
	cmd.Stdout, cmd.Stderr = stderr, stderr
	// Its own process group: a signal to the test's group does not reach it, and Kill reaches
	// anything it forked (updown scripts).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = stderr.Close()
		return fmt.Errorf("starting charon %s: %w", c.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = stderr.Close()
		close(done)
	}()
	c.cmd, c.done = cmd, done

	deadline := time.Now().Add(ReadyTimeout)
	for {
		err := ping(c.Socket)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			out, _ := os.ReadFile(filepath.Join(c.Dir, "stderr"))
			return fmt.Errorf("charon %s exited before answering on VICI: %s\n%s\n%s", c.Name, cmd.ProcessState, out, tail(c.Log(), 50))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("charon %s does not answer on %s after %s: %v\n%s", c.Name, c.Socket, ReadyTimeout, err, tail(c.Log(), 50))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping opens a VICI session and asks for the daemon's version.
func ping(socket string) error {
	s, err := vici.NewSession(vici.WithSocketPath(socket))
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = s.Call(ctx, "version", nil)
	return err
}

// Pid is the daemon's process id (0 when it never started).
func (c *Charon) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Running reports whether the daemon process is alive.
func (c *Charon) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return false
	}
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Kill kills the daemon (SIGKILL: no IKE DELETE reaches its peers, as when a device loses
// power) and waits for it to exit.
func (c *Charon) Kill() { c.signal(syscall.SIGKILL) }

// Stop terminates the daemon gracefully (SIGTERM: it deletes its SAs, telling its peers) and
// waits for it; it is killed if it takes longer than 10 s.
func (c *Charon) Stop() { c.signal(syscall.SIGTERM) }

func (c *Charon) signal(sig syscall.Signal) {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-done:
		return
	case <-time.After(10 * time.Second):
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Swanctl runs swanctl against this daemon and returns its combined output.
func (c *Charon) Swanctl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "swanctl", args...)
	cmd.Env = c.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("swanctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// LoadSwanctlConf writes text as the daemon's swanctl.conf (in Dir) and loads it with
// swanctl --load-all, the way an engineer configures a client's device. Loading the same
// file again replaces what changed.
func (c *Charon) LoadSwanctlConf(text string) error {
	// swanctl --load-all also loads credentials from the subdirectories next to the file.
	dir := filepath.Join(c.Dir, "swanctl")
	for _, sub := range swanctlDirs {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}
	file := filepath.Join(dir, "swanctl.conf")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return err
	}
	out, err := c.Swanctl("--load-all", "--noprompt", "--file", file)
	if err != nil {
		return err
	}
	if strings.Contains(out, "failed") {
		return fmt.Errorf("swanctl --load-all: %s", out)
	}
	return nil
}

// Log is the daemon's log file so far.
func (c *Charon) Log() string {
	b, err := os.ReadFile(c.LogPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err.Error()
	}
	return string(b)
}

var swanctlDirs = []string{"x509", "x509ca", "x509ocsp", "x509aa", "x509ac", "x509crl", "pubkey",
	"private", "rsa", "ecdsa", "bliss", "pkcs8", "pkcs12"}

func tail(s string, lines int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > lines {
		ls = append([]string{"... (" + strconv.Itoa(len(ls)-lines) + " lines before)"}, ls[len(ls)-lines:]...)
	}
	return strings.Join(ls, "\n")
}
