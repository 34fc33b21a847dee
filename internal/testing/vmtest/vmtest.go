// Package vmtest runs a package's Go tests inside a throwaway qemu VM that boots Debian's stock
// kernel, so tests can use what production nodes have and these machines lack: kernel IPsec
// (XFRM, esp4), the kernel WireGuard device, every nft expression as a module.
//
// The kit (kernel, its modules, a tiny initramfs) is built and cached in bin/vm by
// hack/vm/kit.sh. Run builds the package's test binary on the host (go test -c), boots the VM
// with the host's root shared read-only over 9p (tmpfs overlay on top, so the host's own nft,
// ip, wg, strongSwan and socat run inside and nothing is written to the host), runs the binary
// there and reports its output (streamed to t.Log) and exit status as the calling test's result.
// The VM has no network device: all traffic is between namespaces inside it. Guest-side tests
// guard themselves with SkipUnlessGuest, so a plain go test on the host skips them; the
// host-side Run is opt-in (BNERD_VMTEST=1, set by make test-vm), so go test ./... never boots
// a VM by itself.
//
// One VM at a time per machine (a lock file); every run removes its temp dir, and qemu dies
// with the test process (Pdeathsig), also when the test is killed.
// What it runs: docs/development.md, "The kernel dataplane in a VM".
package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// EnvGuest is set to 1 in the guest's test binary's environment.
	EnvGuest = "BNERD_VMTEST_GUEST"
	// EnvRun=1 opts in: without it VM tests skip, so a plain go test ./... never boots a VM
	// (make test-vm sets it).
	EnvRun = "BNERD_VMTEST"
	// EnvKernel is the kit's kernel release, set in the guest test binary's environment.
	EnvKernel = "BNERD_VMTEST_KERNEL"
	// EnvKit overrides the kit directory (default: what hack/vm/kit.sh --check prints).
	EnvKit = "BNERD_VM_KIT"
	// EnvAccel forces the accelerator: "tcg" or "kvm" (default: kvm only with hardware
	// virtualization, see Accel).
	EnvAccel = "BNERD_VM_ACCEL"

	// LockFile serialises VMs on this machine (TCG is CPU-heavy).
	LockFile = "/run/lock/bnerd-vmtest.lock"

	tempPrefix = "bnerd-vmtest-"
)

// DefaultModules are preloaded with one modprobe -a before the test binary starts (each
// autoload costs a modprobe exec under TCG; the first AES-GCM SA would pull the DRBG).
var DefaultModules = []string{
	"xfrm_user", "esp4", "xfrm4_tunnel", "xfrm_interface", "wireguard", "veth",
	"nf_tables", "nft_xfrm", "nft_ct", "nft_chain_nat",
	"gcm", "ghash_generic", "aesni_intel", "seqiv", "drbg", "jitterentropy_rng",
}

// InGuest reports whether this process runs inside the test VM.
func InGuest() bool { return os.Getenv(EnvGuest) == "1" }

// SkipUnlessGuest skips a guest-side test on the host.
func SkipUnlessGuest(t testing.TB) {
	t.Helper()
	if !InGuest() {
		t.Skip("runs inside the test VM only (vmtest.Run)")
	}
}

// Kit is a built kit (hack/vm/kit.sh).
type Kit struct {
	Dir     string // bin/vm/kit-...
	Release string // the guest kernel's uname -r
	Package string // "<package> <version>"
}

