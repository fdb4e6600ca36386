package agent

import (
	"sync"
	"time"
)

// condition is since when something that keeps the node from taking new
// tasks has held (its data disk below its floor, its Docker engine not
// answering): zero while it does not. The node reports it with every
// heartbeat, so the scheduler places nothing there meanwhile, and refuses
// the assignments that come anyway.
type condition struct {
	mu sync.Mutex
	at time.Time
}

// since is since when the condition has held, zero while it does not.
func (c *condition) since() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

// update records whether the condition holds now. It returns since when it
// has held (zero while it does not) and, for the caller's log, whether this
// call began it or, when this call ended it, how long it had lasted.
func (c *condition) update(holds bool) (since time.Time, began bool, lasted time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case holds && c.at.IsZero():
		c.at, began = time.Now(), true
	case !holds && !c.at.IsZero():
		lasted = max(time.Since(c.at), time.Nanosecond)
		c.at = time.Time{}
	}
	return c.at, began, lasted
}
