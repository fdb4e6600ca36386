// Package attempt names one attempt of one task on this node, the unit the
// executor runs, the spool files and the session numbers events for. The
// three keep their own state about an attempt and hand it to one another by
// this key, so they must agree on what it is, on the file name it is stored
// under and on which event ends it; that is why those live here once, and
// not in each of them.
//
// It is also the contract between the executor (which runs attempts in
// Docker) and the session (which reports them to the coordinator): the
// events a run emits (Emit), how far it has got (Cursor), the errors a caller
// branches on (ErrAlreadyRunning, ErrNotRunning) and the one way an
// assignment is logged (RedactAssign). The executor and the session are
// siblings that import this package and not each other; package agent wires
// them together. This package imports no other part of the agent but runlog,
// whose positions a Cursor holds.
package attempt

import (
	"fmt"
	"strconv"
	"strings"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// Key names one attempt of one task. Two attempts of the same task can be on
// one node at once, briefly: the old one is being torn down while the new one
// starts.
type Key struct {
	TaskID  string
	Attempt int32
}

func (k Key) String() string { return k.TaskID + "/" + strconv.Itoa(int(k.Attempt)) }

// Of is the key of a message that names a task attempt: an assignment, an
// event, an acknowledgement.
func Of(m interface {
	GetTaskId() string
	GetAttempt() int32
}) Key {
	return Key{TaskID: m.GetTaskId(), Attempt: m.GetAttempt()}
}

// FileName is k as a name in a directory, "<task>-<attempt>". Task ids are
// ULID-based and safe as they are; any other byte is escaped as %XX, so no
// id, whatever a coordinator sends, can make a name that reaches outside the
// directory ("..", "/"). ParseFileName reverses it.
func FileName(k Key) string {
	var b strings.Builder
	for i := 0; i < len(k.TaskID); i++ {
		c := k.TaskID[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String() + "-" + strconv.Itoa(int(k.Attempt))
}

// ParseFileName is the key FileName made name from; false for a name it
// cannot have made.
func ParseFileName(name string) (Key, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return Key{}, false
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return Key{}, false
	}
	var b strings.Builder
	s := name[:i]
	for j := 0; j < len(s); j++ {
		if s[j] == '%' && j+2 < len(s) {
			v, err := strconv.ParseUint(s[j+1:j+3], 16, 8)
			if err != nil {
				return Key{}, false
			}
			b.WriteByte(byte(v))
			j += 2
			continue
		}
		b.WriteByte(s[j])
	}
	return Key{TaskID: b.String(), Attempt: int32(n)}, true
}

// IsFinal says whether an event ends the attempt on this node (final): a
// terminal status, or the QUEUED status a node sends back for an assignment
// it rejects. ended is true only for the terminal statuses: a rejected
// attempt never ran, and may be assigned here again. An event that is not a
// status change is neither.
func IsFinal(ev *podiumv1.TaskEvent) (final, ended bool) {
	switch ev.GetStatus().GetState() {
	case podiumv1.TaskState_TASK_STATE_SUCCEEDED, podiumv1.TaskState_TASK_STATE_FAILED,
		podiumv1.TaskState_TASK_STATE_CANCELLED, podiumv1.TaskState_TASK_STATE_LOST:
		return true, true
	case podiumv1.TaskState_TASK_STATE_QUEUED:
		return true, false
	}
	return false, false
}
