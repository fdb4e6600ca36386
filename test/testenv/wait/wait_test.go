package wait_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/podiumhq/podium/test/testenv/wait"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	wait.For(t, time.Minute, "three increments", func() bool { return n.Load() == 3 })
}

func TestRecvAndClosed(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 7
	if got := wait.Recv(t, time.Minute, "the value", ch); got != 7 {
		t.Fatalf("Recv = %d, want 7", got)
	}
	done := make(chan struct{})
	close(done)
	wait.Closed(t, time.Minute, "done", done)
}

// A condition that takes a while is asked less and less often: about ten
// times over a second, not a hundred. (Under load there are only fewer
// checks, so the bound cannot fail for a slow machine.)
func TestForBacksOffWhileTheConditionTakesItsTime(t *testing.T) {
	start := time.Now()
	var checks int
	wait.For(t, time.Minute, "a second to pass", func() bool {
		checks++
		return time.Since(start) >= time.Second
	})
	if most := 2 + int(time.Second/wait.MaxPoll) + 6; checks > most {
		t.Errorf("For checked its condition %d times in a second, want at most %d", checks, most)
	}
}
