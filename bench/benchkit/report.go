package benchkit

import (
	"fmt"
	"io"
	"maps"
	"slices"
)

// PrintTrouble prints what explains figures that look wrong: the errors the
// simulated nodes met (failed Hellos, dropped streams), counted, and a few of
// the coordinator's WARN and ERROR lines. A replica struggling under load says
// so there before its figures show it.
func PrintTrouble(w io.Writer, nodeErrs map[string]int, warnings int, warnSample []string) {
	if len(nodeErrs) > 0 {
		fmt.Fprintln(w, "node-side errors:")
		for _, k := range slices.Sorted(maps.Keys(nodeErrs)) {
			fmt.Fprintf(w, "  %6d× %s\n", nodeErrs[k], k)
		}
	}
	if warnings > 0 {
		fmt.Fprintf(w, "coordinator log: %d WARN/ERROR lines, e.g.:\n", warnings)
		for _, s := range warnSample {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
}
