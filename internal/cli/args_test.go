package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestArgsFileIsReadUpToTheLimit: --args @FILE and --args - read at most the args limit, so a 200 MB
// file is refused without being read into memory.
func TestArgsFileIsReadUpToTheLimit(t *testing.T) {
	db := []string{"--database-url", "memory:"}
	big := filepath.Join(t.TempDir(), "big.json")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file: 200 MB long, no disk used.
	if err := f.Truncate(200 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	run(t, with(db, "enqueue", "a.b", "--args", "@"+big)...).fails(t, ExitUsage, "larger than the args limit of 1048576 bytes")
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("reading a 200 MB --args file allocated %d MB", alloc>>20)
	}

	over := `"` + strings.Repeat("x", pronto.DefaultMaxArgsBytes) + `"`
	runWith(t, runOpts{stdin: over}, with(db, "enqueue", "a.b", "--args", "-")...).fails(t, ExitUsage, "--args -: larger than the args limit")

	// Just under the limit is read whole and stored.
	fits := `"` + strings.Repeat("x", pronto.DefaultMaxArgsBytes-100) + `"`
	runWith(t, runOpts{stdin: fits}, with(db, "enqueue", "a.b", "--args", "-")...).ok(t)
}
