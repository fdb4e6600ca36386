package taskspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// MaxFileBytes bounds what Parse reads. A spec is a few hundred bytes; a
// megabyte is already a mistake (the wrong file), and reading without a bound
// would let one request hold a coordinator's memory.
const MaxFileBytes = 1 << 20

// specFile is the YAML shape of a spec. It mirrors podiumv1.TaskSpec, except
// that durations are written as durations: users think "10m", the API stores
// seconds.
type specFile struct {
	Image           string             `yaml:"image"`
	Name            string             `yaml:"name"`
	Command         []string           `yaml:"command"`
	Env             map[string]string  `yaml:"env"`
	WorkingDir      string             `yaml:"working_dir"`
	Labels          []string           `yaml:"labels"`
	Resources       *specResources     `yaml:"resources"`
	Timeout         specDuration       `yaml:"timeout"`
	Priority        wholeNumber[int32] `yaml:"priority"`
	MaxAttempts     wholeNumber[int32] `yaml:"max_attempts"`
	RetryOnNodeLoss bool               `yaml:"retry_on_node_loss"`
	CancelGrace     specDuration       `yaml:"cancel_grace"`
	Sidecars        []specSidecar      `yaml:"sidecars"`
	Capabilities    []string           `yaml:"capabilities"`
	Artifacts       []string           `yaml:"artifacts"`
	AllowEgress     []string           `yaml:"allow_egress"`
	User            string             `yaml:"user"`
	OutputLimit     specSize           `yaml:"output_limit"`
	Pull            string             `yaml:"pull"`
	Secrets         []specSecret       `yaml:"secrets"`
	Retain          specRetain         `yaml:"retain"`
	QueueTimeout    specDuration       `yaml:"queue_timeout"`
	Retry           *specRetry         `yaml:"retry"`
	Concurrency     *specConcurrency   `yaml:"concurrency"`
	Group           string             `yaml:"group"`
	Notify          []specNotify       `yaml:"notify"`
	// Container options (container.go).
	ReadOnly bool        `yaml:"read_only"`
	ShmSize  specSize    `yaml:"shm_size"`
	Ulimits  specUlimits `yaml:"ulimits"`
	Tmpfs    []specTmpfs `yaml:"tmpfs"`
}

// specRetry is spec.retry: backoffs are durations, as timeout is.
type specRetry struct {
	Attempts    wholeNumber[int32]   `yaml:"attempts"`
	OnExitCodes []wholeNumber[int32] `yaml:"on_exit_codes"`
	OnOOM       bool                 `yaml:"on_oom"`
	Backoff     specDuration         `yaml:"backoff"`
	MaxBackoff  specDuration         `yaml:"max_backoff"`
}

// specConcurrency is spec.concurrency (concurrency.go).
type specConcurrency struct {
	Key        string             `yaml:"key"`
	Limit      wholeNumber[int32] `yaml:"limit"`
	OnConflict string             `yaml:"on_conflict"`
}

// specNotify is one entry of spec.notify (notify.go).
type specNotify struct {
	URL    string   `yaml:"url"`
	Events []string `yaml:"events"`
	Secret string   `yaml:"secret"`
}

// specTmpfs is one tmpfs mount of the task's container.
type specTmpfs struct {
	Path string   `yaml:"path"`
	Size specSize `yaml:"size"`
	Exec bool     `yaml:"exec"`
}

