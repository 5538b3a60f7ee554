package cli

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestParseDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		raw, kind, display, path, name string
	}{
		{"postgres://u:secret@db.example.com:5433/app?sslmode=require", kindPostgres, "postgres://u:xxxxx@db.example.com:5433/app?sslmode=require", "", ""},
		{"postgresql://db/app", kindPostgres, "postgresql://db/app", "", ""},
		{"POSTGRES://db/app", kindPostgres, "postgres://db/app", "", ""},
		{"sqlite:pronto.db", kindSQLite, "sqlite:pronto.db", "pronto.db", ""},
		{"sqlite:///var/lib/pronto.db", kindSQLite, "sqlite:/var/lib/pronto.db", "/var/lib/pronto.db", ""},
		{"sqlite://rel/p.db", kindSQLite, "sqlite:rel/p.db", "rel/p.db", ""},
		{"memory:", kindMemory, "memory:", "", ""},
		{"memory:shared", kindMemory, "memory:shared", "", "shared"},
		{"redis://u:secret@cache:6379/2", kindRedis, "redis://u:xxxxx@cache:6379/2", "", ""},
		{"rediss://cache:6380/0", kindRedis, "rediss://cache:6380/0", "", ""},
	} {
		got, err := parseDatabaseURL(c.raw)
		if err != nil {
			t.Errorf("%s: %v", c.raw, err)
			continue
		}
		if got.kind != c.kind || got.display != c.display || got.path != c.path || got.name != c.name {
			t.Errorf("%s: %+v", c.raw, got)
		}
	}
	for _, raw := range []string{"", "mysql://x", "pronto.db", "sqlite:", "sqlite::memory:", "postgres://u:p@[::1", "redis://u:p@[::1", "mongodb://localhost"} {
		_, err := parseDatabaseURL(raw)
		ee, ok := err.(*exitError)
		if !ok || ee.code != ExitUsage {
			t.Errorf("%q: want a usage error, got %v", raw, err)
		}
	}
}

func TestRedactAny(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"redis://u:pw@h:6379/0":      "redis://u:xxxxx@h:6379/0",
		"postgres://u:p@[::1/db":     "postgres://u:xxxxx@[::1/db",
		"postgres://u:p@ss@h/db":     "postgres://u:xxxxx@h/db",
		"postgres://u@h/db":          "postgres://u@h/db",
		"mysql://x":                  "mysql://x",
		"postgres://u:p%zz@h/db?x=1": "postgres://u:xxxxx@h/db?x=1",
		// A password in the query (pgx reads ?password= and ?sslpassword=), the URL parsing or not.
		"postgres://u@h/db?sslmode=disable&password=s3cret":   "postgres://u@h/db?sslmode=disable&password=xxxxx",
		"postgres://u:p@h/db?password=s3cret&sslpassword=k3y": "postgres://u:xxxxx@h/db?password=xxxxx&sslpassword=xxxxx",
		"postgres://u@[::1/db?PASSWORD=s3cret":                "postgres://u@[::1/db?PASSWORD=xxxxx",
		// A key=value DSN.
		"host=db user=u password=s3cret dbname=app": "host=db user=u password=xxxxx dbname=app",
		"host=db password='s3 cret' dbname=app":     "host=db password=xxxxx dbname=app",
	} {
		if got := redactAny(raw); got != want {
			t.Errorf("redactAny(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestParseArgsJSON(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a": 1}`:   `[{"a":1}]`,
		` [1, 2] `:   `[1,2]`,
		`null`:       `[null]`,
		`12.50`:      `[12.50]`,
		`"x"`:        `["x"]`,
		"{\n}\n":     `[{}]`,
		`[{"a":[]}]`: `[{"a":[]}]`,
	} {
		elem, array, err := parseArgsJSON(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if string(array) != want || !json.Valid(elem) {
			t.Errorf("%q: array %s elem %s, want array %s", in, array, elem, want)
		}
	}
	for _, in := range []string{"", " ", "{", "[1,]", "{} []", "nul", "'x'"} {
		if _, _, err := parseArgsJSON(in); err == nil {
			t.Errorf("%q: want an error", in)
		}
	}
}

func TestFlagsAnywhere(t *testing.T) {
	t.Parallel()
	r := &runner{current: "x"}
	for _, c := range []struct {
		args []string
		pos  []string
		json bool
	}{
		{[]string{"a", "--json"}, []string{"a"}, true},
		{[]string{"--json", "a"}, []string{"a"}, true},
		{[]string{"a", "b"}, []string{"a", "b"}, false},
		{[]string{"--", "--json"}, []string{"--json"}, false},
		{[]string{"a", "--", "-b", "c"}, []string{"a", "-b", "c"}, false},
	} {
		fs := r.newFlagSet("x", "")
		asJSON := fs.Bool("json", false, "")
		pos, err := fs.parse(c.args, 0, -1)
		if err != nil || !slices.Equal(pos, c.pos) || *asJSON != c.json {
			t.Errorf("%q: pos %q json %v err %v", c.args, pos, *asJSON, err)
		}
	}
}
