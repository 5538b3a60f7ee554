//go:build !benchworker

package main

import (
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestWorkerBinaries builds every family's worker binary and checks that it holds the systems
// mapped to it, and that every system whose workers run in child processes has a family.
func TestWorkerBinaries(t *testing.T) {
	want := map[string][]string{}
	for name, sys := range systemsByName() {
		tag, ok := workerFamilies[name]
		if sys.shared() && !ok {
			t.Errorf("system %s runs its workers in child processes but has no worker binary family", name)
		}
		if ok {
			want[tag] = append(want[tag], name)
		}
	}
	bins := &workerBins{dir: t.TempDir()}
	for _, tag := range slices.Sorted(maps.Keys(want)) {
		exe, err := bins.exe(want[tag][0])
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), listSystemsEnv+"=1")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", exe, err)
		}
		got := strings.Fields(string(out))
		for _, name := range want[tag] {
			if !slices.Contains(got, name) {
				t.Errorf("worker binary %s holds %v, not %s", tag, got, name)
			}
		}
		// A second system of the family reuses the binary.
		again, err := bins.exe(want[tag][len(want[tag])-1])
		if err != nil || again != exe {
			t.Errorf("family %s: second system got %q, %v; want the same binary %q", tag, again, err, exe)
		}
	}
	if exe, err := (&workerBins{single: true}).exe("pronto"); err != nil || exe == "" {
		t.Errorf("--single-binary: %q, %v", exe, err)
	}
}