// specSecret names a stored secret and where the task receives it.
type specSecret struct {
	Name string `yaml:"name"`
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

type specSidecar struct {
	Name      string                `yaml:"name"`
	Image     string                `yaml:"image"`
	Command   []string              `yaml:"command"`
	Env       map[string]string     `yaml:"env"`
	Resources *specSidecarResources `yaml:"resources"`
	Readiness *specReadiness        `yaml:"readiness"`
	Pull      string                `yaml:"pull"`
	// Privileged and ShareWorkspace: see container.go.
	Privileged     bool `yaml:"privileged"`
	ShareWorkspace bool `yaml:"share_workspace"`
}

type specReadiness struct {
	TCPPort  wholeNumber[int32] `yaml:"tcp_port"`
	HTTPPath string             `yaml:"http_path"`
	HTTPPort wholeNumber[int32] `yaml:"http_port"`
	Command  []string           `yaml:"command"`
	Timeout  specDuration       `yaml:"timeout"`
}

type specResources struct {
	CPU      float64            `yaml:"cpu"`
	MemoryMB wholeNumber[int64] `yaml:"memory_mb"`
	Pids     wholeNumber[int64] `yaml:"pids"`
	// GPUs, GPUModel and GPUMemoryMB are the task's own GPU request
	// (checkGPUs); a sidecar that sets them is refused.
	GPUs        wholeNumber[int32] `yaml:"gpus"`
	GPUModel    string             `yaml:"gpu_model"`
	GPUMemoryMB wholeNumber[int64] `yaml:"gpu_memory_mb"`
}

// specSidecarResources is a sidecar's resources: the task's without the GPU
// fields, since a sidecar gets no GPU, so a file that asks for one there is
// told it is not a key of a sidecar's resources.
type specSidecarResources struct {
	CPU      float64            `yaml:"cpu"`
	MemoryMB wholeNumber[int64] `yaml:"memory_mb"`
	Pids     wholeNumber[int64] `yaml:"pids"`
}

func (r *specSidecarResources) proto() *podiumv1.Resources {
	if r == nil {
		return nil
	}
	return &podiumv1.Resources{Cpu: r.CPU, MemoryMb: r.MemoryMB.v, Pids: r.Pids.v}
}

// specDuration reads a Go duration string into whole seconds.
type specDuration struct{ seconds int64 }

// UnmarshalYAML returns a *yaml.TypeError so that the decoder collects the
// problem with the others (and Parse can name the key) instead of stopping.
func (d *specDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, "want a duration such as \"90s\" or \"10m\", got %s", kindWord(n))
	}
	if n.Tag == "!!null" {
		d.seconds = 0
		return nil
	}
	s, err := ParseSeconds(n.Value)
	if err != nil {
		return nodeErr(n, "%v", err)
	}
	d.seconds = s
	return nil
}

// specRetain reads a retention ("7d", "1y", "36h"; see ParseRetain) into
// whole seconds.
type specRetain struct{ seconds int64 }

func (r *specRetain) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, "want a duration such as \"7d\" or \"1y\", got %s", kindWord(n))
	}
	if n.Tag == "!!null" {
		r.seconds = 0
		return nil
	}
	s, err := ParseRetain(n.Value)
	if err != nil {
		return nodeErr(n, "%v", err)
	}
	r.seconds = s
	return nil
}

// specSize reads a byte size: a whole number of bytes or a string such as
// "100MiB" (see ParseSize).
type specSize struct{ bytes int64 }

func (z *specSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, "want a size such as \"100MiB\" or a number of bytes, got %s", kindWord(n))
	}
	switch n.Tag {
	case "!!null":
		z.bytes = 0
		return nil
	case "!!int":
		// Negative numbers pass here and are refused by Validate, which
		// names the field as the API does.
		return n.Decode(&z.bytes)
	}
	b, err := ParseSize(n.Value)
	if err != nil {
		return nodeErr(n, "%v", err)
	}
	z.bytes = b
	return nil
}

// specUlimits reads ulimits: a mapping from a limit's name to one value for
// both soft and hard limits ("nofile: 65536", "memlock: unlimited") or to a
// mapping of soft and hard ("core: {soft: 0, hard: unlimited}"). The order
// of the file is kept, so the same file always makes the same spec.
type specUlimits struct{ list []*podiumv1.Ulimit }

