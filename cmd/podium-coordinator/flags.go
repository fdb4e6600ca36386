package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// envFlag is one of serve's flags together with the environment variable
// that sets it too, so that a container is configured with environment
// alone. serve's flags are declared once, as a table of envFlags (see
// serveOptions.flags), and bound to the flag set by one loop (bindFlags).
//
// The precedence is the same for every one: the built-in default, replaced
// by the variable when it is set, replaced by the flag when it is given. -h
// shows the default the variable made, except for a secret's, which it never
// shows.
type envFlag struct {
	name, env string
	// def is the built-in default as -h shows it when the variable is not
	// set ("" for none).
	def   string
	usage string
	// bind declares the flag on fs, its default read from the variable when
	// that is set; a value it cannot read is an error naming the variable.
	bind func(fs *flag.FlagSet) error
	// given, when set, is called after parsing when the flag was on the
	// command line.
	given func()
	// value is what the destination holds, as the flag would print it.
	value func() string
}

// bindFlags declares flags on fs, in order: the first variable that cannot
// be read is the error.
func bindFlags(fs *flag.FlagSet, flags []envFlag) error {
	for _, f := range flags {
		if err := f.bind(fs); err != nil {
			return err
		}
	}
	return nil
}

// flagsGiven calls the given hooks of the flags that were on fs's command
// line; fs must have been parsed.
func flagsGiven(fs *flag.FlagSet, flags []envFlag) {
	byName := map[string]envFlag{}
	for _, f := range flags {
		byName[f.name] = f
	}
	fs.Visit(func(fl *flag.Flag) {
		if f, ok := byName[fl.Name]; ok && f.given != nil {
			f.given()
		}
	})
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envBool(key string) bool {
	b, _ := strconv.ParseBool(os.Getenv(key))
	return b
}

func envBoolDefault(key string, def bool) (bool, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", key, v)
	}
	return b, nil
}

func envInt(key string, def int) (int, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a whole number", key, v)
	}
	return n, nil
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a duration such as 15m", key, v)
	}
	return d, nil
}

// stringFlag is a string; the variable counts when set, even empty.
func stringFlag(p *string, name, key, def, usage string) envFlag {
	return envFlag{name: name, env: key, def: def, usage: usage,
		bind: func(fs *flag.FlagSet) error {
			fs.StringVar(p, name, env(key, def), usage)
			return nil
		},
		value: func() string { return *p }}
}

// secretFlag is a string that -h never shows (see secret).
func secretFlag(p *string, name, key, usage string) envFlag {
	return envFlag{name: name, env: key, usage: usage,
		bind: func(fs *flag.FlagSet) error {
			*p = env(key, "")
			fs.Var(secret{p}, name, usage)
			return nil
		},
		value: func() string { return *p }}
}

// laxBoolFlag is a bool that is off by default; a variable that is not a
// boolean leaves it off.
func laxBoolFlag(p *bool, name, key, usage string) envFlag {
	return envFlag{name: name, env: key, def: "false", usage: usage,
		bind: func(fs *flag.FlagSet) error {
			fs.BoolVar(p, name, envBool(key), usage)
			return nil
		},
		value: func() string { return strconv.FormatBool(*p) }}
}

// boolFlag is a bool; a variable that is not a boolean is refused.
func boolFlag(p *bool, name, key string, def bool, usage string) envFlag {
	return envFlag{name: name, env: key, def: strconv.FormatBool(def), usage: usage,
		bind: func(fs *flag.FlagSet) error {
			v, err := envBoolDefault(key, def)
			if err != nil {
				return err
			}
			fs.BoolVar(p, name, v, usage)
			return nil
		},
		value: func() string { return strconv.FormatBool(*p) }}
}

func intFlag(p *int, name, key string, def int, usage string) envFlag {
	return envFlag{name: name, env: key, def: strconv.Itoa(def), usage: usage,
		bind: func(fs *flag.FlagSet) error {
			v, err := envInt(key, def)
			if err != nil {
				return err
			}
			fs.IntVar(p, name, v, usage)
			return nil
		},
		value: func() string { return strconv.Itoa(*p) }}
}

func durationFlag(p *time.Duration, name, key string, def time.Duration, usage string) envFlag {
	return envFlag{name: name, env: key, def: def.String(), usage: usage,
		bind: func(fs *flag.FlagSet) error {
			v, err := envDuration(key, def)
			if err != nil {
				return err
			}
			fs.DurationVar(p, name, v, usage)
			return nil
		},
		value: func() string { return p.String() }}
}

// positiveDurationFlag is a duration whose variable must be above 0.
func positiveDurationFlag(p *time.Duration, name, key string, def time.Duration, usage string) envFlag {
	return envFlag{name: name, env: key, def: def.String(), usage: usage,
		bind: func(fs *flag.FlagSet) error {
			v := def
			if s := os.Getenv(key); s != "" {
				d, err := time.ParseDuration(s)
				if err != nil || d <= 0 {
					return fmt.Errorf("%s %q: want a positive duration such as %s", key, s, def)
				}
				v = d
			}
			fs.DurationVar(p, name, v, usage)
			return nil
		},
		value: func() string { return p.String() }}
}

// valueFlag is a flag.Value the variable is Set into. With emptySets, a
// variable set to "" is given to Set too (and refused by a Value that wants
// something); without it, "" counts as unset.
func valueFlag(v flag.Value, name, key, def, usage string, emptySets bool) envFlag {
	return envFlag{name: name, env: key, def: def, usage: usage,
		bind: func(fs *flag.FlagSet) error {
			if s, ok := os.LookupEnv(key); ok && (emptySets || s != "") {
				if err := v.Set(s); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
			}
			fs.Var(v, name, usage)
			return nil
		},
		value: v.String}
}

// hostsListFlag is a repeatable flag whose variable holds a comma-separated
// list; the flags add to the variable's hosts.
func hostsListFlag(p *hostsFlag, name, key, usage string) envFlag {
	return envFlag{name: name, env: key, usage: usage,
		bind: func(fs *flag.FlagSet) error {
			for _, h := range strings.Split(env(key, ""), ",") {
				if h = strings.TrimSpace(h); h != "" {
					*p = append(*p, h)
				}
			}
			fs.Var(p, name, usage)
			return nil
		},
		value: p.String}
}

// thresholdFlag is a node threshold, which every replica must agree on and
// which is therefore stored in Postgres: only a value given, by variable or
// by flag, goes into *into (and replaces the stored one for every replica);
// left 0 it means the stored value. -h shows def, or the variable's value. A
// flag given as 0 sets *zero to its name.
func thresholdFlag(into *time.Duration, zero *string, name, key string, def time.Duration, usage string) envFlag {
	var val time.Duration
	return envFlag{name: name, env: key, def: def.String(), usage: usage,
		bind: func(fs *flag.FlagSet) error {
			if v, ok := os.LookupEnv(key); ok && v != "" {
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return fmt.Errorf("%s=%q: want a positive duration such as %s", key, v, def)
				}
				*into = d
			}
			// The flag's own variable shows the default in -h; what was
			// given is copied into *into after parsing.
			val = def
			if *into != 0 {
				val = *into
			}
			fs.DurationVar(&val, name, val, usage)
			return nil
		},
		given: func() {
			*into = val
			if val == 0 {
				*zero = name
			}
		},
		value: func() string { return into.String() }}
}
