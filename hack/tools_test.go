package hack

// This test keeps hack/install-test-deps.sh honest: every external program the repository's Go
// code (tests included) and shell scripts name must be a row of its table, so that a fresh
// machine that runs `make test` gets it installed. With BNERD_REQUIRE_TOOLS=1 (make test, after
// make test-deps) every row must also be found on this machine, so a wrong package name fails.
//
// What counts as naming a program:
//   - Go (type-checked with golang.org/x/tools/go/packages; callees resolved through
//     types.Info, never by name): the program of exec.Command, exec.CommandContext and
//     exec.LookPath; of internal/testing/netns (Available and Skip's tools, (*NS).Run, MustRun, Start,
//     Command, Exec, RunInput, Wrapper) and internal/testing/charontest (Available,
//     Skip, and the literals inside the arguments of their calls to netns.Available); and,
//     one level up, of any function of the repository that passes a parameter (or a slice
//     parameter's element 0, or its variadic args...) as the program of one of those, or a
//     string parameter into a `bash -c` / `sh -c` script (test/cluster's lab.sh). Only
//     constant strings count (a concatenation or fmt.Sprintf with a constant format keeps its
//     constant parts for a shell script); `for _, c := range [][]string{{"prog", ...}, ...}`
//     then exec(c[0], ...) counts too.
//   - Shell (mvdan.cc/sh/v3/syntax): every simple command of hack/**/*.sh, hack/vm/init,
//     .ci/run and the recipes of Makefile and hack/lab/lab.mk whose first word is a literal,
//     looking through exec, command, env, setsid, nohup, timeout, nice, xargs, stdbuf, chroot,
//     switch_root, nsenter, `ip netns exec NS`, `find -exec`, `sh -c`/`bash -c`, eval and trap
//     strings, and the repository's own functions and scripts that run "$@" after shifting
//     (common.sh's wait_for, cluster-up.sh's start, hack/stage.sh). Shell keywords and
//     builtins, functions defined in any of the scripts (kubectl, ctr, log, ...), words with an
//     expansion and relative paths (into the repository, e.g. bin/, hack/) are not programs.
//   - The same wrapper rules apply to the words of a Go call (exec.Command("ip", "netns",
//     "exec", ns, "socat", ...) names ip and socat).
//
// An absolute path (/usr/sbin/charon-systemd) counts as its base name: a row charon-systemd
// covers it, and a row /bin/busybox covers busybox.
//
// Not seen (so the table lists them by hand): a program named by a value that is not a
// constant (f.nft(), the path hack/promtool.sh prints, a local slice such as test/e2e's
// gatewayAgent args), what the programs themselves run (containerd's runc, kube-proxy's
// conntrack, libcni's plugins, charon's plugins), the VM's stage-2 script (written by
// internal/testing/vmtest at run time), and commands run inside pods (kubectl exec).

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
	"golang.org/x/tools/go/types/typeutil"
	"mvdan.cc/sh/v3/syntax"
)

const (
	module      = "github.com/bnerd/bnerd-vpn-operator"
	depsScript  = "hack/install-test-deps.sh"
	tableMarker = "TOOLS" // the table is the heredoc <<'TOOLS' ... TOOLS in depsScript
)

// tool is one row of the table.
type tool struct {
	Prog    string   // program name, absolute path, or bin/... (made by Script)
	Package string   // the Debian package providing it ("-": none, e.g. go)
	Groups  []string // tests, lab, vm, base
	Script  string   // for bin/ rows: the hack/ script that extracts it
	Line    int
}

// use is one place that names a program.
type use struct {
	Prog string
	At   string // file:line, relative to the module root
}

// missingTool is a program that some file names and no row lists.
type missingTool struct {
	Prog string
	At   []string
}

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

var knownGroups = map[string]bool{"tests": true, "lab": true, "vm": true, "base": true}

// readTable parses the table of install-test-deps.sh.
func readTable(file string) ([]tool, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []tool
	in, done := false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case !in && strings.Contains(line, "<<'"+tableMarker+"'"):
			in = true
			continue
		case in && strings.TrimSpace(line) == tableMarker:
			in, done = false, true
			continue
		case !in:
			continue
		}
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 3 || len(fields) > 4 {
			return nil, fmt.Errorf("%s:%d: want program, package, groups[, script]: %q", file, n, line)
		}
		r := tool{Prog: fields[0], Package: fields[1], Groups: strings.Split(fields[2], ","), Line: n}
		if len(fields) == 4 {
			r.Script = fields[3]
		}
		for _, g := range r.Groups {
			if !knownGroups[g] {
				return nil, fmt.Errorf("%s:%d: group %q is none of tests, lab, vm, base", file, n, g)
			}
		}
		if r.Package == "-" && (len(r.Groups) != 1 || r.Groups[0] != "base") {
			return nil, fmt.Errorf("%s:%d: only a base row may have no package", file, n)
		}
		if strings.HasPrefix(r.Prog, "bin/") != (r.Script != "") {
			return nil, fmt.Errorf("%s:%d: a bin/ row, and only a bin/ row, names the script that makes it", file, n)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !done || len(rows) == 0 {
		return nil, fmt.Errorf("%s: no table <<'%s' ... %s", file, tableMarker, tableMarker)
	}
	return rows, nil
}