func (u *specUlimits) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		u.list = nil
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return nodeErr(n, "want a mapping of limit names to values, e.g. {nofile: 65536, core: 0}, got %s", kindWord(n))
	}
	var errs []string
	// yaml.v3 checks a mapping's keys for repeats only when it decodes
	// the mapping itself; this one is read here, so it is checked here,
	// in the words explain knows.
	firstAt := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if line, dup := firstAt[k.Value]; dup {
			errs = append(errs, fmt.Sprintf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, line))
			continue
		}
		firstAt[k.Value] = k.Line
		ul := &podiumv1.Ulimit{Name: k.Value}
		switch v.Kind {
		case yaml.ScalarNode:
			x, err := ulimitValue(v)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			ul.Soft, ul.Hard = x, x
		case yaml.MappingNode:
			var gotSoft, gotHard bool
			for j := 0; j+1 < len(v.Content); j += 2 {
				kk, vv := v.Content[j], v.Content[j+1]
				x, err := ulimitValue(vv)
				switch {
				case kk.Value != "soft" && kk.Value != "hard":
					errs = append(errs, fmt.Sprintf("line %d: column %d: unknown key %q: a ulimit takes soft and hard", kk.Line, kk.Column, kk.Value))
				case err != nil:
					errs = append(errs, err.Error())
				case kk.Value == "soft":
					ul.Soft, gotSoft = x, true
				default:
					ul.Hard, gotHard = x, true
				}
			}
			if !gotSoft || !gotHard {
				errs = append(errs, fmt.Sprintf("line %d: column %d: give both soft and hard, or one value for both (%s: 1024)", v.Line, v.Column, k.Value))
			}
		default:
			errs = append(errs, fmt.Sprintf("line %d: column %d: want a number, unlimited, or {soft: N, hard: N}, got %s", v.Line, v.Column, kindWord(v)))
		}
		u.list = append(u.list, ul)
	}
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	return nil
}

// ulimitValue reads one ulimit value: a whole number or "unlimited".
func ulimitValue(n *yaml.Node) (int64, error) {
	if n.Kind == yaml.ScalarNode {
		switch {
		case n.Tag == "!!int":
			var x int64
			if err := n.Decode(&x); err == nil {
				return x, nil
			}
		case n.Value == "unlimited":
			return Unlimited, nil
		}
	}
	got := kindWord(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		got = "nothing"
	}
	return 0, fmt.Errorf("line %d: column %d: want a whole number or unlimited, got %s", n.Line, n.Column, got)
}

// nodeErr reports a value that cannot be decoded the way yaml.v3 reports its
// own (a *yaml.TypeError starting "line N: "), adding the column so that
// explain can tell which of several values on one line it is about.
func nodeErr(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: %s", n.Line, n.Column, fmt.Sprintf(format, args...))}}
}

// wholeNumber refuses a fraction where an integer belongs. yaml.v3 on its own
// truncates "memory_mb: 1.5" to 1, quietly running the task under a limit
// nobody wrote.
type wholeNumber[T int32 | int64] struct{ v T }

func (w *wholeNumber[T]) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		w.v = 0
		return nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return nodeErr(n, "want a whole number, got %s", kindWord(n))
	}
	// Decoding into T itself reports overflow ("... into int32").
	return n.Decode(&w.v)
}

