package main

import (
	"strings"
	"testing"
)

// --output-limit takes a size, like the spec file's output_limit, and
// overrides the file's.
func TestRunOutputLimitFlag(t *testing.T) {
	t.Parallel()
	spec := writeFile(t, "task.yaml", "image: alpine:3\noutput_limit: 1GiB\n")
	o := &runOptions{specFile: spec, outputLimit: "2MiB", set: map[string]bool{"output-limit": true}}
	got, err := o.buildSpec(nil)
	if err != nil || got.GetOutputLimitBytes() != 2<<20 {
		t.Fatalf("buildSpec with --output-limit 2MiB = %v, %v; want output_limit_bytes %d", got, err, 2<<20)
	}
	o = &runOptions{specFile: spec, set: map[string]bool{}}
	if got, err := o.buildSpec(nil); err != nil || got.GetOutputLimitBytes() != 1<<30 {
		t.Fatalf("buildSpec without the flag = %v, %v; want the file's 1 GiB", got, err)
	}
	for _, bad := range []string{"lots", "-1MiB", "10M"} {
		o := &runOptions{image: "alpine:3", outputLimit: bad, set: map[string]bool{"image": true, "output-limit": true}}
		if _, err := o.buildSpec(nil); err == nil || !strings.HasPrefix(err.Error(), "--output-limit ") {
			t.Errorf("--output-limit %q: %v; want an error naming the flag", bad, err)
		}
	}
}
