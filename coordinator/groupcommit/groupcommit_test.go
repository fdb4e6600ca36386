package groupcommit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/podiumhq/podium/test/testenv/wait"
)

// Requests that arrive while a batch is being written go together into the
// next one, each caller gets its own result, and nothing waits when idle.
func TestBatchesWhatGathersDuringAWrite(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := New(Config[int, int]{Flush: func(ctx context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-release // hold the first batch so the others gather
		}
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)

	got := make(chan [2]int, 101)
	go func() { r, _ := b.Do(ctx, 0); got <- [2]int{0, r} }()
	wait.For(t, 10*time.Second, "the first batch to be held in its write", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sizes) == 1
	})
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.Do(ctx, i)
			if err != nil {
				t.Error(err)
			}
			got <- [2]int{i, r}
		}()
	}
	wait.For(t, 10*time.Second, "the hundred requests to queue behind it", func() bool { return len(b.queue) == 100 })
	close(release)
	wg.Wait()
	for range 101 {
		p := wait.Recv(t, 10*time.Second, "every caller's result", got)
		if p[1] != p[0]*10 {
			t.Errorf("request %d got %d, want %d", p[0], p[1], p[0]*10)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 100 {
		t.Errorf("batch sizes %v, want [1 100]: the hundred requests that waited should have gone together", sizes)
	}
}

func TestMaxWeightSplitsBatches(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := New(Config[int, int]{MaxWeight: 10, Weight: func(r int) int { return r }, Flush: func(ctx context.Context, reqs []int) ([]int, error) {
		mu.Lock()
		sizes = append(sizes, len(reqs))
		mu.Unlock()
		<-release
		return make([]int, len(reqs)), nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 6 {
		go func() { _, _ = b.Do(ctx, 4) }()
	}
	wait.For(t, 10*time.Second, "the six requests to queue", func() bool { return len(b.queue) == 6 })
	go b.Run(ctx)
	for range 2 {
		select {
		case release <- struct{}{}:
		case <-time.After(10 * time.Second):
			t.Fatal("no batch was written")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// 4+4+4 reaches 10 after three: batches of three, three.
	if len(sizes) != 2 || sizes[0] != 3 || sizes[1] != 3 {
		t.Errorf("batch sizes %v, want [3 3]", sizes)
	}
}

func TestFlushErrorGoesToEveryCallerAndStopIsClear(t *testing.T) {
	boom := errors.New("database is down")
	b := New(Config[int, int]{Flush: func(ctx context.Context, reqs []int) ([]int, error) { return nil, boom }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx); close(done) }()
	if _, err := b.Do(context.Background(), 1); !errors.Is(err, boom) {
		t.Errorf("Do = %v, want the flush's error", err)
	}
	cancel()
	wait.Closed(t, 10*time.Second, "Run to return once its context ended", done)
	if _, err := b.Do(context.Background(), 1); !errors.Is(err, ErrStopped) {
		t.Errorf("Do after Run ended = %v, want ErrStopped", err)
	}
}

// A flush that answers the wrong number of requests is a bug that must not
// hand anyone someone else's result.
func TestShortResultIsAnError(t *testing.T) {
	b := New(Config[int, int]{Flush: func(ctx context.Context, reqs []int) ([]int, error) { return nil, nil }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	if _, err := b.Do(ctx, 1); err == nil {
		t.Error("Do succeeded with no result")
	}
}