// ParseSeconds reads a Go duration string ("90s", "10m", "1h30m") as a whole,
// non-negative number of seconds, the unit the API stores. A bare number
// without a unit is refused, not taken as seconds (see the package doc), and so
// is a fraction of a second: the API cannot hold it, and rounding "500ms" down
// would turn a timeout into "no timeout". "0" is accepted and means none.
func ParseSeconds(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil && s != "0" {
		return 0, fmt.Errorf("%q has no unit: write e.g. \"%ss\" for seconds or \"%sm\" for minutes", s, s, s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write e.g. \"90s\", \"10m\" or \"1h30m\"", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative: give 0 (none) or a positive duration", s)
	}
	if d > MaxDuration {
		return 0, fmt.Errorf("%q is longer than %s (a year), the longest a spec may give", s, MaxDuration)
	}
	if d%time.Second != 0 {
		return 0, fmt.Errorf("%q is not a whole number of seconds: round it, e.g. %q", s, ((d + time.Second - 1) / time.Second * time.Second).String())
	}
	return int64(d / time.Second), nil
}

// Parse reads one YAML task spec (see the package doc for the format). It
// rejects unknown keys, values of the wrong type, duplicate keys, more than one
// document and files over MaxFileBytes, naming the line of each problem. It
// does not call Validate: a file may leave out what the caller fills in later
// (the CLI's --image), so the caller validates the spec it finally has.
func Parse(r io.Reader) (*podiumv1.TaskSpec, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read task spec: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("task spec is larger than %d bytes: is this the right file?", MaxFileBytes)
	}
	// Parsing into nodes first costs time linear in the file, and lets the
	// mappings be counted before yaml.v3's decoder checks each key of a
	// mapping against every other for duplicates, which is quadratic: a
	// 900 KB file with 100,000 env keys took almost a minute.
	var root yaml.Node
	parsed := yaml.Unmarshal(data, &root) == nil
	if parsed {
		if err := checkMappingSizes(&root); err != nil {
			return nil, err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f specFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("task spec is empty: it needs at least an image, e.g. \"image: alpine:3\"")
		}
		return nil, explain(data, err)
	}
	var rest yaml.Node
	if err := dec.Decode(&rest); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("task spec: line %d: a second YAML document starts here: put one task in each file", docLine(&rest, err))
	}
	if parsed {
		if err := emptyItems(&root); err != nil {
			return nil, err
		}
	}
	spec := &podiumv1.TaskSpec{
		Name:                f.Name,
		Image:               f.Image,
		Command:             f.Command,
		Env:                 f.Env,
		WorkingDir:          f.WorkingDir,
		Labels:              f.Labels,
		TimeoutSeconds:      f.Timeout.seconds,
		Priority:            f.Priority.v,
		MaxAttempts:         f.MaxAttempts.v,
		RetryOnNodeLoss:     f.RetryOnNodeLoss,
		CancelGraceSeconds:  f.CancelGrace.seconds,
		OutputLimitBytes:    f.OutputLimit.bytes,
		RetainSeconds:       f.Retain.seconds,
		QueueTimeoutSeconds: f.QueueTimeout.seconds,
		Group:               f.Group,
		ReadOnly:            f.ReadOnly,
		ShmSizeBytes:        f.ShmSize.bytes,
		Ulimits:             f.Ulimits.list,
	}
	for _, m := range f.Tmpfs {
		spec.Tmpfs = append(spec.Tmpfs, &podiumv1.TmpfsMount{Path: m.Path, SizeBytes: m.Size.bytes, Exec: m.Exec})
	}
	spec.Resources = f.Resources.proto()
	if rt := f.Retry; rt != nil {
		spec.Retry = &podiumv1.RetryPolicy{Attempts: rt.Attempts.v, OnOom: rt.OnOOM,
			BackoffSeconds: rt.Backoff.seconds, MaxBackoffSeconds: rt.MaxBackoff.seconds}
		for _, c := range rt.OnExitCodes {
			spec.Retry.OnExitCodes = append(spec.Retry.OnExitCodes, c.v)
		}
	}
	if c := f.Concurrency; c != nil {
		spec.Concurrency = &podiumv1.Concurrency{Key: c.Key, Limit: c.Limit.v, OnConflict: c.OnConflict}
	}
	for _, sc := range f.Sidecars {
		p := &podiumv1.Sidecar{
			Name:      sc.Name,
			Image:     sc.Image,
			Command:   sc.Command,
			Env:       sc.Env,
			Resources: sc.Resources.proto(),
			Pull:      sc.Pull,

			Privileged:     sc.Privileged,
			ShareWorkspace: sc.ShareWorkspace,
		}
		if r := sc.Readiness; r != nil {
			p.Readiness = &podiumv1.Readiness{
				TcpPort:        r.TCPPort.v,
				HttpPath:       r.HTTPPath,
				HttpPort:       r.HTTPPort.v,
				Command:        r.Command,
				TimeoutSeconds: r.Timeout.seconds,
			}
		}
		spec.Sidecars = append(spec.Sidecars, p)
	}
	spec.Capabilities = f.Capabilities
	spec.Artifacts = f.Artifacts
	spec.AllowEgress = f.AllowEgress
	spec.User = f.User
	spec.Pull = f.Pull
	for _, sr := range f.Secrets {
		spec.Secrets = append(spec.Secrets, &podiumv1.SecretRef{Name: sr.Name, Env: sr.Env, File: sr.File})
	}
	for _, n := range f.Notify {
		spec.Notify = append(spec.Notify, &podiumv1.Notify{Url: n.URL, Events: n.Events, Secret: n.Secret})
	}
	return spec, nil
}

