package taskspec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/distribution/reference"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The limits of a spec. A team shares the coordinator and its nodes, and every
// task's spec is read back whole by every "podium tasks", stored in Postgres
// and carried to a node in its assignment: one spec of a hundred megabytes
// made every listing take 15 s and 400 MB in the CLI. Each limit sits far above
// what a real task needs, so that only a mistake or an attack meets it, and
// each is checked here so that the CLI (which refuses before sending) and the
// coordinator (which refuses what any client sends) give the same answer.
const (
	// MaxSpecBytes bounds a whole spec, as protobuf encodes it (the form it
	// is sent, stored and assigned in). Everything below fits in it many
	// times over except env, whose entries could otherwise add up to 8 MiB,
	// far past what the kernel lets a process start with.
	MaxSpecBytes = 256 << 10
	// MaxEnv bounds the entries of one env mapping (the task's, or one
	// sidecar's).
	MaxEnv = 256
	// MaxEnvKeyBytes and MaxEnvValueBytes bound one environment variable.
	MaxEnvKeyBytes   = 256
	MaxEnvValueBytes = 32 << 10
	// MaxLabels bounds a spec's labels; MaxLabelBytes one label, the same
	// bound enrollment puts on a node's labels (a longer one could never
	// match a node).
	MaxLabels     = 64
	MaxLabelBytes = 128
	// MaxNameBytes bounds a task's name (spec.name), as long as a label.
	MaxNameBytes = 128
	// MaxSidecars bounds a spec's sidecars: each is a container started,
	// probed and stopped on the task's node.
	MaxSidecars = 8
	// MaxCommandBytes bounds one command (the task's, a sidecar's, a
	// readiness check's), its arguments' bytes added up.
	MaxCommandBytes = 64 << 10
	// MaxArgBytes is the longest single argument the kernel lets a process
	// start with: MAX_ARG_STRLEN (32 pages, 131072 bytes) less the
	// terminating NUL. A longer one makes execve fail inside the container,
	// where it looks like the task's own "exit code 1". MaxCommandBytes is
	// below it today; the check stays so that raising that cannot bring the
	// failure back.
	MaxArgBytes = 32*4096 - 1
	// MaxWorkingDirBytes is PATH_MAX less its NUL.
	MaxWorkingDirBytes = 4095
	// MaxDuration bounds timeout, cancel_grace and a readiness timeout: a
	// year. The API carries seconds in an int64, and the node turns them
	// into a time.Duration (nanoseconds, in an int64 too); unbounded, a
	// timeout of 10^10 s wrapped around to a tenth of a second and killed
	// the task at once.
	MaxDuration        = 365 * 24 * time.Hour
	MaxDurationSeconds = int64(MaxDuration / time.Second)
	// MaxCPU, MaxMemoryMB and MaxPids bound resources where the numbers
	// would otherwise overflow on the node (cores become nanoseconds of CPU,
	// MiB become bytes, summed over the task and its sidecars) or exceed
	// what the kernel can give (PID_MAX_LIMIT). A node refuses anything over
	// its own, smaller, maxima when the task is placed.
	MaxCPU      = 1 << 16
	MaxMemoryMB = 1 << 30
	MaxPids     = 1 << 22
	// MaxCancelReasonBytes bounds the reason given when cancelling a task:
	// it is stored with the task, shown in its log and sent to its node.
	MaxCancelReasonBytes = 1 << 10
)

// Seconds turns seconds as a spec gives them into a time.Duration, clamped to
// [0, MaxDuration], so that a node never multiplies an unchecked number into
// a duration that overflows: a spec stored before the bound existed, or sent
// by a coordinator that does not check it, gets at most MaxDuration.
func Seconds(s int64) time.Duration {
	return time.Duration(min(max(s, 0), MaxDurationSeconds)) * time.Second
}

// CheckCancelReason refuses a cancel reason longer than MaxCancelReasonBytes
// or not valid UTF-8; field names it in the error (the API's "reason", the
// CLI's "--reason").
func CheckCancelReason(field, reason string) error {
	if len(reason) > MaxCancelReasonBytes {
		return fieldErr(field, "is %d bytes, more than %d: say why in a sentence", len(reason), MaxCancelReasonBytes)
	}
	if !utf8.ValidString(reason) {
		return fieldErr(field, "is not valid UTF-8")
	}
	return nil
}

// checkSize refuses a spec whose encoding is larger than MaxSpecBytes. It
// runs first, so that nothing else walks a spec of unbounded size.
func checkSize(spec proto.Message) error {
	if n := proto.Size(spec); n > MaxSpecBytes {
		return fieldErr("spec", "is %d bytes encoded, more than %d: a spec describes a task, it does not carry its data "+
			"(pass large input as a file in the image or fetch it from the task)", n, MaxSpecBytes)
	}
	return nil
}

