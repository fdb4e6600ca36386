package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

var completionCommand = &command{
	name:     "completion",
	synopsis: "bash|zsh",
	summary:  "Print a shell completion script for podium's commands and flags.",
	detail: `
Completes command names ("podium ta<TAB>": task, tasks; "podium task <TAB>":
get, cancel, rerun, send) and each command's flags ("podium run --na<TAB>").
Load it in the current shell, or from your shell's start-up file:

  source <(podium completion bash)    # ~/.bashrc
  source <(podium completion zsh)     # ~/.zshrc (uses zsh's bashcompinit)`,
	usageExit: exitUsage,
	run:       runCompletion,
}

func runCompletion(ctx context.Context, c *cli, cmd *command, args []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) != 1 || rest[0] != "bash" && rest[0] != "zsh" {
		return c.usageFailure(cmd, fs, fmt.Errorf("want the shell: bash or zsh"))
	}
	script := bashCompletion(ctx)
	if rest[0] == "zsh" {
		script = "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n" + script
	}
	_, _ = io.WriteString(c.stdout, script)
	return exitOK
}

// commandFlags are the flags of cmd, read from its own flag set (the one
// its --help lists), with the global flags, as --name or -n.
func commandFlags(ctx context.Context, cmd *command) []string {
	var names []string
	probe := &cli{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" },
		flagSets: func(fs *flag.FlagSet) {
			fs.VisitAll(func(f *flag.Flag) {
				dash := "--"
				if len(f.Name) == 1 {
					dash = "-"
				}
				names = append(names, dash+f.Name)
			})
		}}
	cmd.run(ctx, probe, cmd, []string{"--help"})
	slices.Sort(names)
	return slices.Compact(names)
}

// bashCompletion is the script: the first word among the commands' first
// words, the second among a group's commands, then the command's flags.
func bashCompletion(ctx context.Context) string {
	var first []string
	groups := map[string][]string{}
	var cases strings.Builder
	for _, cmd := range commands {
		words := strings.Fields(cmd.name)
		first = append(first, words[0])
		if len(words) == 2 {
			groups[words[0]] = append(groups[words[0]], words[1])
		}
		fmt.Fprintf(&cases, "    %q) flags=%q ;;\n", cmd.name, strings.Join(commandFlags(ctx, cmd), " "))
	}
	slices.Sort(first)
	first = slices.Compact(first)
	var groupCases strings.Builder
	for _, g := range first {
		if subs := groups[g]; len(subs) > 0 {
			fmt.Fprintf(&groupCases, "    %q) subs=%q ;;\n", g, strings.Join(subs, " "))
		}
	}
	return `# podium shell completion (podium completion bash|zsh)
_podium() {
  local cur="${COMP_WORDS[COMP_CWORD]}" subs="" flags="" name
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "` + strings.Join(first, " ") + `" -- "$cur"))
    return
  fi
  case "${COMP_WORDS[1]}" in
` + groupCases.String() + `  esac
  name="${COMP_WORDS[1]}"
  if [ -n "$subs" ]; then
    if [ "$COMP_CWORD" -eq 2 ]; then
      COMPREPLY=($(compgen -W "$subs" -- "$cur"))
      return
    fi
    name="${COMP_WORDS[1]} ${COMP_WORDS[2]}"
  fi
  case "$name" in
` + cases.String() + `  esac
  case "$cur" in
    -*) COMPREPLY=($(compgen -W "$flags" -- "$cur")) ;;
    *) COMPREPLY=() ;;
  esac
}
complete -o default -F _podium podium
`
}