func (r *specResources) proto() *podiumv1.Resources {
	if r == nil {
		return nil
	}
	return &podiumv1.Resources{Cpu: r.CPU, MemoryMb: r.MemoryMB.v, Pids: r.Pids.v,
		Gpus: r.GPUs.v, GpuModel: r.GPUModel, GpuMemoryMb: r.GPUMemoryMB.v}
}

// maxMappingKeys bounds every mapping of a spec file. The largest a valid
// spec has is an env mapping, of at most MaxEnv entries; the others have a
// dozen keys at most.
const maxMappingKeys = MaxEnv

// checkMappingSizes refuses a mapping with more than maxMappingKeys keys,
// naming it and its line, before the decoder's quadratic duplicate check
// would spend minutes on it. Aliases are not followed: a merged mapping is
// counted where it is written, and Validate counts what the decoder made.
func checkMappingSizes(root *yaml.Node) error {
	var walk func(n *yaml.Node, path string) error
	walk = func(n *yaml.Node, path string) error {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				if err := walk(c, path); err != nil {
					return err
				}
			}
		case yaml.MappingNode:
			if keys := len(n.Content) / 2; keys > maxMappingKeys {
				what := path
				if what == "" {
					what = "the task spec"
				}
				return fmt.Errorf("task spec: line %d: %s has %d keys, more than %d: a spec may set at most %d environment variables (env), "+
					"and every other mapping has a handful of keys", n.Line, what, keys, maxMappingKeys, MaxEnv)
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				if err := walk(n.Content[i+1], p); err != nil {
					return err
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				if c.Kind != yaml.MappingNode && c.Kind != yaml.SequenceNode {
					continue
				}
				if err := walk(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return walk(root, "")
}

// emptyItems refuses an empty (null) item in a list. yaml.v3 drops one
// silently, so "command: [sh, ~, x]" would run "sh x" and a stray "-" under
// sidecars would start one sidecar fewer than the file seems to say.
func emptyItems(root *yaml.Node) error {
	var msgs []string
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := n.Content[i].Value
				if path != "" {
					p = path + "." + p
				}
				walk(n.Content[i+1], p)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Kind == yaml.ScalarNode && c.ShortTag() == "!!null" {
					msgs = append(msgs, fmt.Sprintf("line %d: %s: empty list item: remove it, or quote it (\"null\", \"~\") if you mean the word", c.Line, p))
					continue
				}
				walk(c, p)
			}
		}
	}
	walk(root, "")
	if len(msgs) == 0 {
		return nil
	}
	return problems(msgs)
}

// maxProblems is how many problems one error lists: a file that has
// thousands has one mistake repeated, and the first few show it.
const maxProblems = 20