// checkStrings walks every string of msg (field, list item, map key and
// value, in nested messages too) and refuses one that is not valid UTF-8,
// and any field the program does not know. Protobuf refuses both when it
// decodes a request, so on the API they only reach here in a spec built in
// memory: the CLI's, from its flags, whose error would otherwise be an
// "internal" failure to encode the request. Unknown fields are refused rather
// than stored and ignored: a client newer than the coordinator asking for,
// say, a non-root user must hear that its request was not understood.
func checkStrings(path string, m protoreflect.Message) error {
	if unknown := m.GetUnknown(); len(unknown) > 0 {
		return fieldErr(path, "has field %s, which this coordinator does not know: "+
			"is the client newer than the coordinator? Upgrade the coordinator or leave the field out", unknownNumbers(unknown))
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		f := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				kf := fmt.Sprintf("%s[%s]", f, clip(k.String()))
				if fd.MapKey().Kind() == protoreflect.StringKind && !utf8.ValidString(k.String()) {
					err = fieldErr(kf, "the name is not valid UTF-8")
					return false
				}
				err = checkValue(kf, fd.MapValue(), mv)
				return err == nil
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if err = checkValue(fmt.Sprintf("%s[%d]", f, i), fd, l.Get(i)); err != nil {
					break
				}
			}
		default:
			err = checkValue(f, fd, v)
		}
		return err == nil
	})
	return err
}

func checkValue(field string, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if !utf8.ValidString(v.String()) {
			return fieldErr(field, "is not valid UTF-8: give text")
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkStrings(field, v.Message())
	}
	return nil
}

// unknownNumbers lists the field numbers in raw protobuf fields ("18, 19").
func unknownNumbers(b []byte) string {
	var nums []string
	for len(b) > 0 {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			break
		}
		nums = append(nums, strconv.Itoa(int(num)))
		b = b[n:]
	}
	if len(nums) == 0 {
		return "(unreadable)"
	}
	return "number " + strings.Join(nums, ", ")
}

// checkImage refuses what is not a Docker image reference, as Docker itself
// reads one ("alpine:3", "registry.example.com:5000/team/app@sha256:…").
// Without it "BusyBox:Latest" or "--help" was stored, assigned, and failed
// on the node with a misleading "is the Docker engine running?".
func checkImage(field, image string) error {
	if strings.IndexFunc(image, isSpaceOrControl) >= 0 {
		return fieldErr(field, "%s contains a space or control character: an image reference is one word, e.g. alpine:3", clip(image))
	}
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		// reference's own words ("invalid reference format: repository
		// name (library/BusyBox) must be lowercase") say what is wrong.
		return fieldErr(field, "%s is not an image reference (%v): write one as docker pull takes it, e.g. alpine:3 or registry.example.com/team/app:1.2",
			clip(image), err)
	}
	return nil
}

// checkCommand bounds a command: NUL-free arguments, each within what the
// kernel lets a process start with, MaxCommandBytes in all.
func checkCommand(field string, command []string) error {
	total := 0
	for i, arg := range command {
		if strings.IndexByte(arg, 0) >= 0 {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "contains a NUL byte, which no process argument can hold")
		}
		if len(arg) > MaxArgBytes {
			return fieldErr(fmt.Sprintf("%s[%d]", field, i), "is %d bytes: the kernel refuses to start a process with an argument over %d bytes "+
				"(MAX_ARG_STRLEN); pass large input in a file instead", len(arg), MaxArgBytes)
		}
		total += len(arg)
	}
	if total > MaxCommandBytes {
		return fieldErr(field, "is %d bytes in all, more than %d: put a long script in a file in the image, or fetch it from the task", total, MaxCommandBytes)
	}
	return nil
}

// checkDuration bounds one of the spec's durations, given in seconds.
func checkDuration(field string, seconds int64, zero string) error {
	if seconds < 0 {
		return fieldErr(field, "%d is negative: give 0 (%s) or a number of seconds", seconds, zero)
	}
	if seconds > MaxDurationSeconds {
		return fieldErr(field, "%d is more than %d (%s, a year): give a shorter time, or 0 (%s)", seconds, MaxDurationSeconds, MaxDuration, zero)
	}
	return nil
}

// clip quotes s for an error message, cut short: a message quoting a value of
// a quarter of a megabyte would be a problem of its own.
func clip(s string) string {
	const keep = 64
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:cut]), len(s))
}