// Available returns the kit when VM tests can run here: opted in (EnvRun=1), root (the guest
// uses the host's root filesystem as root; qemu must read all of it), qemu, and a built kit.
// Otherwise it says what is missing (for t.Skip). It builds nothing.
func Available() (*Kit, error) {
	if InGuest() {
		return nil, errors.New("already inside the test VM")
	}
	if os.Getenv(EnvRun) != "1" {
		return nil, fmt.Errorf("VM tests run only with %s=1 (make test-vm)", EnvRun)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("VM tests need root")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, errors.New("qemu-system-x86_64 is not installed (hack/vm/kit.sh installs it)")
	}
	dir := os.Getenv(EnvKit)
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return nil, err
		}
		var stderr bytes.Buffer
		cmd := exec.Command(filepath.Join(root, "hack/vm/kit.sh"), "--check")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("no VM kit (make vm-kit builds it): %s", strings.TrimSpace(stderr.String()))
		}
		dir = strings.TrimSpace(string(out))
	}
	// The guest sees the host's root at another place: a symlink on the way (bin/ linked to
	// another checkout's) would point outside it.
	if resolved, err := filepath.EvalSymlinks(dir); err == nil {
		dir = resolved
	}
	k := &Kit{Dir: dir}
	for _, f := range []string{"vmlinux", "initrd.gz", "ok"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return nil, fmt.Errorf("VM kit %s incomplete: %v", dir, err)
		}
	}
	rel, err := os.ReadFile(filepath.Join(dir, "kernel.release"))
	if err != nil {
		return nil, err
	}
	pkg, _ := os.ReadFile(filepath.Join(dir, "kernel.package"))
	k.Release, k.Package = strings.TrimSpace(string(rel)), strings.TrimSpace(string(pkg))
	return k, nil
}

// Skip skips the test unless Available, and returns the kit.
func Skip(t testing.TB) *Kit {
	t.Helper()
	k, err := Available()
	if err != nil && os.Getenv(EnvRun) == "1" {
		// opted in (make test-vm): a VM test that cannot run is a failure, not a skip
		t.Fatal(err)
	}
	if err != nil {
		t.Skip(err)
	}
	return k
}

// ModuleRoot is the directory of the go.mod above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Accel returns qemu's accelerator arguments and a name. KVM only when the hardware hypervisor
// module (kvm_intel, kvm_amd) is loaded: on a PVM host (kvm_pvm) KVM_CREATE_VM succeeds but a
// stock kernel never boots, and qemu does not fall back by itself.
func Accel() ([]string, string) {
	switch os.Getenv(EnvAccel) {
	case "tcg":
		return tcg()
	case "kvm":
		return []string{"-enable-kvm", "-cpu", "host"}, "kvm"
	}
	hw := false
	for _, m := range []string{"/sys/module/kvm_intel", "/sys/module/kvm_amd"} {
		if _, err := os.Stat(m); err == nil {
			hw = true
		}
	}
	if hw {
		if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
			f.Close()
			return []string{"-enable-kvm", "-cpu", "host"}, "kvm"
		}
	}
	return tcg()
}

func tcg() ([]string, string) {
	return []string{"-accel", "tcg,thread=multi,tb-size=128", "-cpu", "max"}, "tcg"
}

// Options for Run.
type Options struct {
	// Run is the test binary's -test.run pattern (default: every test).
	Run string
	// Args are further arguments to the test binary (after -test.v).
	Args []string
	// Env are KEY=value pairs added to the guest test binary's environment.
	Env []string
	// Modules are preloaded before the tests start (default DefaultModules).
	Modules []string
	// Timeout bounds the whole VM run (default 4 minutes); the binary gets -test.timeout a bit
	// shorter so it panics with its stacks first.
	Timeout time.Duration
	// MemoryMB is the guest's memory (default 512).
	MemoryMB int
	// CPUs is the guest's vCPU count (default 2).
	CPUs int
}

// Result is one VM run.
type Result struct {
	// Output is the guest console: the test binary's output (-test.v) and kernel warnings.
	Output string
	// ExitCode is the test binary's exit status; -1 when the guest did not report one.
	ExitCode int
	// Accel is "tcg" or "kvm".
	Accel string
	// Build is the go test -c time, Boot the time from qemu's start to the guest's stage 2,
	// Preload the modprobe of Options.Modules, Tests from there to the guest's report, Total
	// qemu's whole run.
	Build, Boot, Preload, Tests, Total time.Duration
	// GuestUptime is the guest kernel's uptime when stage 2 started.
	GuestUptime string
}