// problems is the error for the problems found in a spec file.
func problems(msgs []string) error {
	if len(msgs) == 1 {
		return errors.New("task spec: " + msgs[0])
	}
	list := msgs
	if len(list) > maxProblems {
		list = append(list[:maxProblems:maxProblems], fmt.Sprintf("… and %d more", len(msgs)-maxProblems))
	}
	return fmt.Errorf("task spec has %d problems:\n  %s", len(msgs), strings.Join(list, "\n  "))
}

func docLine(n *yaml.Node, err error) int {
	if err == nil && n.Line > 0 {
		return n.Line
	}
	if m := lineRE.FindStringSubmatch(fmt.Sprint(err)); m != nil {
		line, _ := strconv.Atoi(m[1])
		return line
	}
	return 0
}

var (
	lineRE     = regexp.MustCompile(`line (\d+): `)
	entryRE    = regexp.MustCompile(`^line (\d+): (.*)$`)
	columnRE   = regexp.MustCompile(`^column (\d+): (.*)$`)
	unknownRE  = regexp.MustCompile(`^field (.+) not found in type (\S+)$`)
	mismatchRE = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")
	dupRE      = regexp.MustCompile(`^mapping key "(.*)" already defined at line (\d+)$`)
)

// explain turns yaml.v3's messages, written for Go programmers ("cannot
// unmarshal !!str `abc` into float64"), into ones written for the person who
// wrote the file ("line 4: resources.cpu: want a number, got "abc"").
func explain(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		// A syntax error: yaml.v3 already says "yaml: line N: ...".
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if unquotedStar(data, docLine(nil, err)) {
			msg += `: a value that starts with "*" must be quoted, as in ["**/*.xml"] (YAML reads *name as a reference to an anchor)`
		}
		return fmt.Errorf("task spec: %s", msg)
	}
	idx := indexKeys(data)
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		msgs = append(msgs, explainEntry(e, idx))
	}
	return problems(msgs)
}

// unquotedStarRE finds a plain value that starts with "*" on a line: a
// glob such as **/*.xml written without quotes, which YAML takes for an alias
// and reports with a message nobody could act on.
var unquotedStarRE = regexp.MustCompile(`(^\s*-|[\[,:])\s*\*`)

func unquotedStar(data []byte, line int) bool {
	lines := strings.Split(string(data), "\n")
	return line >= 1 && line <= len(lines) && unquotedStarRE.MatchString(lines[line-1])
}

