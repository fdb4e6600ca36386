package dispatch

import (
	"cmp"
	"slices"
	"time"
)

// Queued is a queued task as the dispatch order sees it.
type Queued struct {
	ID string
	// Sharer is who the task shares slots as under fair share: its spec's
	// group when it names one, its submitter otherwise (podium.tasks.sharer).
	// A group and a user of the same name are different sharers.
	Sharer    string
	Priority  int32
	CreatedAt time.Time
}

// Sharer is what fair share weighs of one sharer.
type Sharer struct {
	// Running is how many of the sharer's tasks hold a slot (scheduled,
	// provisioning or running).
	Running int64
	// Weight is the sharer's weight: the submitter's in podium.users, or
	// the group's in podium.group_weights; below 1 (no row) it counts as 1.
	Weight int32
}

// Order is the order a dispatch pass offers queued tasks in with fair share
// on (the default), and the policy the store's claim executes in SQL
// (store.DispatchPass): a pass claims its batch from the front of it.
//
// Priority wins first. Among tasks of equal priority the order is fair share
// between sharers, weighted fair queuing in its stride form: a sharer's k-th
// queued task of that priority, oldest first, is offered at the virtual time
// (running + k) / weight. Bob's first task after Alice's sweep of 1,000
// comes before Alice's next one once she holds a slot, and two busy sharers
// alternate, each keeping about half the slots, or twice as many for a
// weight of 2. Ties go to the oldest task, then the lowest id, so one
// sharer's queue is still first come, first served.
//
// A sharer missing from sharers holds no slot and weighs 1. tasks is not
// changed; the order is returned in a new slice.
func Order(tasks []Queued, sharers map[string]Sharer) []Queued {
	type ranked struct {
		Queued
		vt float64
	}
	rs := make([]ranked, len(tasks))
	for i, t := range OrderFIFO(tasks) {
		rs[i].Queued = t
	}
	// In first-come order, each task's k is one more than the tasks of its
	// sharer and priority before it.
	type queue struct {
		sharer   string
		priority int32
	}
	k := make(map[queue]int64)
	for i := range rs {
		q := queue{rs[i].Sharer, rs[i].Priority}
		k[q]++
		s := sharers[rs[i].Sharer]
		rs[i].vt = float64(s.Running+k[q]) / float64(max(s.Weight, 1))
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.vt, b.vt),
			a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	out := make([]Queued, len(rs))
	for i, r := range rs {
		out[i] = r.Queued
	}
	return out
}

// OrderFIFO is the order with fair share off (--fair-share=false,
// store.DispatchPassFIFO): priority, then age, then id, whoever submitted.
// tasks is not changed; the order is returned in a new slice.
func OrderFIFO(tasks []Queued) []Queued {
	out := slices.Clone(tasks)
	slices.SortFunc(out, func(a, b Queued) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}