// Run builds pkg's test binary (a package path relative to the module root, e.g.
// "./internal/testing/vmtest"), runs it inside the VM and streams the guest's console to t.Log. The
// test fails when the guest's tests fail or the VM does not report; Run returns the result for
// further assertions. It skips the test when VM tests cannot run here (see Available).
func Run(t testing.TB, pkg string, opts Options) Result {
	t.Helper()
	kit := Skip(t)
	res, err := run(t, kit, pkg, opts)
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	switch {
	case res.ExitCode < 0:
		t.Errorf("vmtest: the VM ended without reporting the tests' exit status")
	case res.ExitCode != 0:
		t.Errorf("vmtest: the tests in the VM failed (exit status %d)", res.ExitCode)
	}
	return res
}

func run(t testing.TB, kit *Kit, pkg string, opts Options) (Result, error) {
	res := Result{ExitCode: -1}
	if opts.Timeout == 0 {
		opts.Timeout = 4 * time.Minute
	}
	if opts.MemoryMB == 0 {
		opts.MemoryMB = 512
	}
	if opts.CPUs == 0 {
		opts.CPUs = 2
	}
	if opts.Modules == nil {
		opts.Modules = DefaultModules
	}
	root, err := ModuleRoot()
	if err != nil {
		return res, err
	}
	pkgDir := filepath.Join(root, filepath.FromSlash(pkg))
	if _, err := os.Stat(pkgDir); err != nil {
		return res, fmt.Errorf("package directory: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	if deadline, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := deadline.Deadline(); ok && time.Until(d) < opts.Timeout {
			ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
			defer cancel()
		}
	}

	sweepTemp()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", tempPrefix, os.Getpid()))
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return res, err
	}

	// The test binary, built on the host; the guest runs it from the 9p root. Static and
	// -trimpath, as the images' binaries are built: the packages they share are compiled once.
	start := time.Now()
	bin := filepath.Join(dir, "vm.test")
	build := exec.CommandContext(ctx, "go", "test", "-c", "-trimpath", "-o", bin, pkg)
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return res, fmt.Errorf("go test -c %s: %v\n%s", pkg, err, out)
	}
	res.Build = time.Since(start)

	testTimeout := opts.Timeout - 30*time.Second
	if dl, ok := ctx.Deadline(); ok {
		testTimeout = min(testTimeout, time.Until(dl)-30*time.Second)
	}
	if testTimeout < 10*time.Second {
		return res, fmt.Errorf("too little time left for the VM (%v)", testTimeout)
	}
	args := []string{bin, "-test.v", "-test.timeout", testTimeout.String()}
	if opts.Run != "" {
		args = append(args, "-test.run", opts.Run)
	}
	args = append(args, opts.Args...)
	var s strings.Builder
	s.WriteString("echo \"VM-STAGE2 uptime=$(cut -d' ' -f1 /proc/uptime)\"\n")
	if len(opts.Modules) > 0 {
		fmt.Fprintf(&s, "modprobe -a %s || echo 'vmtest: modprobe failed'\n", shellJoin(opts.Modules))
	}
	s.WriteString("echo \"VM-TESTS uptime=$(cut -d' ' -f1 /proc/uptime)\"\n")
	fmt.Fprintf(&s, "export %s=1 %s=%s\n", EnvGuest, EnvKernel, shellQuote(kit.Release))
	for _, e := range opts.Env {
		fmt.Fprintf(&s, "export %s\n", shellQuote(e))
	}
	fmt.Fprintf(&s, "cd %s || exit 99\n", shellQuote(pkgDir))
	fmt.Fprintf(&s, "%s 2>&1\n", shellJoin(args))
	stage2 := filepath.Join(dir, "stage2.sh")
	if err := os.WriteFile(stage2, []byte(s.String()), 0o644); err != nil {
		return res, err
	}

	unlock, err := lock(ctx, t)
	if err != nil {
		return res, err
	}
	defer unlock()

	accel, accelName := Accel()
	res.Accel = accelName
	qargs := append(accel,
		"-smp", strconv.Itoa(opts.CPUs), "-m", strconv.Itoa(opts.MemoryMB), "-M", "pc",
		"-kernel", filepath.Join(kit.Dir, "vmlinux"), "-initrd", filepath.Join(kit.Dir, "initrd.gz"),
		"-append", fmt.Sprintf("console=ttyS0 quiet panic=-1 stage2=%s moddir=%s", stage2, filepath.Join(kit.Dir, "kroot")),
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path="+outDir+",mount_tag=out,security_model=none",
		"-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot", "-nic", "none",
		"-device", "isa-debug-exit,iobase=0xf4,iosize=0x04")
	t.Logf("vmtest: booting %s (%s) under %s, running %s %s", kit.Package, kit.Release, accelName, pkg, opts.Run)

	qemuCode, out, err := runQEMU(ctx, t, qargs, &res)
	res.Output = out
	if ctx.Err() != nil {
		return res, fmt.Errorf("VM run timed out after %v", opts.Timeout)
	}
	if err != nil {
		return res, err
	}
	rc, rcErr := os.ReadFile(filepath.Join(outDir, "rc"))
	switch qemuCode {
	case 1: // isa-debug-exit 0
		res.ExitCode = 0
	case 3: // isa-debug-exit 1: the tests failed, the exact status is in the results share
		res.ExitCode = 1
		if n, err := strconv.Atoi(strings.TrimSpace(string(rc))); rcErr == nil && err == nil {
			res.ExitCode = n
		}
	case 5:
		return res, errors.New("the VM's stage 1 failed (see VM-STAGE1-FAILED in the output)")
	default:
		return res, fmt.Errorf("qemu exited with %d without the guest reporting", qemuCode)
	}
	return res, nil
}

