package wait_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/podiumhq/podium/internal/testenv/wait"
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