// progKey is what a program is matched by: its base name when it is an absolute path.
func progKey(p string) string {
	if strings.HasPrefix(p, "/") {
		return path.Base(p)
	}
	return p
}

// check returns the programs that uses name and rows do not list, sorted, with where each is
// named.
func check(rows []tool, uses []use) []missingTool {
	listed := map[string]bool{}
	for _, r := range rows {
		listed[progKey(r.Prog)] = true
	}
	at := map[string][]string{}
	for _, u := range uses {
		if k := progKey(u.Prog); !listed[k] {
			at[k] = append(at[k], u.At)
		}
	}
	var out []missingTool
	for p, a := range at {
		sort.Slice(a, func(i, j int) bool { // by file, then line
			fi, li, _ := strings.Cut(a[i], ":")
			fj, lj, _ := strings.Cut(a[j], ":")
			if fi != fj {
				return fi < fj
			}
			ni, _ := strconv.Atoi(li)
			nj, _ := strconv.Atoi(lj)
			return ni < nj
		})
		out = append(out, missingTool{Prog: p, At: a})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Prog < out[j].Prog })
	return out
}

func TestEveryProgramIsInstalled(t *testing.T) {
	root := repoRoot(t)
	rows, err := readTable(filepath.Join(root, depsScript))
	if err != nil {
		t.Fatal(err)
	}
	s := newScanner(root, t.Logf)
	if err := s.scanShell(); err != nil {
		t.Fatal(err)
	}
	if err := s.scanGo(); err != nil {
		t.Fatal(err)
	}
	for _, m := range check(rows, s.uses) {
		t.Errorf("%s is run but not in the table of %s: add a row (program, Debian package, groups) there so that a fresh machine gets it installed; used at %s",
			m.Prog, depsScript, strings.Join(m.At, ", "))
	}
	progs, files := map[string]bool{}, map[string]bool{}
	for _, u := range s.uses {
		progs[progKey(u.Prog)] = true
		file, _, _ := strings.Cut(u.At, ":")
		files[file] = true
	}
	names := make([]string, 0, len(progs))
	for p := range progs {
		names = append(names, p)
	}
	sort.Strings(names)
	t.Logf("%d programs named in %d files (%d uses; %d Go and %d shell files scanned); table: %d rows",
		len(progs), len(files), len(s.uses), s.goFiles, s.shellFiles, len(rows))
	t.Logf("programs: %s", strings.Join(names, " "))
}

// TestCheckReportsMissing: with wg's row removed from the real table, check reports wg and
// where it is used, and nothing else.
func TestCheckReportsMissing(t *testing.T) {
	rows, err := readTable(filepath.Join(repoRoot(t), depsScript))
	if err != nil {
		t.Fatal(err)
	}
	var without []tool
	for _, r := range rows {
		if r.Prog != "wg" {
			without = append(without, r)
		}
	}
	if len(without) != len(rows)-1 {
		t.Fatalf("the table has %d rows for wg, want 1", len(rows)-len(without))
	}
	uses := []use{
		{Prog: "wg", At: "internal/agent/wireguard/wg_test.go:42"},
		{Prog: "/usr/sbin/charon-systemd", At: "hack/lab/common.sh:72"},
		{Prog: "ip", At: "internal/testing/netns/netns.go:168"},
		{Prog: "wg", At: "hack/lab/common.sh:145"},
	}
	if got := check(rows, uses); len(got) != 0 {
		t.Fatalf("with the whole table: %v, want nothing missing", got)
	}
	got := check(without, uses)
	want := []missingTool{{Prog: "wg", At: []string{"hack/lab/common.sh:145", "internal/agent/wireguard/wg_test.go:42"}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("without wg's row: %v, want %v", got, want)
	}
	// and the scanners find wg where this repository runs it
	s := newScanner(repoRoot(t), t.Logf)
	if err := s.scanShell(); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range check(without, s.uses) {
		if m.Prog == "wg" && len(m.At) > 0 {
			found = true
		}
	}
	if !found {
		t.Fatal("the shell scan finds no use of wg (hack/lab/common.sh runs wg genkey)")
	}
}

// TestShellScan: what the shell scan counts as a program, and what it does not.
func TestShellScan(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`wg genkey | wg pubkey`, "wg"}, // one use a line
		{`STRONGSWAN_CONF=x setsid ip netns exec "$ns" /usr/sbin/charon-systemd &`, "setsid ip /usr/sbin/charon-systemd"},
		{`exec timeout -s KILL 15 env -u X A=1 "B=$y" nohup stdbuf -oL socat - -`, "timeout env nohup stdbuf socat"},
		{`ls | xargs -r -n 1 sha256sum; find . -exec rmdir {} \; -name x`, "ls xargs sha256sum find rmdir"},
		{`bash -c 'nft list ruleset; echo "$x"' ; sh -ec "iperf3 -s"`, "bash nft sh iperf3"},
		{`command -v qemu-system-x86_64 >/dev/null; command ctr version`, "qemu-system-x86_64 ctr"},
		{`eval "iptables $rule"; trap 'rm -rf "$w"' EXIT`, "iptables rm"},
		{`echo hi; [ -x a ]; cd /; local v=1; "$K/kubectl" get; hack/promtool.sh; ./x; $(foo bar)`, "foo"},
		{`myfunc a b; wrap name 5 curl -fsS x; if true; then printf x; fi; for i in 1; do sleep 1; done`, "curl sleep"},
		{`hack/stage.sh lint env A=1 go vet ./...`, "env go"},
		{`switch_root /newroot /bin/sh -c 'sync; /bin/sh '"$stage2"'; dd of=/dev/port'`, "switch_root /bin/sh sync dd"},
	} {
		s := newScanner(t.TempDir(), t.Logf)
		s.funcs = map[string]int{"myfunc": -1, "wrap": 2}
		s.scripts = map[string]int{"hack/stage.sh": 1}
		if err := s.shell("x.sh", nil).parse(c.src, 0); err != nil {
			t.Fatalf("%s: %v", c.src, err)
		}
		var got []string
		for _, u := range s.uses {
			got = append(got, u.Prog)
		}
		if g := strings.Join(got, " "); g != c.want {
			t.Errorf("%s: programs %q, want %q", c.src, g, c.want)
		}
	}
}