// runQEMU runs qemu, streaming its console to t.Log, and returns its exit code. qemu gets
// SIGKILL when the thread that started it ends: the starting goroutine stays locked to its
// thread until qemu is gone, so qemu dies with the test process however that ends.
func runQEMU(ctx context.Context, t testing.TB, args []string, res *Result) (int, string, error) {
	type done struct {
		code int
		err  error
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, "", err
	}
	started := make(chan error, 1)
	finished := make(chan done, 1)
	var qemuStart time.Time
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
		cmd.Stdin = nil // /dev/null
		cmd.Stdout, cmd.Stderr = pw, pw
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		cmd.WaitDelay = 5 * time.Second
		qemuStart = time.Now()
		if err := cmd.Start(); err != nil {
			pw.Close()
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		pw.Close()
		code := cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = nil // a non-zero exit is the guest's report
			if code < 0 {
				err = fmt.Errorf("qemu: %s", cmd.ProcessState)
			}
		}
		finished <- done{code, err}
	}()
	if err := <-started; err != nil {
		pr.Close()
		return -1, "", fmt.Errorf("starting qemu: %v", err)
	}
	var all strings.Builder
	var stage2At, testsAt time.Time
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		all.WriteString(line)
		all.WriteByte('\n')
		if rest, ok := strings.CutPrefix(line, "VM-STAGE2 uptime="); ok && stage2At.IsZero() {
			stage2At = time.Now()
			res.Boot = stage2At.Sub(qemuStart)
			res.GuestUptime = rest + "s"
			t.Logf("vm| booted in %.1fs (guest uptime %ss, %s)", res.Boot.Seconds(), rest, res.Accel)
			continue
		}
		if strings.HasPrefix(line, "VM-TESTS uptime=") && !stage2At.IsZero() && testsAt.IsZero() {
			testsAt = time.Now()
			res.Preload = testsAt.Sub(stage2At)
			continue
		}
		if strings.HasPrefix(line, "VM-RC=") && !testsAt.IsZero() {
			res.Tests = time.Since(testsAt)
		}
		t.Logf("vm| %s", line)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
		t.Logf("vmtest: reading the console: %v", err)
	}
	pr.Close()
	d := <-finished
	res.Total = time.Since(qemuStart)
	return d.code, all.String(), d.err
}

// lock takes the machine-wide VM lock, waiting while another VM runs. The lock dies with the
// process (flock), so a killed test never leaves it held.
func lock(ctx context.Context, t testing.TB) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(LockFile), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(LockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("flock %s: %v", LockFile, err)
		}
		if !logged {
			t.Logf("vmtest: waiting for another VM to finish (%s)", LockFile)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for %s: %v", LockFile, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sweepTemp removes temp dirs of earlier runs whose process is gone (killed before cleanup).
func sweepTemp() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), tempPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
