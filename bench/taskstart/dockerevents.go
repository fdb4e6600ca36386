package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// dockerEvent is one line of `docker events --format '{{json .}}'`.
type dockerEvent struct {
	Type   string `json:"Type"`
	Action string `json:"Action"`
	Actor  struct {
		ID         string            `json:"ID"`
		Attributes map[string]string `json:"Attributes"`
	} `json:"Actor"`
	TimeNano int64 `json:"timeNano"`
}

// name is what the event is about: a container's or network's name, or a
// volume's (a volume's ID is its name).
func (e dockerEvent) name() string {
	if e.Type == "volume" {
		return e.Actor.ID
	}
	return e.Actor.Attributes["name"]
}

// dockerWatch records the engine's events while the runs go on. The engine
// keeps only its last 256 events for `--since`, fewer than a run of the
// benchmark makes, so they are followed live instead.
type dockerWatch struct {
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once

	mu     sync.Mutex
	events []dockerEvent
	bad    int // lines that did not parse
}

func watchDocker() (*dockerWatch, error) {
	cmd := exec.Command("docker", "events", "--format", "{{json .}}")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("docker events: %w", err)
	}
	w := &dockerWatch{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev dockerEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				w.mu.Lock()
				w.bad++
				w.mu.Unlock()
				continue
			}
			w.mu.Lock()
			w.events = append(w.events, ev)
			w.mu.Unlock()
		}
	}()
	return w, nil
}

// stop ends the watch. The last events may still be on their way when a run
// ends, so it lingers briefly first.
func (w *dockerWatch) stop() {
	w.once.Do(func() {
		time.Sleep(200 * time.Millisecond)
		_ = w.cmd.Process.Kill()
		<-w.done
		_ = w.cmd.Wait()
	})
}

func (e dockerEvent) time() time.Time { return time.Unix(0, e.TimeNano) }

// find returns the first event that matches, from a second before since
// (the slack allows for the engine stamping an event before the call that
// caused it returned).
func (w *dockerWatch) find(since time.Time, match func(dockerEvent) bool) (dockerEvent, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.events {
		if match(ev) && !ev.time().Before(since.Add(-time.Second)) {
			return ev, true
		}
	}
	return dockerEvent{}, false
}

// about matches the events of a type and action about the named object.
func about(typ, action, name string) func(dockerEvent) bool {
	return func(ev dockerEvent) bool { return ev.Type == typ && ev.Action == action && ev.name() == name }
}

// waitFor gives the watch up to d to have seen a matching event, for a run
// that has just ended: the engine sends its events asynchronously.
func (w *dockerWatch) waitFor(since time.Time, d time.Duration, match func(dockerEvent) bool) (dockerEvent, bool) {
	deadline := time.Now().Add(d)
	for {
		if ev, ok := w.find(since, match); ok {
			return ev, true
		}
		if time.Now().After(deadline) {
			return dockerEvent{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wait is waitFor's time of the event of a type and action about the named
// object.
func (w *dockerWatch) wait(typ, action, name string, since time.Time, d time.Duration) (time.Time, bool) {
	ev, ok := w.waitFor(since, d, about(typ, action, name))
	return ev.time(), ok
}
