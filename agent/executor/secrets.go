package executor

// The secrets of an attempt on the agent's side: the redactor its output
// passes through before it becomes an event, and, for an attempt a
// restarted agent resumes, the wait for the coordinator to send the values
// again (Adopt.secrets) before any of its output leaves the agent.
//
// The values are held in memory only. The spool stores the assignment
// without them (package spool keeps the names, which is how a resumed run
// knows it has to wait), and the task's runner logs hold the task's raw
// output, secrets and all: they are in the attempt's directory under the
// agent's data directory, which only root reads, and are removed with the
// attempt's directory.

import (
	"context"
	"sort"
	"strings"

	"github.com/podiumhq/podium/agent/redact"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// secretNames are the names of the secrets an assignment carries, sorted.
func secretNames(vs []*podiumv1.SecretValue) []string {
	names := make([]string, 0, len(vs))
	for _, v := range vs {
		names = append(names, v.GetName())
	}
	sort.Strings(names)
	return names
}

func newRedactor(vs []*podiumv1.SecretValue) *redact.Redactor {
	secrets := make([]redact.Secret, 0, len(vs))
	for _, v := range vs {
		secrets = append(secrets, redact.Secret{Name: v.GetName(), Value: v.GetValue()})
	}
	return redact.New(secrets)
}

// initSecrets readies the run's redactor. A started attempt has its
// secrets' values in its assignment. A resumed one has only their names
// (the spool keeps no value): its output is held until Adopted hands the
// values over.
func (r *run) initSecrets(resumed bool) {
	r.secretsReady = make(chan struct{})
	if resumed && len(r.assign.GetSecrets()) > 0 {
		r.log.Info("holding the output of a resumed task until the coordinator sends its secrets again, so that they are redacted",
			"secrets", secretNames(r.assign.GetSecrets()))
		return
	}
	r.redactor = newRedactor(r.assign.GetSecrets())
	close(r.secretsReady)
}

// Adopted hands a resumed attempt the values of its secrets, as the
// coordinator's adoption (Adopt.secrets) sends them, so that its output is
// redacted and let through. A value missing for a secret the attempt has
// cannot be redacted: the attempt's output is then withheld, and a note
// says so. An attempt that is not waiting (it was started by this agent
// process, or already has them) ignores the call.
func (e *Executor) Adopted(taskID string, attempt int32, values []*podiumv1.SecretValue) {
	for _, r := range e.find(taskID, attempt) {
		r.deliverSecrets(values)
	}
}

func (r *run) deliverSecrets(values []*podiumv1.SecretValue) {
	// Most attempts are not waiting (this agent process started them), and
	// must not take emitMu: the session calls this while it handles a
	// HelloAck, and an emitter holding emitMu may be waiting for that very
	// session to make room in its outbox. An attempt that is waiting emits
	// no output until this call, so its emitMu is free but for a moment.
	select {
	case <-r.secretsReady:
		return
	default:
	}
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	select {
	case <-r.secretsReady:
		return
	default:
	}
	have := make(map[string]bool)
	for _, v := range values {
		if len(v.GetValue()) > 0 {
			have[v.GetName()] = true
		}
	}
	var missing []string
	for _, n := range secretNames(r.assign.GetSecrets()) {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		r.withholdLocked("the coordinator did not send the values of its secrets " + strings.Join(missing, ", ") + " again after the agent restarted")
		return
	}
	r.redactor = newRedactor(values)
	r.log.Info("the coordinator sent the secrets of a resumed task again; its output is redacted and let through",
		"secrets", secretNames(values))
	close(r.secretsReady)
}

// withholdLocked gives up on redacting the rest of the attempt's output:
// its output from here on is read and dropped, never sent, and one note says
// why. emitMu must be held and secretsReady open.
func (r *run) withholdLocked(why string) {
	r.withhold.Store(true)
	r.log.Warn("the task's further output is withheld: it may hold secrets this agent cannot redact", "why", why)
	r.emitLocked(&podiumv1.TaskEvent{Body: &podiumv1.TaskEvent_Note{Note: &podiumv1.Note{
		Text: "output withheld: " + why + ", so it could not be redacted",
	}}}, nil)
	close(r.secretsReady)
}

// awaitSecrets waits until the run's output may be read: its redactor is
// ready, or its output is withheld. A cancel before the values came
// withholds the output: the coordinator that cancels an attempt it no
// longer holds does not send them.
func (r *run) awaitSecrets(ctx context.Context) error {
	select {
	case <-r.secretsReady:
		return nil
	default:
	}
	select {
	case <-r.secretsReady:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-r.cancelled:
		r.emitMu.Lock()
		select {
		case <-r.secretsReady:
		default:
			r.withholdLocked("the task was cancelled before the coordinator sent its secrets again")
		}
		r.emitMu.Unlock()
		return nil
	}
}

// redactEventLocked redacts what of an event can quote the task's output:
// a note's text (a sidecar's line, the end of its output) and a status's
// reason. Log chunks are redacted as a stream by the chunker. emitMu must
// be held.
func (r *run) redactEventLocked(ev *podiumv1.TaskEvent) {
	if r.redactor == nil {
		return
	}
	switch b := ev.GetBody().(type) {
	case *podiumv1.TaskEvent_Note:
		b.Note.Text = strings.ToValidUTF8(r.redactor.String(b.Note.GetText()), "\uFFFD")
	case *podiumv1.TaskEvent_Status:
		b.Status.Reason = strings.ToValidUTF8(r.redactor.String(b.Status.GetReason()), "\uFFFD")
	}
}
