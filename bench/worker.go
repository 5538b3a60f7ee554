//go:build benchworker

package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
)

// A worker binary: the harness builds one per family of systems (workerbin.go) with the tags
// benchworker and that family's, so a worker process holds its own system's code only, as a user's
// worker binary would, and not the harness, the report's plotting or the other systems.
func main() {
	if os.Getenv(listSystemsEnv) != "" {
		for _, name := range slices.Sorted(maps.Keys(systemsByName())) {
			fmt.Println(name)
		}
		return
	}
	raw := os.Getenv(childEnv)
	if raw == "" {
		fmt.Fprintln(os.Stderr, "bench worker: run by the bench harness only")
		os.Exit(2)
	}
	os.Exit(runChild(raw))
}
