package testoutput

import (
	"strings"
	"testing"
)

func TestFailed(t *testing.T) {
	out := strings.Join([]string{
		"=== RUN   TestA",
		"=== RUN   TestA/ok",
		"    x_test.go:1: fine",
		"=== RUN   TestA/bad",
		"    x_test.go:2: the reason",
		"=== RUN   TestB",
		"    x_test.go:3: b passes",
		"--- FAIL: TestA (1.00s)",
		"    --- PASS: TestA/ok (0.10s)",
		"    --- FAIL: TestA/bad (0.20s)",
		"--- PASS: TestB (0.00s)",
	}, "\n")
	got := Failed(out)
	if !strings.Contains(got, "the reason") || strings.Contains(got, "fine") || strings.Contains(got, "b passes") {
		t.Errorf("Failed:\n%s", got)
	}
}

func TestFailedWithoutAName(t *testing.T) {
	out := "=== RUN   TestA\npanic: boom\nFAIL\tx\t0.1s\n"
	if got := Failed(out); got != out {
		t.Errorf("a panic: want the whole output, got:\n%s", got)
	}
}
