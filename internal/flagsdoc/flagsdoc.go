// Package flagsdoc lists a command's flags the one way all three Podium
// binaries show them in their help: "--name ARG" (or "-n, --name ARG" where a
// short name is an alias), in a column, then what it does and its default;
// never Go's "-name type" layout.
package flagsdoc

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// aliasUsage marks a flag that is another name for a long one: its usage is
// this prefix and the long flag's name. Print lists it beside the long one.
const aliasUsage = "\x00alias of "

// Alias registers -short as another name of the flag --long, as docker run
// has -e for --env: the two set the same value.
func Alias(fs *flag.FlagSet, short, long string) {
	fs.Var(fs.Lookup(long).Value, short, aliasUsage+long)
}

// Canonical is f's long name when f is an alias, else its own name.
func Canonical(f *flag.Flag) string {
	if long, ok := strings.CutPrefix(f.Usage, aliasUsage); ok {
		return long
	}
	return f.Name
}

// Print lists fs's flags, less those skip names (nil: none).
func Print(w io.Writer, fs *flag.FlagSet, skip func(name string) bool) {
	shorts := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if long := Canonical(f); long != f.Name {
			shorts[long] = f.Name
		}
	})
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if Canonical(f) != f.Name || skip != nil && skip(f.Name) {
			return
		}
		arg, usage := flag.UnquoteUsage(f)
		name := "-" + f.Name
		if len(f.Name) > 1 {
			name = "--" + f.Name
		}
		if short, ok := shorts[f.Name]; ok {
			name = "-" + short + ", " + name
		}
		if arg != "" {
			name += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "[]" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	})
	_ = tw.Flush()
}