// TestTableToolsPresent (BNERD_REQUIRE_TOOLS=1, as make test sets after make test-deps): every
// row outside bin/ is on this machine, so a row naming the wrong package fails here.
func TestTableToolsPresent(t *testing.T) {
	if os.Getenv("BNERD_REQUIRE_TOOLS") != "1" {
		t.Skip("BNERD_REQUIRE_TOOLS=1 (make test) checks that every row's program is installed")
	}
	rows, err := readTable(filepath.Join(repoRoot(t), depsScript))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if strings.HasPrefix(r.Prog, "bin/") {
			continue
		}
		var err error
		if strings.HasPrefix(r.Prog, "/") {
			_, err = os.Stat(r.Prog)
		} else {
			_, err = exec.LookPath(r.Prog)
		}
		if err != nil {
			t.Errorf("%s:%d: %s is not on this machine (%v), yet its row says package %s provides it (groups %s, which make test-deps installs): is the package or the path right?",
				depsScript, r.Line, r.Prog, err, r.Package, strings.Join(r.Groups, ","))
		}
	}
}

// --- the scanner ----------------------------------------------------------------------------

type scanner struct {
	root  string
	logf  func(string, ...any)
	uses  []use
	seen  map[use]bool
	funcs map[string]int // shell functions of the scripts: how many arguments the function's "$@" drops, or -1 when it runs none
	// scripts of the repository that run their arguments ("$@") after dropping some: path -> how many
	scripts             map[string]int
	goFiles, shellFiles int
	goWrappers          map[string]goWrapper // by the function's types.Func FullName
	goShellWrappers     map[string]int       // function -> the parameter it runs with bash -c
}

func newScanner(root string, logf func(string, ...any)) *scanner {
	return &scanner{root: root, logf: logf, seen: map[use]bool{}, funcs: map[string]int{}, scripts: map[string]int{},
		goWrappers: map[string]goWrapper{}, goShellWrappers: map[string]int{}}
}

func (s *scanner) add(prog, file string, line int) {
	u := use{Prog: prog, At: fmt.Sprintf("%s:%d", file, line)}
	if !s.seen[u] {
		s.seen[u] = true
		s.uses = append(s.uses, u)
	}
}

// placeholder stands for an expansion (or a Go value that is not a constant) in shell text that
// is parsed again (sh -c, eval, trap, a Go string handed to bash -c): an expansion to the parser,
// so never a program.
const placeholder = "${BNERD_DYNAMIC}"

// word is one word of a command line, from the shell or from a Go call.
type word struct {
	lit  string // its value, when ok
	ok   bool   // a literal: no expansion
	text string // its value with every expansion replaced by placeholder
	all  bool   // "$@" ($@, "${@}")
	line int
}

// prefix is the literal text before the word's first expansion.
func (w word) prefix() string {
	p, _, _ := strings.Cut(w.text, placeholder)
	return p
}

var bashBuiltins = map[string]bool{}

func init() {
	for _, b := range strings.Fields(`: . [ alias bg bind break builtin caller cd command compgen complete compopt
		continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help history
		jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return set shift
		shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`) {
		bashBuiltins[b] = true
	}
}

// shellCtx analyses the commands of one file (or of a Go string run by bash -c).
type shellCtx struct {
	s     *scanner
	file  string
	onAll func() // set while finding out whether a function or script runs "$@"
	// record is off while finding wrappers
	quiet bool
}

func (s *scanner) shell(file string, onAll func()) *shellCtx {
	return &shellCtx{s: s, file: file, onAll: onAll, quiet: onAll != nil}
}

func (c *shellCtx) record(prog string, line int) {
	if !c.quiet {
		c.s.add(prog, c.file, line)
	}
}

func newShellParser() *syntax.Parser { return syntax.NewParser(syntax.Variant(syntax.LangBash)) }

// parse parses src (shell code whose first line is line lineOff+1 of c.file) and analyses it.
func (c *shellCtx) parse(src string, lineOff int) error {
	f, err := newShellParser().Parse(strings.NewReader(src), c.file)
	if err != nil {
		return err
	}
	c.walk(f, lineOff)
	return nil
}