func explainEntry(e string, idx fileIndex) string {
	m := entryRE.FindStringSubmatch(e)
	if m == nil {
		return e
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	prefix := "line " + m[1] + ": "
	if u := unknownRE.FindStringSubmatch(rest); u != nil {
		sec, ok := sectionNamed(u[2])
		if !ok {
			return prefix + rest
		}
		known := yamlKeys(sec.t)
		// Where the key sits, as a path from the top of the file
		// ("sidecars[1].readiness"): found by the key's own line, so that
		// the user is told which sidecar, falling back to the section's
		// name for a key written twice on one line.
		key, where := u[1], sec.describe
		if full, found := idx.keys[lineKey{line, u[1]}]; found {
			key = full
			if parent, _, ok := cutLast(full); ok {
				where = parent
			}
		} else if sec.name != "" {
			key = sec.name + "." + u[1]
			where = sec.name
		}
		msg := fmt.Sprintf("%sunknown key %q", prefix, key)
		if s := closest(u[1], known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return msg + fmt.Sprintf(": %s takes %s", where, strings.Join(known, ", "))
	}
	if d := dupRE.FindStringSubmatch(rest); d != nil {
		return fmt.Sprintf("%skey %q appears again (first at line %s): give each key once", prefix, d[1], d[2])
	}
	path := idx.lines[line]
	if c := columnRE.FindStringSubmatch(rest); c != nil {
		col, _ := strconv.Atoi(c[1])
		if p, ok := idx.at[[2]int{line, col}]; ok {
			path = p
		}
		rest = c[2]
	}
	if mm := mismatchRE.FindStringSubmatch(rest); mm != nil {
		path = idx.pathOf(line, mm[1], mm[3])
		got := gotWord(mm[1], mm[2])
		if mm[3] == reflect.TypeFor[specFile]().String() {
			return fmt.Sprintf("%sa task spec is a YAML mapping (key: value lines such as \"image: alpine:3\"), got %s", prefix, got)
		}
		msg := fmt.Sprintf("want %s, got %s", wantWord(mm[3]), got)
		if mm[3] == "[]string" {
			switch last := lastKey(path); last {
			case "command":
				msg += `: write the command as a list, e.g. [sh, -c, 'echo hi']`
			case "capabilities":
				msg += `: write the capabilities as a list, e.g. [NET_BIND_SERVICE]`
			case "artifacts":
				msg += `: write the patterns as a list, e.g. ["dist/*.tar.gz"]`
			case "allow_egress":
				msg += `: write the ranges as a list, e.g. [10.0.0.0/8]`
			}
		}
		rest = msg
	}
	if path != "" {
		return prefix + path + ": " + rest
	}
	return prefix + rest
}

// section is one mapping of the file format: its Go type (as yaml.v3 names it
// in errors), its usual place in the file, and how to name it when the
// place of a problem cannot be found.
type section struct {
	name, describe string
	t              reflect.Type
}

var sections = []section{
	{"", "a task spec", reflect.TypeFor[specFile]()},
	{"resources", "resources", reflect.TypeFor[specResources]()},
	{"resources", "a sidecar's resources", reflect.TypeFor[specSidecarResources]()},
	{"", "a sidecar", reflect.TypeFor[specSidecar]()},
	{"", "readiness", reflect.TypeFor[specReadiness]()},
	{"", "a secret", reflect.TypeFor[specSecret]()},
	{"retry", "retry", reflect.TypeFor[specRetry]()},
	{"", "a tmpfs", reflect.TypeFor[specTmpfs]()},
	{"concurrency", "concurrency", reflect.TypeFor[specConcurrency]()},
	{"", "a notify entry", reflect.TypeFor[specNotify]()},
}

// sectionNamed maps a Go type named in a yaml.v3 error back to its section.
func sectionNamed(typeName string) (section, bool) {
	for _, s := range sections {
		if s.t.String() == typeName {
			return s, true
		}
	}
	return section{}, false
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	return keys
}

// cutLast splits "sidecars[1].readiness.timeout" into "sidecars[1].readiness"
// and "timeout".
func cutLast(path string) (parent, last string, ok bool) {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

// lastKey is the last key of a path, without a list index:
// "sidecars[0].command[2]" gives "command".
func lastKey(path string) string {
	_, last, _ := cutLast(path)
	if i := strings.IndexByte(last, '['); i >= 0 {
		last = last[:i]
	}
	return last
}

func wantWord(goType string) string {
	switch goType {
	case "string":
		return "a string"
	case "[]string":
		return "a list of strings"
	case "map[string]string":
		return "a mapping of names to values"
	case "float64":
		return "a number"
	case "int32":
		return "a whole number that fits in 32 bits"
	case "int64":
		return "a whole number"
	case "bool":
		return "true or false"
	case "[]" + reflect.TypeFor[wholeNumber[int32]]().String():
		return "a list of whole numbers"
	}
	for _, s := range sections {
		keys := strings.Join(yamlKeys(s.t), ", ")
		switch goType {
		case s.t.String():
			return "a mapping with " + keys
		case "[]" + s.t.String():
			return "a list of mappings, each with " + keys
		}
	}
	return goType
}

func gotWord(tag, value string) string {
	switch tag {
	case "!!seq":
		return "a list"
	case "!!map":
		return "a mapping"
	case "!!str":
		return strconv.Quote(value)
	}
	if value != "" {
		return value
	}
	return tag
}

func kindWord(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	if n.Tag == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// fileIndex says where things are in a spec file, so that an error yaml.v3
// reports by line alone can name its key.
type fileIndex struct {
	// lines maps each line to the key (as a path such as
	// "sidecars[0].resources.cpu") that starts on it. The first key on a
	// line wins; that is the outermost one.
	lines map[int]string
	// keys maps a key written on a line to its full path.
	keys map[lineKey]string
	// values lists the values that start on each line, with the Go type
	// each decodes into, so that a type error ("cannot unmarshal !!seq into
	// string") can be pinned to the one value it is about when a line holds
	// several ("- name: [db]" starts a list of sidecars, a sidecar and a
	// name).
	values map[int][]valueAt
	// at maps the line and column of each value to its path.
	at map[[2]int]string
}

type lineKey struct {
	line int
	key  string
}

type valueAt struct {
	path, tag string
	goType    reflect.Type
}

// pathOf returns the path of the value on line that has the YAML tag and
// decodes into the Go type named, falling back to the key that starts the
// line.
func (idx fileIndex) pathOf(line int, tag, goType string) string {
	for _, v := range idx.values[line] {
		if v.tag == tag && v.goType != nil && v.goType.String() == goType {
			return v.path
		}
	}
	return idx.lines[line]
}

func indexKeys(data []byte) fileIndex {
	idx := fileIndex{lines: map[int]string{}, keys: map[lineKey]string{}, values: map[int][]valueAt{}, at: map[[2]int]string{}}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return idx
	}
	record := func(line int, path string) {
		if _, ok := idx.lines[line]; !ok && path != "" {
			idx.lines[line] = path
		}
	}
	var walk func(n *yaml.Node, path string, t reflect.Type)
	walk = func(n *yaml.Node, path string, t reflect.Type) {
		if n.Kind != yaml.DocumentNode {
			for t != nil && t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			idx.values[n.Line] = append(idx.values[n.Line], valueAt{path, n.ShortTag(), t})
			// The innermost value at a place wins: the one an error
			// from decoding it is about.
			idx.at[[2]int{n.Line, n.Column}] = path
		}
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, path, t)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				p := k.Value
				if path != "" {
					p = path + "." + p
				}
				record(k.Line, p)
				if _, ok := idx.keys[lineKey{k.Line, k.Value}]; !ok {
					idx.keys[lineKey{k.Line, k.Value}] = p
				}
				// A key inside a nested mapping claims its own line before
				// the mapping does ("  cpu: abc" is resources.cpu), and so
				// does the first key of a mapping in a list ("- name: x"
				// is sidecars[0].name), but other items of a list are
				// reported as the list's key: an error there is almost
				// always that a list was given where something else was
				// wanted.
				v := n.Content[i+1]
				vt := fieldType(t, k.Value)
				if v.Kind == yaml.MappingNode || v.Kind == yaml.SequenceNode && len(v.Content) > 0 && v.Content[0].Kind == yaml.MappingNode {
					walk(v, p, vt)
					record(v.Line, p)
				} else {
					record(v.Line, p)
					walk(v, p, vt)
				}
			}
		case yaml.SequenceNode:
			et := elemType(t)
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				if c.Kind == yaml.MappingNode {
					walk(c, p, et)
					record(c.Line, p)
				} else {
					record(c.Line, p)
					walk(c, p, et)
				}
			}
		}
	}
	walk(&root, "", reflect.TypeFor[specFile]())
	return idx
}

// fieldType is the Go type the value of key decodes into within a value of
// type t (a struct or a map), or nil if it has none (an unknown key).
func fieldType(t reflect.Type, key string) reflect.Type {
	if t == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Elem()
	case reflect.Struct:
		for f := range t.Fields() {
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == key {
				return f.Type
			}
		}
	}
	return nil
}

func elemType(t reflect.Type) reflect.Type {
	if t != nil && t.Kind() == reflect.Slice {
		return t.Elem()
	}
	return nil
}

// closest suggests a known key within two edits of a misspelt one.
func closest(key string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
