package wait

import (
	"errors"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := Until(time.Minute, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want nil after 3", err, calls)
	}
}

func TestEveryReturnsTheLastErrorAtTheDeadline(t *testing.T) {
	calls := 0
	err := Every(30*time.Millisecond, 5*time.Millisecond, func() error {
		calls++
		return errors.New("still not")
	})
	if err == nil || err.Error() != "still not" {
		t.Fatalf("err %v, want the condition's last error", err)
	}
	if calls < 2 {
		t.Fatalf("%d calls in 30 ms at 5 ms intervals", calls)
	}
}