// parseText parses shell text found inside a command (sh -c, eval, trap); a string that does
// not parse is logged and skipped.
func (c *shellCtx) parseText(text string, line int) {
	if strings.TrimSpace(strings.ReplaceAll(text, placeholder, "")) == "" {
		return
	}
	if err := c.parse(text, line-1); err != nil {
		c.s.logf("%s:%d: shell text not parsed (skipped): %v", c.file, line, err)
	}
}

func (c *shellCtx) walk(n syntax.Node, lineOff int) {
	syntax.Walk(n, func(n syntax.Node) bool {
		if ce, ok := n.(*syntax.CallExpr); ok && len(ce.Args) > 0 {
			ws := make([]word, len(ce.Args))
			for i, a := range ce.Args {
				ws[i] = shellWord(a, lineOff)
			}
			c.command(ws, false)
		}
		return true
	})
}

func shellWord(w *syntax.Word, lineOff int) word {
	var lit, text strings.Builder
	ok := true
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			v := unescape(p.Value, false)
			if strings.ContainsAny(v, "*?[") {
				ok = false // a glob
			}
			lit.WriteString(v)
			text.WriteString(v)
		case *syntax.SglQuoted:
			lit.WriteString(p.Value)
			text.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if l, isLit := q.(*syntax.Lit); isLit {
					v := unescape(l.Value, true)
					lit.WriteString(v)
					text.WriteString(v)
				} else {
					ok = false
					text.WriteString(placeholder)
				}
			}
		default:
			ok = false
			text.WriteString(placeholder)
		}
	}
	return word{lit: lit.String(), ok: ok, text: text.String(), all: isDollarAt(w), line: lineOff + int(w.Pos().Line())}
}

func isDollarAt(w *syntax.Word) bool {
	if len(w.Parts) != 1 {
		return false
	}
	p := w.Parts[0]
	if dq, ok := p.(*syntax.DblQuoted); ok && len(dq.Parts) == 1 {
		p = dq.Parts[0]
	}
	pe, ok := p.(*syntax.ParamExp)
	return ok && pe.Param != nil && pe.Param.Value == "@" && pe.Index == nil && pe.Slice == nil && pe.Repl == nil && pe.Exp == nil
}

