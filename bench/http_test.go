//go:build !benchworker

package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHTTPScenario runs the HTTP scenario briefly against a real `pronto serve` on every store and
// checks that each operation completed some operations without an error, and that the report has a
// row per store beside OJS's. It never asserts a speed.
func TestHTTPScenario(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	bin, err := buildPronto(tmp)
	if err != nil {
		t.Fatal(err)
	}
	url := envOr("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	stores := []string{"memory", "sqlite", "postgres", "redis"}
	var all []httpOpResult
	for _, st := range stores {
		rs, err := runHTTPStore(ctx, bin, st, url, tmp, 1, 20, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		if len(rs) != len(httpOps) {
			t.Fatalf("%s: %d operations measured, want %d", st, len(rs), len(httpOps))
		}
		for _, r := range rs {
			if r.Ops == 0 || r.Errors != 0 || r.OpsPerSec <= 0 {
				t.Errorf("%s %s: %d ops, %d errors (%s)", st, r.Op, r.Ops, r.Errors, r.Note)
			}
		}
		all = append(all, rs...)
	}
	md := httpReport(all, stores, 20, 300*time.Millisecond, time.Second)
	for _, want := range []string{"pronto, memory", "pronto, SQLite", "pronto, PostgreSQL", "pronto, Redis", "OJS v0.1.0 published, Redis | 15,741 | 12,701 | 4,779"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
