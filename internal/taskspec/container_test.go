package taskspec

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
)

// A spec file's container options become the API's fields: sizes in bytes,
// each ulimit in the file's order with "unlimited" as -1, and a sidecar's
// privileged and share_workspace as they are written.
func TestParseContainerOptions(t *testing.T) {
	const file = `image: alpine:3
read_only: true
shm_size: 1GiB
ulimits:
  nofile: 65536
  memlock: unlimited
  core: {soft: 0, hard: unlimited}
  nproc:
    soft: 100
    hard: 200
tmpfs:
  - path: /cache
    size: 512MiB
    exec: true
  - path: /var/run
sidecars:
  - name: docker
    image: docker:dind
    privileged: true
    share_workspace: true
`
	spec, err := Parse(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	want := &podiumv1.TaskSpec{
		Image:        "alpine:3",
		ReadOnly:     true,
		ShmSizeBytes: 1 << 30,
		Ulimits: []*podiumv1.Ulimit{
			{Name: "nofile", Soft: 65536, Hard: 65536},
			{Name: "memlock", Soft: Unlimited, Hard: Unlimited},
			{Name: "core", Soft: 0, Hard: Unlimited},
			{Name: "nproc", Soft: 100, Hard: 200},
		},
		Tmpfs: []*podiumv1.TmpfsMount{
			{Path: "/cache", SizeBytes: 512 << 20, Exec: true},
			{Path: "/var/run"},
		},
		Sidecars: []*podiumv1.Sidecar{{Name: "docker", Image: "docker:dind", Privileged: true, ShareWorkspace: true}},
	}
	if !proto.Equal(spec, want) {
		t.Fatalf("Parse gave\n%v\nwant\n%v", spec, want)
	}
	if err := Validate(spec); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if !HasPrivilegedSidecar(spec) {
		t.Error("HasPrivilegedSidecar says no for a spec with a privileged sidecar")
	}
	if HasPrivilegedSidecar(&podiumv1.TaskSpec{Sidecars: []*podiumv1.Sidecar{{Name: "db", ShareWorkspace: true}}}) {
		t.Error("HasPrivilegedSidecar says yes for a spec without one")
	}
}

// A container option written wrong in a file is refused with its line and
// key, and what to write instead.
func TestParseRejectsContainerOptions(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"ulimits as a list", "image: a\nulimits: [nofile=1024]\n",
			[]string{"line 2", "ulimits", "want a mapping of limit names to values", "{nofile: 65536, core: 0}"}},
		{"a ulimit that is a word", "image: a\nulimits:\n  nofile: lots\n",
			[]string{"line 3", "ulimits.nofile", `want a whole number or unlimited, got "lots"`}},
		{"a ulimit that is a fraction", "image: a\nulimits:\n  nofile: 1.5\n",
			[]string{"line 3", "want a whole number or unlimited, got 1.5"}},
		{"a ulimit left empty", "image: a\nulimits:\n  nofile:\n",
			[]string{"line 3", "want a whole number or unlimited, got nothing"}},
		{"a ulimit with soft alone", "image: a\nulimits:\n  nofile: {soft: 10}\n",
			[]string{"line 3", "give both soft and hard, or one value for both (nofile: 1024)"}},
		{"a ulimit key misspelt", "image: a\nulimits:\n  nofile: {soft: 10, hrad: 20}\n",
			[]string{"line 3", `unknown key "hrad": a ulimit takes soft and hard`}},
		{"a ulimit given twice", "image: a\nulimits:\n  nofile: 1\n  nofile: 2\n",
			[]string{"line 4", `key "nofile" appears again (first at line 3)`}},
		{"tmpfs as a mapping", "image: a\ntmpfs:\n  /cache: 64MiB\n",
			[]string{"line 3", "tmpfs: want a list of mappings, each with path, size, exec"}},
		{"tmpfs key misspelt", "image: a\ntmpfs:\n  - path: /cache\n    sise: 1GiB\n",
			[]string{"line 4", `unknown key "tmpfs[0].sise"`, `did you mean "size"`, "tmpfs[0] takes path, size, exec"}},
		{"tmpfs size without unit word", "image: a\ntmpfs:\n  - {path: /c, size: lots}\n",
			[]string{"line 3", "tmpfs[0].size", `"lots" is not a size`}},
		{"shm_size with a bare G", "image: a\nshm_size: 1G\n",
			[]string{"line 2", "shm_size", `unknown unit "G"`}},
		{"read_only a word", "image: a\nread_only: maybe\n",
			[]string{"line 2", "read_only: want true or false"}},
		{"privileged a word", "image: a\nsidecars:\n  - name: d\n    privileged: please\n",
			[]string{"line 4", "sidecars[0].privileged: want true or false"}},
		{"share_workspace misspelt", "image: a\nsidecars:\n  - name: d\n    share_workpsace: true\n",
			[]string{"line 4", `unknown key "sidecars[0].share_workpsace"`, `did you mean "share_workspace"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tc.file))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.file)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Each container option out of its bounds is refused by Validate with the
// field named as the API names it and what to do, and the spec is left as
// it was.
func TestValidateRefusesContainerOptions(t *testing.T) {
	ul := func(name string, soft, hard int64) *podiumv1.TaskSpec {
		return &podiumv1.TaskSpec{Image: "a", Ulimits: []*podiumv1.Ulimit{{Name: name, Soft: soft, Hard: hard}}}
	}
	tmp := func(ms ...*podiumv1.TmpfsMount) *podiumv1.TaskSpec { return &podiumv1.TaskSpec{Image: "a", Tmpfs: ms} }
	many := &podiumv1.TaskSpec{Image: "a"}
	for i := range MaxTmpfs + 1 {
		many.Tmpfs = append(many.Tmpfs, &podiumv1.TmpfsMount{Path: "/t" + strings.Repeat("x", i+1)})
	}
	tooManyUlimits := &podiumv1.TaskSpec{Image: "a"}
	for range len(AllowedUlimits) + 1 {
		tooManyUlimits.Ulimits = append(tooManyUlimits.Ulimits, &podiumv1.Ulimit{Name: "core"})
	}
	for _, tc := range []struct {
		name  string
		spec  *podiumv1.TaskSpec
		field string
		says  string
	}{
		{"negative shm", &podiumv1.TaskSpec{Image: "a", ShmSizeBytes: -1}, "spec.shm_size_bytes", "negative"},
		{"shm of 64 bytes", &podiumv1.TaskSpec{Image: "a", ShmSizeBytes: 64}, "spec.shm_size_bytes", "did you leave out the unit? Write e.g. 64MiB"},
		{"shm over 1 TiB", &podiumv1.TaskSpec{Image: "a", ShmSizeBytes: 2 << 40}, "spec.shm_size_bytes", "2 TiB is more than 1 TiB"},
		{"a ulimit not allowed", ul("rtprio", 99, 99), "spec.ulimits[0].name", `"rtprio" may not be set: a task may set core, cpu, data`},
		{"a ulimit without a name", ul("", 1, 1), "spec.ulimits[0].name", "required"},
		{"a ulimit in capitals", ul("NOFILE", 1, 1), "spec.ulimits[0].name", "may not be set"},
		{"nofile unlimited", ul("nofile", 1024, Unlimited), "spec.ulimits[0].hard", "nofile cannot be unlimited"},
		{"nofile past nr_open", ul("nofile", 1024, 1<<21), "spec.ulimits[0].hard", "more than the 1048576 open files nofile may be set to"},
		{"a negative ulimit", ul("core", -2, 0), "spec.ulimits[0].soft", "negative"},
		{"hard below soft", ul("nproc", 200, 100), "spec.ulimits[0].hard", "hard limit (100) is below its soft limit (200)"},
		{"soft unlimited, hard not", ul("core", Unlimited, 100), "spec.ulimits[0].hard", "below its soft limit (unlimited)"},
		{"a ulimit twice", &podiumv1.TaskSpec{Image: "a", Ulimits: []*podiumv1.Ulimit{{Name: "core"}, {Name: "core"}}},
			"spec.ulimits[1].name", "already set by spec.ulimits[0]"},
		{"more ulimits than names", tooManyUlimits, "spec.ulimits", "more than the 11 names there are"},
		{"a nil ulimit", &podiumv1.TaskSpec{Image: "a", Ulimits: []*podiumv1.Ulimit{nil}}, "spec.ulimits[0]", "empty"},
		{"a tmpfs without a path", tmp(&podiumv1.TmpfsMount{}), "spec.tmpfs[0].path", "required"},
		{"a relative tmpfs", tmp(&podiumv1.TmpfsMount{Path: "cache"}), "spec.tmpfs[0].path", "relative"},
		{"an unclean tmpfs", tmp(&podiumv1.TmpfsMount{Path: "/cache/../etc/"}), "spec.tmpfs[0].path", "not a clean path: write it as /etc"},
		{"a tmpfs at /", tmp(&podiumv1.TmpfsMount{Path: "/"}), "spec.tmpfs[0].path", "root directory"},
		{"a tmpfs over the workspace", tmp(&podiumv1.TmpfsMount{Path: "/workspace"}), "spec.tmpfs[0].path", "over /workspace, which Podium mounts"},
		{"a tmpfs in the workspace", tmp(&podiumv1.TmpfsMount{Path: "/workspace/tmp"}), "spec.tmpfs[0].path", "over /workspace"},
		{"a tmpfs over the runner", tmp(&podiumv1.TmpfsMount{Path: "/podium"}), "spec.tmpfs[0].path", "over /podium"},
		{"a tmpfs holding the inbox", tmp(&podiumv1.TmpfsMount{Path: "/run"}), "spec.tmpfs[0].path", "over /run/podium"},
		{"a tmpfs on the secrets", tmp(&podiumv1.TmpfsMount{Path: "/run/secrets"}), "spec.tmpfs[0].path", "over /run/secrets"},
		{"a tmpfs in /proc", tmp(&podiumv1.TmpfsMount{Path: "/proc/sys"}), "spec.tmpfs[0].path", "under /proc, which the container engine provides"},
		{"a tmpfs at /dev/shm", tmp(&podiumv1.TmpfsMount{Path: "/dev/shm"}), "spec.tmpfs[0].path", "set its size with shm_size"},
		{"a tmpfs with a comma", tmp(&podiumv1.TmpfsMount{Path: "/a,exec"}), "spec.tmpfs[0].path", "':' or ','"},
		{"a tmpfs with a space", tmp(&podiumv1.TmpfsMount{Path: "/a b"}), "spec.tmpfs[0].path", "space"},
		{"a tmpfs twice", tmp(&podiumv1.TmpfsMount{Path: "/c"}, &podiumv1.TmpfsMount{Path: "/c"}), "spec.tmpfs[1].path", "mount each directory once"},
		{"a tmpfs in another", tmp(&podiumv1.TmpfsMount{Path: "/c"}, &podiumv1.TmpfsMount{Path: "/c/d"}), "spec.tmpfs[1].path", "within \"/c\""},
		{"a tiny tmpfs", tmp(&podiumv1.TmpfsMount{Path: "/c", SizeBytes: 100}), "spec.tmpfs[0].size_bytes", "less than a page"},
		{"a huge tmpfs", tmp(&podiumv1.TmpfsMount{Path: "/c", SizeBytes: 1<<40 + 1}), "spec.tmpfs[0].size_bytes", "more than 1 TiB"},
		{"a negative tmpfs", tmp(&podiumv1.TmpfsMount{Path: "/c", SizeBytes: -5}), "spec.tmpfs[0].size_bytes", "negative"},
		{"too many tmpfs", many, "spec.tmpfs", "more than 16"},
		{"a nil tmpfs", tmp(nil), "spec.tmpfs[0]", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.spec)
			err := Validate(tc.spec)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Problem, tc.says) {
				t.Errorf("Validate = %q, want field %s saying %q", err, tc.field, tc.says)
			}
			if !proto.Equal(before, tc.spec) {
				t.Errorf("Validate changed a spec it refused")
			}
		})
	}
}

// The bounds themselves are accepted: every allowed name at its largest,
// unlimited where it may be, and the sizes at both ends.
func TestValidateAcceptsContainerOptionBounds(t *testing.T) {
	spec := &podiumv1.TaskSpec{Image: "a", ReadOnly: true, ShmSizeBytes: MaxMountBytes}
	for _, name := range UlimitNames() {
		r := AllowedUlimits[name]
		hard := r.Max
		if r.Unlimited {
			hard = Unlimited
		}
		spec.Ulimits = append(spec.Ulimits, &podiumv1.Ulimit{Name: name, Soft: r.Max, Hard: hard})
	}
	for i, size := range []int64{0, MinMountBytes, MaxMountBytes} {
		spec.Tmpfs = append(spec.Tmpfs, &podiumv1.TmpfsMount{Path: []string{"/tmp", "/var/cache/x", "/home/u/.cache"}[i], SizeBytes: size})
	}
	if err := Validate(spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/tmp", "/workspaces", "/podiums", "/run/user", "/devices", "/etc/app"} {
		if problem := TmpfsPathProblem(p); problem != "" {
			t.Errorf("TmpfsPathProblem(%q) = %q, want none", p, problem)
		}
	}
}
