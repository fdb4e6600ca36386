package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// flagSamples are two good values of a flag, for its variable and for the
// flag itself, by the kind of flag.Value serve declares it with, and what
// the destination holds when both are given.
func flagSamples(t *testing.T, f envFlag, v flag.Value) (fromEnv, fromFlag, both string) {
	t.Helper()
	switch kind := fmt.Sprintf("%T", v); kind {
	case "*flag.stringValue":
		return "from-env", "from-flag", "from-flag"
	case "main.secret":
		return "env-secret", "flag-secret", "flag-secret"
	case "*flag.boolValue":
		def, err := strconv.ParseBool(f.def)
		if err != nil {
			t.Fatalf("--%s: default %q is not a boolean", f.name, f.def)
		}
		return strconv.FormatBool(!def), f.def, f.def
	case "*flag.intValue":
		return "7", "9", "9"
	case "*flag.durationValue":
		return "7s", "9s", "9s"
	case "*main.sizeFlag":
		return "2GiB", "3MiB", "3MiB"
	case "main.longFlag":
		return "2d", "3d", "3d"
	case "*main.hostsFlag":
		// Hosts given by flag add to those of the variable.
		return "a.example", "b.example", "a.example,b.example"
	default:
		t.Fatalf("--%s is a %s: give it samples here", f.name, kind)
		return "", "", ""
	}
}

// bound declares a fresh serveOptions' flags on a flag set and parses args.
func bound(t *testing.T, args ...string) (*flag.FlagSet, []envFlag) {
	t.Helper()
	var o serveOptions
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags := o.flags()
	if err := bindFlags(fs, flags); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	flagsGiven(fs, flags)
	return fs, flags
}

// Every flag of serve is in the table, documents its variable, and takes
// its value from the built-in default, replaced by the variable, replaced by
// the flag.
func TestServeFlagTable(t *testing.T) {
	var o serveOptions
	rows := o.flags()
	// No variable of the table may leak in from the test's environment.
	for _, f := range rows {
		t.Setenv(f.env, "")
		os.Unsetenv(f.env)
	}
	fs, _ := bound(t)
	seen := map[string]bool{}
	for _, f := range rows {
		if seen[f.name] {
			t.Errorf("--%s is in the table twice", f.name)
		}
		seen[f.name] = true
		if f.env == "" || !strings.HasPrefix(f.env, "PODIUM_") {
			t.Errorf("--%s has no PODIUM_* variable: %q", f.name, f.env)
		}
		fl := fs.Lookup(f.name)
		if fl == nil {
			t.Fatalf("--%s is in the table but not declared", f.name)
		}
		if !strings.Contains(fl.Usage, f.env) {
			t.Errorf("--%s's usage does not name its variable %s: %q", f.name, f.env, fl.Usage)
		}
		// The flag package shows a usage's first `quoted` word as the
		// flag's argument: a command there read as "-token openssl rand
		// -hex 32".
		if arg, _ := flag.UnquoteUsage(fl); strings.Contains(arg, " ") {
			t.Errorf("--%s's help shows %q as its argument: keep commands out of backquotes", f.name, arg)
		}
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if !seen[fl.Name] {
			t.Errorf("--%s is declared outside the table", fl.Name)
		}
	})

	for _, f := range rows {
		t.Run(f.name, func(t *testing.T) {
			fs, flags := bound(t)
			f := rowNamed(t, flags, f.name)
			if got := fs.Lookup(f.name).DefValue; got != f.def {
				t.Errorf("default shown %q, want %q", got, f.def)
			}
			if got := f.value(); f.given == nil && got != f.def {
				t.Errorf("with neither variable nor flag: %q, want the default %q", got, f.def)
			}
			fromEnv, fromFlag, both := flagSamples(t, f, fs.Lookup(f.name).Value)

			t.Setenv(f.env, fromEnv)
			_, flags = bound(t)
			if got := rowNamed(t, flags, f.name).value(); got != fromEnv {
				t.Errorf("%s=%s: %q, want the variable's value", f.env, fromEnv, got)
			}
			_, flags = bound(t, "--"+f.name+"="+fromFlag)
			if got := rowNamed(t, flags, f.name).value(); got != both {
				t.Errorf("%s=%s and --%s=%s: %q, want %q", f.env, fromEnv, f.name, fromFlag, got, both)
			}
		})
	}
}

func rowNamed(t *testing.T, flags []envFlag, name string) envFlag {
	t.Helper()
	for _, f := range flags {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no row --%s", name)
	return envFlag{}
}
