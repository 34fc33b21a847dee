// Package testoutput reads `go test -v` output. A CI log keeps only its tail, so suites whose
// output is long (the VM's guest tests, the cluster end-to-end suite) print their failed tests'
// own lines again, last.
package testoutput

import (
	"slices"
	"strings"
)

// Failed returns, for every test that failed and has no failed subtest, the lines it printed:
// from its "=== RUN" (or "=== CONT", "=== PAUSE", "=== NAME") to the next test's. When no test
// failed by name (a panic, a timeout) it returns the whole output.
func Failed(output string) string {
	lines := strings.Split(output, "\n")
	var failed []string
	for _, l := range lines {
		if name, ok := strings.CutPrefix(strings.TrimSpace(l), "--- FAIL: "); ok {
			if f := strings.Fields(name); len(f) > 0 {
				failed = append(failed, f[0])
			}
		}
	}
	var b strings.Builder
	for _, name := range failed {
		if slices.ContainsFunc(failed, func(o string) bool { return strings.HasPrefix(o, name+"/") }) {
			continue // its failed subtests say why
		}
		in := false
		for _, l := range lines {
			if rest, ok := strings.CutPrefix(l, "=== "); ok {
				f := strings.Fields(rest)
				in = len(f) == 2 && f[1] == name
			}
			if in {
				b.WriteString(l)
				b.WriteByte('\n')
			}
		}
	}
	if b.Len() == 0 {
		return output
	}
	return b.String()
}
