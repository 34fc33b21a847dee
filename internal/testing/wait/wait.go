// Package wait polls a condition with a deadline: tests wait for the state they assert instead
// of sleeping for a guessed time. Every helper of the tests that waits goes through here.
package wait

import (
	"testing"
	"time"
)

// Until calls cond until it returns nil or timeout has passed, first after 10 ms and then at
// doubling intervals up to 200 ms. It returns nil, or cond's last error.
func Until(timeout time.Duration, cond func() error) error {
	return poll(timeout, 10*time.Millisecond, 200*time.Millisecond, cond)
}

// Every is Until at a fixed interval, for conditions that are costly to check (a command, a
// request through a tunnel).
func Every(timeout, interval time.Duration, cond func() error) error {
	return poll(timeout, interval, interval, cond)
}

// For fails t when cond does not hold within timeout, naming what was waited for and cond's
// last error.
func For(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Until(timeout, cond); err != nil {
		if what == "" {
			what = "condition"
		}
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

func poll(timeout, interval, max time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
		interval = min(2*interval, max)
	}
}
