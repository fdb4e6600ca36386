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
}

type specResources struct {
	CPU      float64            `yaml:"cpu"`
	MemoryMB wholeNumber[int64] `yaml:"memory_mb"`
	Pids     wholeNumber[int64] `yaml:"pids"`
}

// specDuration reads a Go duration string into whole seconds.
type specDuration struct{ seconds int64 }

// UnmarshalYAML returns a *yaml.TypeError so that the decoder collects the
// problem with the others (and Parse can name the key) instead of stopping.
func (d *specDuration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a duration such as \"90s\" or \"10m\", got %s", n.Line, kindWord(n))}}
	}
	if n.Tag == "!!null" {
		d.seconds = 0
		return nil
	}
	s, err := ParseSeconds(n.Value)
	if err != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: %v", n.Line, err)}}
	}
	d.seconds = s
	return nil
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
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want a whole number, got %s", n.Line, kindWord(n))}}
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
	spec := &podiumv1.TaskSpec{
		Image:              f.Image,
		Command:            f.Command,
		Env:                f.Env,
		WorkingDir:         f.WorkingDir,
		Labels:             f.Labels,
		TimeoutSeconds:     f.Timeout.seconds,
		Priority:           f.Priority.v,
		MaxAttempts:        f.MaxAttempts.v,
		RetryOnNodeLoss:    f.RetryOnNodeLoss,
		CancelGraceSeconds: f.CancelGrace.seconds,
	}
	if f.Resources != nil {
		spec.Resources = &podiumv1.Resources{Cpu: f.Resources.CPU, MemoryMb: f.Resources.MemoryMB.v, Pids: f.Resources.Pids.v}
	}
	return spec, nil
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
		return fmt.Errorf("task spec: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	paths := keyLines(data)
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		msgs = append(msgs, explainEntry(e, paths))
	}
	if len(msgs) == 1 {
		return errors.New("task spec: " + msgs[0])
	}
	return fmt.Errorf("task spec has %d problems:\n  %s", len(msgs), strings.Join(msgs, "\n  "))
}

func explainEntry(e string, paths map[int]string) string {
	m := entryRE.FindStringSubmatch(e)
	if m == nil {
		return e
	}
	line, _ := strconv.Atoi(m[1])
	rest := m[2]
	prefix := "line " + m[1] + ": "
	if u := unknownRE.FindStringSubmatch(rest); u != nil {
		section, known := sectionOf(u[2])
		key := u[1]
		if section != "" {
			key = section + "." + key
		}
		msg := fmt.Sprintf("%sunknown key %q", prefix, key)
		if s := closest(u[1], known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		where := "a task spec"
		if section != "" {
			where = section
		}
		return msg + fmt.Sprintf(": %s takes %s", where, strings.Join(known, ", "))
	}
	if d := dupRE.FindStringSubmatch(rest); d != nil {
		return fmt.Sprintf("%skey %q appears again (first at line %s): give each key once", prefix, d[1], d[2])
	}
	path := paths[line]
	if mm := mismatchRE.FindStringSubmatch(rest); mm != nil {
		got := gotWord(mm[1], mm[2])
		if mm[3] == reflect.TypeFor[specFile]().String() {
			return fmt.Sprintf("%sa task spec is a YAML mapping (key: value lines such as \"image: alpine:3\"), got %s", prefix, got)
		}
		msg := fmt.Sprintf("want %s, got %s", wantWord(mm[3]), got)
		if path == "command" {
			msg += `: write the command as a list, e.g. [sh, -c, 'echo hi']`
		}
		rest = msg
	}
	if path != "" {
		return prefix + path + ": " + rest
	}
	return prefix + rest
}

// sectionOf maps a Go type named in a yaml.v3 error back to where it sits in
// the file and the keys it takes.
func sectionOf(typeName string) (section string, known []string) {
	for _, s := range []struct {
		name string
		t    reflect.Type
	}{
		{"", reflect.TypeFor[specFile]()},
		{"resources", reflect.TypeFor[specResources]()},
	} {
		if s.t.String() == typeName {
			return s.name, yamlKeys(s.t)
		}
	}
	return "", nil
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
	case reflect.TypeFor[specResources]().String():
		return "a mapping with " + strings.Join(yamlKeys(reflect.TypeFor[specResources]()), ", ")
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

// keyLines maps each line of the file to the key (as a dotted path) that
// starts on it, so that a type error reported by line can name its key. The
// first key on a line wins; that is the outermost one.
func keyLines(data []byte) map[int]string {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return nil
	}
	paths := map[int]string{}
	record := func(line int, path string) {
		if _, ok := paths[line]; !ok && path != "" {
			paths[line] = path
		}
	}
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
				record(n.Content[i].Line, p)
				// A key inside a nested mapping claims its own line before
				// the mapping does ("  cpu: abc" is resources.cpu), but
				// the items of a list are reported as the list's key: an
				// error there is almost always that a list was given
				// where something else was wanted.
				v := n.Content[i+1]
				if v.Kind == yaml.MappingNode {
					walk(v, p)
					record(v.Line, p)
				} else {
					record(v.Line, p)
					walk(v, p)
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				p := fmt.Sprintf("%s[%d]", path, i)
				record(c.Line, p)
				walk(c, p)
			}
		}
	}
	walk(&root, "")
	return paths
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