// unescape removes the shell's backslash quoting (inside double quotes only before $ ` " \).
func unescape(s string, dq bool) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (!dq || strings.IndexByte("$`\"\\\n", s[i+1]) >= 0) {
			i++
			if s[i] == '\n' {
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// command analyses one command line. external: the words are run as a program (by exec, env,
// a Go exec call, ...), so shell builtins and functions do not apply.
func (c *shellCtx) command(ws []word, external bool) {
	for len(ws) > 0 {
		w := ws[0]
		if w.all {
			if c.onAll != nil {
				c.onAll()
			}
			return
		}
		if !w.ok || w.lit == "" {
			return
		}
		name := w.lit
		if !external {
			if skip, ok := c.s.funcs[name]; ok {
				if skip < 0 {
					return
				}
				ws = drop(ws, 1+skip)
				continue
			}
			switch name {
			case "exec":
				ws = ws[1:]
				for len(ws) > 0 && ws[0].ok && strings.HasPrefix(ws[0].lit, "-") {
					if ws[0].lit == "-a" {
						ws = drop(ws, 1)
					}
					ws = ws[1:]
				}
				external = true
				continue
			case "command":
				ws = ws[1:]
				lookup := false
				for len(ws) > 0 && ws[0].ok && strings.HasPrefix(ws[0].lit, "-") {
					lookup = lookup || strings.ContainsAny(ws[0].lit, "vV")
					ws = ws[1:]
				}
				if lookup { // command -v X: the script needs X
					for _, x := range ws {
						if x.ok && !bashBuiltins[x.lit] {
							c.record(x.lit, x.line)
						}
					}
					return
				}
				external = true
				continue
			case "eval":
				var parts []string
				for _, x := range ws[1:] {
					parts = append(parts, x.text)
				}
				c.parseText(strings.Join(parts, " "), w.line)
				return
			case "trap":
				if len(ws) > 2 && ws[1].text != "-" {
					c.parseText(ws[1].text, ws[1].line)
				}
				return
			}
			if bashBuiltins[name] {
				return
			}
		}
		if !strings.HasPrefix(name, "/") && strings.Contains(name, "/") {
			// a path into the repository (bin/..., hack/..., ./...): not an external program;
			// a script of the repository that runs its arguments is looked through
			if skip, ok := c.s.scripts[path.Clean(name)]; ok {
				ws = drop(ws, 1+skip)
				external = false
				continue
			}
			return
		}
		c.record(name, w.line)
		ws = c.wrapped(path.Base(name), ws)
		external = true
	}
}

func drop(ws []word, n int) []word {
	if n >= len(ws) {
		return nil
	}
	return ws[n:]
}

// opts drops the options (words starting with -) at the start of ws; withArg are the options
// whose argument is the next word.
func opts(ws []word, withArg ...string) []word {
	for len(ws) > 0 && ws[0].ok && strings.HasPrefix(ws[0].lit, "-") && ws[0].lit != "-" {
		if ws[0].lit == "--" {
			return ws[1:]
		}
		n := 1
		for _, a := range withArg {
			if ws[0].lit == a {
				n = 2
			}
		}
		ws = drop(ws, n)
	}
	return ws
}

// wrapped returns the command that the program prog (ws[0]) runs with the rest of its words,
// or nil. Shell text it runs (sh -c, find -exec) is analysed here.
func (c *shellCtx) wrapped(prog string, ws []word) []word {
	args := ws[1:]
	switch prog {
	case "env":
		for len(args) > 0 {
			a := args[0]
			switch {
			case a.ok && (a.lit == "-u" || a.lit == "-C" || a.lit == "--unset" || a.lit == "--chdir"):
				args = drop(args, 2)
			case a.ok && strings.HasPrefix(a.lit, "-") && a.lit != "-S":
				args = args[1:]
			case envAssign.MatchString(a.prefix()):
				args = args[1:]
			default:
				return args
			}
		}
		return nil
	case "setsid", "nohup":
		return opts(args)
	case "timeout":
		args = opts(args, "-s", "-k")
		return drop(args, 1) // the duration
	case "nice":
		return opts(args, "-n")
	case "stdbuf":
		return opts(args, "-i", "-o", "-e")
	case "xargs":
		return opts(args, "-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s")
	case "chroot", "switch_root":
		return drop(opts(args, "-c"), 1) // the new root
	case "nsenter":
		for i, a := range args {
			if a.ok && a.lit == "--" {
				return args[i+1:]
			}
		}
		return opts(args, "-t", "--target", "-S", "-G", "-w", "-r")
	case "ip":
		if len(args) >= 3 && args[0].ok && args[0].lit == "netns" && args[1].ok && args[1].lit == "exec" {
			return args[3:]
		}
	case "find":
		for i := 0; i < len(args); i++ {
			if a := args[i]; a.ok && (a.lit == "-exec" || a.lit == "-execdir" || a.lit == "-ok" || a.lit == "-okdir") {
				j := i + 1
				for j < len(args) && !(args[j].ok && (args[j].lit == ";" || args[j].lit == "+")) {
					j++
				}
				c.command(args[i+1:j], true)
				i = j
			}
		}
	case "sh", "bash", "dash":
		for i, a := range args {
			if !a.ok || !strings.HasPrefix(a.lit, "-") || a.lit == "--" {
				break
			}
			if !strings.HasPrefix(a.lit, "--") && strings.Contains(a.lit, "c") && i+1 < len(args) {
				c.parseText(args[i+1].text, args[i+1].line)
				break
			}
		}
	}
	return nil
}

// wrapperSkip tells whether the shell code n runs "$@" as a command, and how many arguments
// its shift commands drop first.
func (s *scanner) wrapperSkip(n syntax.Node, file string, skipFuncs bool) (int, bool) {
	runsAll, shifts := false, 0
	c := s.shell(file, func() { runsAll = true })
	syntax.Walk(n, func(n syntax.Node) bool {
		if _, ok := n.(*syntax.FuncDecl); ok && skipFuncs {
			return false
		}
		ce, ok := n.(*syntax.CallExpr)
		if !ok || len(ce.Args) == 0 {
			return true
		}
		if ce.Args[0].Lit() == "shift" {
			k := 1
			if len(ce.Args) > 1 {
				if v, err := strconv.Atoi(ce.Args[1].Lit()); err == nil {
					k = v
				}
			}
			shifts += k
			return true
		}
		ws := make([]word, len(ce.Args))
		for i, a := range ce.Args {
			ws[i] = shellWord(a, 0)
		}
		c.command(ws, false)
		return true
	})
	return shifts, runsAll
}

// shellFile is one parsed file or make recipe line.
type shellFile struct {
	file    string
	lineOff int
	f       *syntax.File
}

// scanShell parses the repository's shell scripts and make recipes and records the programs
// they run.
func (s *scanner) scanShell() error {
	var files []string
	err := filepath.WalkDir(filepath.Join(s.root, "hack"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".sh") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	files = append(files, filepath.Join(s.root, "hack/vm/init"), filepath.Join(s.root, ".ci/run"))
	var parsed []shellFile
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.root, p)
		f, err := newShellParser().Parse(strings.NewReader(string(src)), rel)
		if err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		parsed = append(parsed, shellFile{file: rel, f: f})
		s.shellFiles++
	}
	for _, mk := range []string{"Makefile", "hack/lab/lab.mk"} {
		recipes, err := makeRecipes(filepath.Join(s.root, mk))
		if err != nil {
			return err
		}
		for _, r := range recipes {
			f, err := newShellParser().Parse(strings.NewReader(r.src), mk)
			if err != nil {
				s.logf("%s:%d: recipe line not parsed (skipped): %v", mk, r.line, err)
				continue
			}
			parsed = append(parsed, shellFile{file: mk, lineOff: r.line - 1, f: f})
		}
		s.shellFiles++
	}
	// the scripts' functions first (any file may call any: common.sh is sourced everywhere),
	// then which of them, and which scripts, run their arguments
	var decls []*syntax.FuncDecl
	var declFile []string
	for _, pf := range parsed {
		syntax.Walk(pf.f, func(n syntax.Node) bool {
			if fd, ok := n.(*syntax.FuncDecl); ok && fd.Name != nil {
				s.funcs[fd.Name.Value] = -1
				decls = append(decls, fd)
				declFile = append(declFile, pf.file)
			}
			return true
		})
	}
	for i, fd := range decls {
		if skip, ok := s.wrapperSkip(fd.Body, declFile[i], false); ok {
			s.funcs[fd.Name.Value] = skip
		}
	}
	for _, pf := range parsed {
		if pf.lineOff == 0 && strings.HasPrefix(pf.file, "hack/") {
			if skip, ok := s.wrapperSkip(pf.f, pf.file, true); ok {
				s.scripts[pf.file] = skip
			}
		}
	}
	for _, pf := range parsed {
		s.shell(pf.file, nil).walk(pf.f, pf.lineOff)
	}
	return nil
}

type recipe struct {
	line int
	src  string
}

var makeRef = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// makeRecipes returns a makefile's recipe lines as shell code: continuation lines joined,
// leading @ - + dropped, $$ made $, and make's references made shell expansions ($(NAME) and
// ${NAME} -> ${NAME}, functions and automatic variables -> ${MAKE_EXPANSION}).
func makeRecipes(file string) ([]recipe, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	var out []recipe
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "\t") {
			continue
		}
		start := i
		text := strings.TrimPrefix(lines[i], "\t")
		for strings.HasSuffix(lines[i], `\`) && i+1 < len(lines) {
			i++
			text += "\n" + strings.TrimPrefix(lines[i], "\t")
		}
		text = strings.TrimLeft(text, "@-+ \t")
		out = append(out, recipe{line: start + 1, src: makeToShell(text)})
	}
	return out, nil
}

func makeToShell(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch n := s[i+1]; n {
		case '$':
			b.WriteByte('$')
			i++
		case '(', '{':
			closer := map[byte]byte{'(': ')', '{': '}'}[n]
			depth, j := 0, i+1
			for ; j < len(s); j++ {
				if s[j] == n {
					depth++
				} else if s[j] == closer {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			name := s[i+2 : min(j, len(s))]
			if makeRef.MatchString(name) {
				b.WriteString("${" + strings.NewReplacer(".", "_", "-", "_").Replace(name) + "}")
			} else {
				b.WriteString("${MAKE_EXPANSION}")
			}
			i = j
		default:
			b.WriteString("${MAKE_EXPANSION}")
			i++
		}
	}
	return b.String()
}

// --- Go ---------------------------------------------------------------------------------------

// progArg says where a function of the harness takes a program: args[idx] (with the rest of
// its arguments as the program's), or (all) every constant string in args[idx:].
type progArg struct {
	idx    int
	all    bool
	lookup bool // exec.LookPath: the program alone
}

var goHarness = map[string]progArg{
	"os/exec.Command":                                      {idx: 0},
	"os/exec.CommandContext":                               {idx: 1},
	"os/exec.LookPath":                                     {idx: 0, lookup: true},
	module + "/internal/testing/netns.Available":           {idx: 0, all: true},
	module + "/internal/testing/netns.Skip":                {idx: 1, all: true},
	module + "/internal/testing/charontest.Available":      {idx: 0, all: true},
	module + "/internal/testing/charontest.Skip":           {idx: 1, all: true},
	"(*" + module + "/internal/testing/netns.NS).Run":      {idx: 0},
	"(*" + module + "/internal/testing/netns.NS).MustRun":  {idx: 0},
	"(*" + module + "/internal/testing/netns.NS).Start":    {idx: 0},
	"(*" + module + "/internal/testing/netns.NS).Command":  {idx: 1},
	"(*" + module + "/internal/testing/netns.NS).Exec":     {idx: 1},
	"(*" + module + "/internal/testing/netns.NS).RunInput": {idx: 1},
	"(*" + module + "/internal/testing/netns.NS).Wrapper":  {idx: 1, lookup: true},
}

// goWrapper is a function of the repository that runs its parameter param (or, elem0, its
// element 0) as exec.Command's program; rest: its following arguments are the program's.
type goWrapper struct {
	param    int
	elem0    bool
	variadic bool // param is the variadic parameter
	rest     bool
}

// goFile is one Go file with the type information of the package it was checked in.
type goFile struct {
	rel  string
	f    *ast.File
	info *types.Info
	fset *token.FileSet
}

func (s *scanner) scanGo() error {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedImports | packages.NeedSyntax |
			packages.NeedTypes | packages.NeedTypesInfo,
		Dir:   s.root,
		Tests: true,
		// the dependencies' export data as make test compiles them (static, -trimpath): in the
		// build cache already, where any other configuration would compile them all again
		Env:        append(os.Environ(), "CGO_ENABLED=0"),
		BuildFlags: []string{"-trimpath"},
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return err
	}
	var errs []string
	var files []goFile
	done := map[string]bool{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
		for _, f := range p.Syntax {
			rel, err := filepath.Rel(s.root, p.Fset.Position(f.Package).Filename)
			if err != nil || strings.HasPrefix(rel, "..") || done[rel] {
				continue // go test's generated main, or a file already seen in another variant
			}
			done[rel] = true
			files = append(files, goFile{rel: filepath.ToSlash(rel), f: f, info: p.TypesInfo, fset: p.Fset})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("loading the packages: %s", strings.Join(errs, "; "))
	}
	s.goFiles = len(files)
	for _, gf := range files {
		s.findGoWrappers(gf)
	}
	for _, gf := range files {
		s.scanGoFile(gf)
	}
	return nil
}

func callee(info *types.Info, call *ast.CallExpr) string {
	fn := typeutil.StaticCallee(info, call)
	if fn == nil {
		return ""
	}
	return fn.Origin().FullName()
}

func constString(info *types.Info, e ast.Expr) (string, bool) {
	if tv, ok := info.Types[e]; ok && tv.Value != nil && tv.Value.Kind() == constant.String {
		return constant.StringVal(tv.Value), true
	}
	return "", false
}

// elem0 returns x when e is x[0].
func elem0(info *types.Info, e ast.Expr) (ast.Expr, bool) {
	ix, ok := ast.Unparen(e).(*ast.IndexExpr)
	if !ok {
		return nil, false
	}
	tv := info.Types[ix.Index]
	if tv.Value == nil || tv.Value.Kind() != constant.Int || tv.Value.String() != "0" {
		return nil, false
	}
	return ix.X, true
}

// findGoWrappers records the functions of the file that run a parameter as a program.
func (s *scanner) findGoWrappers(gf goFile) {
	for _, d := range gf.f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		fn, ok := gf.info.Defs[fd.Name].(*types.Func)
		if !ok {
			continue
		}
		sig := fn.Type().(*types.Signature)
		params := map[types.Object]int{}
		for i := 0; i < sig.Params().Len(); i++ {
			params[sig.Params().At(i)] = i
		}
		param := func(e ast.Expr) (int, bool) {
			id, ok := ast.Unparen(e).(*ast.Ident)
			if !ok {
				return 0, false
			}
			i, ok := params[gf.info.Uses[id]]
			return i, ok
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			pa, ok := goHarness[callee(gf.info, call)]
			if !ok || pa.all || len(call.Args) <= pa.idx {
				return true
			}
			pi := pa.idx
			prog := call.Args[pi]
			if call.Ellipsis.IsValid() && pi == len(call.Args)-1 {
				// f(args...): args[0] is the program, the rest its arguments
				if i, ok := param(prog); ok {
					s.goWrappers[fn.FullName()] = goWrapper{param: i, elem0: true, rest: !pa.lookup,
						variadic: sig.Variadic() && i == sig.Params().Len()-1}
				}
				return true
			}
			if name, ok := constString(gf.info, prog); ok && (name == "bash" || name == "sh") {
				// bash -c <a script with a string parameter in it>
				for k := pi + 1; k+1 < len(call.Args); k++ {
					if v, ok := constString(gf.info, call.Args[k]); !ok || v != "-c" {
						continue
					}
					ast.Inspect(call.Args[k+1], func(n ast.Node) bool {
						if e, ok := n.(ast.Expr); ok {
							if i, ok := param(e); ok && types.Identical(sig.Params().At(i).Type(), types.Typ[types.String]) {
								s.goShellWrappers[fn.FullName()] = i
							}
						}
						return true
					})
				}
				return true
			}
			var w goWrapper
			if i, ok := param(prog); ok {
				w.param = i
			} else if x, ok := elem0(gf.info, prog); ok {
				if w.param, ok = param(x); !ok {
					return true
				}
				w.elem0 = true
			} else {
				return true
			}
			w.variadic = sig.Variadic() && w.param == sig.Params().Len()-1
			// the rest of the command: the wrapper's following variadic parameter, or argv[1:]
			if call.Ellipsis.IsValid() && len(call.Args) == pi+2 && !pa.lookup {
				r := ast.Unparen(call.Args[pi+1])
				if sl, ok := r.(*ast.SliceExpr); ok && w.elem0 {
					j, ok := param(sl.X)
					w.rest = ok && j == w.param
				} else if j, ok := param(r); ok && !w.elem0 {
					w.rest = j == w.param+1 && sig.Variadic() && j == sig.Params().Len()-1
				}
			}
			s.goWrappers[fn.FullName()] = w
			return true
		})
	}
}

// wrapperWords are the command words a call of the wrapper w passes.
func (s *scanner) wrapperWords(gf goFile, call *ast.CallExpr, w goWrapper) []word {
	switch {
	case !w.elem0:
		ws := s.goWords(gf, call, w.param)
		if !w.rest {
			ws = ws[:1]
		}
		return ws
	case w.variadic && !call.Ellipsis.IsValid():
		ws := s.goWords(gf, call, w.param) // f("prog", "arg", ...)
		if !w.rest {
			ws = ws[:1]
		}
		return ws
	}
	// a slice: f([]string{"prog", ...}) or f([]string{"prog", ...}...)
	if cl, ok := ast.Unparen(call.Args[w.param]).(*ast.CompositeLit); ok && len(cl.Elts) > 0 {
		var ws []word
		for _, e := range cl.Elts {
			ws = append(ws, s.goWord(gf, e))
		}
		if !w.rest {
			ws = ws[:1]
		}
		return ws
	}
	return nil
}

// goWords are a Go call's arguments from the from'th on as command words; a spread slice
// (args...) is dynamic, a spread composite literal gives its elements.
func (s *scanner) goWords(gf goFile, call *ast.CallExpr, from int) []word {
	var ws []word
	for i, a := range call.Args[from:] {
		if call.Ellipsis.IsValid() && from+i == len(call.Args)-1 {
			a = ast.Unparen(a)
			if cl, ok := a.(*ast.CompositeLit); ok {
				for _, e := range cl.Elts {
					ws = append(ws, s.goWord(gf, e))
				}
				continue
			}
			// append([]string{"prog", ...}, more...)...
			if ap, ok := a.(*ast.CallExpr); ok && isAppend(gf.info, ap) && len(ap.Args) > 0 {
				if cl, ok := ast.Unparen(ap.Args[0]).(*ast.CompositeLit); ok {
					for _, e := range cl.Elts {
						ws = append(ws, s.goWord(gf, e))
					}
				}
			}
			ws = append(ws, word{text: placeholder, line: gf.fset.Position(a.Pos()).Line})
			continue
		}
		ws = append(ws, s.goWord(gf, a))
	}
	return ws
}

func isAppend(info *types.Info, call *ast.CallExpr) bool {
	id, ok := ast.Unparen(call.Fun).(*ast.Ident)
	if !ok {
		return false
	}
	b, ok := info.Uses[id].(*types.Builtin)
	return ok && b.Name() == "append"
}

func (s *scanner) goWord(gf goFile, e ast.Expr) word {
	w := word{line: gf.fset.Position(e.Pos()).Line, text: goShellText(gf.info, e)}
	w.lit, w.ok = constString(gf.info, e)
	return w
}

var printfVerb = regexp.MustCompile(`%[-+# 0-9.*\[\]]*[a-zA-Z%]`)

// goShellText is a Go string expression as shell text: constants kept, the rest placeholders
// (through + and fmt.Sprintf with a constant format).
func goShellText(info *types.Info, e ast.Expr) string {
	e = ast.Unparen(e)
	if v, ok := constString(info, e); ok {
		return v
	}
	switch e := e.(type) {
	case *ast.BinaryExpr:
		if e.Op == token.ADD {
			return goShellText(info, e.X) + goShellText(info, e.Y)
		}
	case *ast.CallExpr:
		if callee(info, e) == "fmt.Sprintf" && len(e.Args) > 0 {
			if f, ok := constString(info, e.Args[0]); ok {
				return printfVerb.ReplaceAllStringFunc(f, func(v string) string {
					if v == "%%" {
						return "%"
					}
					return placeholder
				})
			}
		}
	}
	return placeholder
}

func (s *scanner) scanGoFile(gf goFile) {
	// for _, c := range [][]string{{"prog", ...}, ...}: c's object -> the literal
	rangeLits := map[types.Object]*ast.CompositeLit{}
	ast.Inspect(gf.f, func(n ast.Node) bool {
		if rs, ok := n.(*ast.RangeStmt); ok {
			if id, ok := rs.Value.(*ast.Ident); ok {
				if cl, ok := ast.Unparen(rs.X).(*ast.CompositeLit); ok {
					if obj := gf.info.Defs[id]; obj != nil {
						rangeLits[obj] = cl
					}
				}
			}
		}
		return true
	})
	sh := s.shell(gf.rel, nil)
	ast.Inspect(gf.f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		name := callee(gf.info, call)
		if name == "" {
			return true
		}
		if pa, ok := goHarness[name]; ok && len(call.Args) > pa.idx {
			switch {
			case pa.all:
				for _, a := range call.Args[pa.idx:] {
					ast.Inspect(a, func(n ast.Node) bool {
						if e, ok := n.(ast.Expr); ok {
							if v, ok := constString(gf.info, e); ok {
								s.add(v, gf.rel, gf.fset.Position(e.Pos()).Line)
								return false
							}
						}
						return true
					})
				}
			case pa.lookup:
				if ws := s.goWords(gf, call, pa.idx); len(ws) > 0 {
					sh.command(ws[:1], true)
				}
			default:
				ws := s.goWords(gf, call, pa.idx)
				if len(ws) > 0 && !ws[0].ok {
					s.rangeProgram(gf, sh, call.Args[pa.idx], rangeLits)
				}
				sh.command(ws, true)
			}
			return true
		}
		if w, ok := s.goWrappers[name]; ok && len(call.Args) > w.param {
			sh.command(s.wrapperWords(gf, call, w), true)
		}
		if i, ok := s.goShellWrappers[name]; ok && len(call.Args) > i {
			sh.parseText(goShellText(gf.info, call.Args[i]), gf.fset.Position(call.Args[i].Pos()).Line)
		}
		return true
	})
}

// rangeProgram handles exec.Command(c[0], c[1:]...) with c ranging over a composite literal of
// string slices: every element's first string is a program.
func (s *scanner) rangeProgram(gf goFile, sh *shellCtx, prog ast.Expr, rangeLits map[types.Object]*ast.CompositeLit) {
	x, ok := elem0(gf.info, prog)
	if !ok {
		return
	}
	id, ok := ast.Unparen(x).(*ast.Ident)
	if !ok {
		return
	}
	cl := rangeLits[gf.info.Uses[id]]
	if cl == nil {
		return
	}
	for _, e := range cl.Elts {
		if el, ok := e.(*ast.CompositeLit); ok && len(el.Elts) > 0 {
			var ws []word
			for _, x := range el.Elts {
				ws = append(ws, s.goWord(gf, x))
			}
			sh.command(ws, true)
		}
	}
}
