package runner

import (
	"runtime"
	"sync"
)

// reservedThreads is how many OS threads the runner makes before it starts
// the command. The Go runtime starts a thread when it needs one and keeps
// idle threads for reuse; past this many it rarely needs another.
const reservedThreads = 12

// reserveThreads makes the runtime create n OS threads now and keep them
// idle for later, while the container's pids limit still has room.
//
// Why: threads count against the container's pids limit like the task's
// processes. A task that forks up to that limit (a fork bomb, a runaway
// build) left the runner unable to create the thread its scheduler asked
// for a moment later, and the Go runtime dies on that ("failed to create new
// OS thread", exit 2): PID 1 gone, no exit record, and the task reported as
// its own "exit code 2" instead of "pids limit". Each goroutine locked to
// its thread at the same time needs a thread of its own; unlocked, they
// return those threads to the runtime's idle list, where the scheduler
// takes them from before it creates any.
//
// It is skipped when the limit is so low that the reservation itself would
// take a good part of it (under 4 × n): such a task has few processes to
// fork, and keeps them.
func reserveThreads(n int, pidsMax int64) {
	if pidsMax > 0 && pidsMax < int64(4*n) {
		return
	}
	var locked, release sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
	done.Wait()
}
