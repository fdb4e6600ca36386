package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/proto"
)

// runAdminList is an admin `ls` command (users, secrets, registries): no
// arguments, --json for the raw entries, else a table of header's columns
// with one row per entry. list makes the call through an endpoint, so it
// fails over like every other call.
func runAdminList[T proto.Message](ctx context.Context, c *cli, cmd *command, args []string,
	list func(context.Context, *endpoint) ([]T, error), header []string, row func(T) []string) int {
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON array instead of a table")
	rest, done, code := c.parseFlags(cmd, fs, args)
	if done {
		return code
	}
	if len(rest) > 0 {
		return c.usageFailure(cmd, fs, fmt.Errorf("unexpected argument %q", rest[0]))
	}
	cl, code, ok := c.dial(cmd)
	if !ok {
		return code
	}
	items, err := unary(ctx, cl, list)
	if err != nil {
		return c.failed(cl, err, "")
	}
	if *asJSON {
		return writeJSONList(c, items)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, it := range items {
		fmt.Fprintln(tw, strings.Join(row(it), "\t"))
	}
	_ = tw.Flush()
	return exitOK
}
