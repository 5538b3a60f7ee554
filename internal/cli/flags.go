package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
)

// flagSet is a standard library FlagSet with pronto's help layout, the shared database flags, and
// positional arguments allowed between flags ("jobs get ID --json" and "jobs get --json ID").
type flagSet struct {
	*flag.FlagSet
	r        *runner
	synopsis string // e.g. "pronto jobs get ID [flags]"
	about    string // what the command does, printed under the synopsis
	db       bool   // the command takes --database-url and --schema
	dbIgnore bool   // it takes them only to ignore them (version, completion)
	help     bool
}

// newFlagSet returns the flag set of a command; synopsis and about feed its --help.
func (r *runner) newFlagSet(synopsis, about string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(r.current, flag.ContinueOnError), r: r, synopsis: synopsis, about: about}
	fs.SetOutput(io.Discard) // errors are reported by Run, help by printUsage
	fs.Usage = func() {}
	return fs
}

// schemaValue records --schema on the runner, from whichever flag set parses it.
type schemaValue struct{ r *runner }

func (v schemaValue) String() string {
	if v.r == nil {
		return ""
	}
	return v.r.schema
}

func (v schemaValue) Set(s string) error {
	v.r.schema, v.r.schemaSet = s, true
	return nil
}

// dbURLValue records --database-url on the runner, and that it was given: an explicitly empty URL
// is a mistake, not a request for the default.
type dbURLValue struct{ r *runner }

func (v dbURLValue) String() string {
	if v.r == nil {
		return ""
	}
	return v.r.dbURL
}

func (v dbURLValue) Set(s string) error {
	v.r.dbURL, v.r.dbURLSet = s, true
	return nil
}

// withDatabase adds --database-url and --schema. Their values live on the runner, so they may be given
// before the command name or after it.
func (fs *flagSet) withDatabase() *flagSet {
	fs.db = true
	fs.Var(dbURLValue{fs.r}, "database-url",
		"`URL` of the database: postgres://user:pass@host/db, redis://host:6379/0, sqlite:PATH or memory: (default $"+EnvDatabaseURL+", else "+DefaultDatabaseURL+")")
	fs.Var(schemaValue{fs.r}, "schema", "the PostgreSQL schema `NAME` holding pronto's tables (default pronto)")
	fs.StringVar(&fs.r.listenURL, "database-listen-url", fs.r.listenURL,
		"PostgreSQL only: a direct `URL` for the notification listener when --database-url goes through PgBouncer in transaction-pooling mode (default $"+EnvDatabaseListenURL+"); serve and demo connect to it once at start and fail if they cannot")
	return fs
}

// ignoringDatabase adds the database flags to a command that uses no database, which accepts and
// ignores them: "every command takes --database-url", so a script or alias may always pass it.
func (fs *flagSet) ignoringDatabase() *flagSet {
	fs.withDatabase().dbIgnore = true
	return fs
}

var dbFlags = map[string]bool{"database-url": true, "schema": true, "database-listen-url": true}

// parse parses args, allowing positional arguments anywhere ("--" ends the flags), and checks their
// number: at least minPos, at most maxPos (negative: no limit). --help prints the command's help and
// returns errHelpShown.
func (fs *flagSet) parse(args []string, minPos, maxPos int) ([]string, error) {
	if fs.r.collect != nil {
		// 'pronto completion' asks for the command's flags; nothing runs.
		fs.VisitAll(func(f *flag.Flag) {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			*fs.r.collect = append(*fs.r.collect, flagInfo{name: f.Name, takesValue: !ok || !b.IsBoolFlag()})
		})
		return nil, errHelpShown
	}
	if fs.Lookup("help") == nil {
		fs.BoolVar(&fs.help, "help", false, "show this help")
		fs.BoolVar(&fs.help, "h", false, "show this help")
	}
	var pos []string
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) || fs.help {
			fs.printUsage(fs.r.env.Stdout)
			return nil, errHelpShown
		}
		if err != nil {
			// The flag package stops at the bad argument, having taken it: a negative number there
			// is a positional argument ("queues set-max-depth q -1"), for the command to judge.
			rest := fs.Args()
			if bad := len(args) - len(rest) - 1; bad >= 0 && bad < len(args) && negativeNumber(args[bad]) {
				pos = append(pos, args[bad])
				args = rest
				continue
			}
			return nil, usageErrorf("%s: %s", fs.r.current, flagErrorText(fs.FlagSet, err))
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < minPos:
		return nil, usageErrorf("%s: missing argument (usage: %s)", fs.r.current, fs.synopsis)
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, usageErrorf("%s: unexpected argument %q (usage: %s)", fs.r.current, pos[maxPos], fs.synopsis)
	}
	return pos, nil
}

// given reports whether the flag name was on the command line (even with its default value).
func (fs *flagSet) given(name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			found = true
		}
	})
	return found
}

// flagErrorText rewrites the flag package's messages in pronto's double-dash spelling, and says
// what a number flag takes instead of its bare "parse error".
func flagErrorText(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return "flag --" + name + " needs a value"
	}
	// invalid value "x" for flag -priority: parse error
	i := strings.Index(msg, " for flag -")
	if i < 0 {
		return msg
	}
	name, why, _ := strings.Cut(msg[i+len(" for flag -"):], ": ")
	if f := fs.Lookup(name); f != nil {
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case int, int64, uint, uint64:
				why = strings.NewReplacer("parse error", "must be a whole number", "value out of range", "out of range").Replace(why)
			case float64:
				why = strings.NewReplacer("parse error", "must be a number", "value out of range", "out of range").Replace(why)
			case bool:
				why = strings.Replace(why, "parse error", "must be true or false", 1)
			}
		}
	}
	return msg[:i] + " for flag --" + name + ": " + why
}

// negativeNumber reports whether arg is a negative number ("-1", "-2.5"), which the flag package
// would read as an unknown flag: given as a positional argument, it is the argument's value to check.
func negativeNumber(arg string) bool {
	if !strings.HasPrefix(arg, "-") || len(arg) < 2 {
		return false
	}
	_, err := strconv.ParseFloat(arg, 64)
	return err == nil
}

// printUsage writes the command's help: synopsis, description, flags, database flags.
func (fs *flagSet) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s\n", fs.synopsis)
	if fs.about != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(fs.about, "\n"))
	}
	var own, db []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case f.Name == "h" || f.Name == "help":
		case dbFlags[f.Name]:
			db = append(db, f)
		default:
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintln(w, "\nFlags:")
		for _, f := range own {
			printFlag(w, f)
		}
	}
	if len(db) > 0 && fs.dbIgnore {
		fmt.Fprintln(w, "\nDatabase:\n  --database-url, --schema and --database-listen-url are accepted and ignored.")
	} else if len(db) > 0 {
		fmt.Fprintln(w, "\nDatabase:")
		for _, f := range db {
			printFlag(w, f)
		}
	}
	fmt.Fprintln(w, "\n  -h, --help           show this help")
}

func printFlag(w io.Writer, f *flag.Flag) {
	name, usage := flag.UnquoteUsage(f)
	head := "--" + f.Name
	if name != "" {
		head += " " + name
	}
	if !dbFlags[f.Name] && f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
		usage += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	lines := wrap(usage, 78-23)
	if len(head) <= 19 {
		fmt.Fprintf(w, "  %-19s  %s\n", head, lines[0])
	} else {
		fmt.Fprintf(w, "  %s\n  %-19s  %s\n", head, "", lines[0])
	}
	for _, l := range lines[1:] {
		fmt.Fprintf(w, "  %-19s  %s\n", "", l)
	}
}

// wrap breaks text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	return append(lines, line)
}

// listValue is a flag that may be repeated and takes comma-separated values.
type listValue []string

func (l *listValue) String() string { return strings.Join(*l, ",") }

func (l *listValue) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

// durationValue is a time.Duration flag whose parse error says which units are accepted.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
			return fmt.Errorf("a duration needs a unit: ms, s, m or h, for example %ss or 1m30s", s)
		}
		return errors.New("not a duration: use a number with a unit (ms, s, m or h), for example 500ms, 30s, 5m or 1h30m")
	}
	*d = durationValue(v)
	return nil
}

// duration defines a duration flag, as flag.Duration does, with durationValue's error messages.
func (fs *flagSet) duration(name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = value
	fs.Var((*durationValue)(p), name, usage)
	return p
}

// priorityValue is a job priority given as an integer or as a named level (high, normal, low),
// read by pronto.ParsePriority.
type priorityValue int

func (p *priorityValue) String() string { return strconv.Itoa(int(*p)) }

func (p *priorityValue) Set(s string) error {
	n, err := pronto.ParsePriority(s)
	if err != nil {
		return err
	}
	*p = priorityValue(n)
	return nil
}

// priority defines a --priority flag (0 by default) taking a number or a named level.
func (fs *flagSet) priority(usage string) *int {
	p := new(int)
	fs.Var((*priorityValue)(p), "priority", usage)
	return p
}

// timeValue is a point in time given as RFC 3339 ("2026-11-26T10:00:00Z") or as a duration before
// now ("90m": ninety minutes ago), read when the flag is parsed.
type timeValue struct{ f *timeFlag }

// timeFlag is a time flag's value, and whether it was given: the zero time is a time one may give
// (0001-01-01T00:00:00Z), not "unset".
type timeFlag struct {
	t   time.Time
	set bool
}

func (v timeValue) String() string {
	if v.f == nil || !v.f.set {
		return ""
	}
	return v.f.t.Format(time.RFC3339)
}

func (v timeValue) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		v.f.t, v.f.set = t, true
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return errors.New("not a time: give an RFC 3339 time (2026-11-26T10:00:00Z) or how long ago (90m, 24h)")
	}
	v.f.t, v.f.set = time.Now().Add(-d), true
	return nil
}

// time defines a time flag (timeValue).
func (fs *flagSet) time(name, usage string) *timeFlag {
	p := new(timeFlag)
	fs.Var(timeValue{p}, name, usage)
	return p
}

// upper returns the time as an exclusive upper bound for the library, which reads the zero time as
// no bound. Nothing is created or finished before the zero time (ids record times from 1970 on), so
// the nanosecond after it selects the same (no) jobs, as a bound.
func (f *timeFlag) upper() time.Time {
	if f.set && f.t.IsZero() {
		return f.t.Add(time.Nanosecond)
	}
	return f.t
}

// lower returns the time as an inclusive lower bound for the library, which reads the zero time as
// no bound. A given zero time is still a bound (--finished-after: finished jobs only): the
// nanosecond after it lets through the same jobs, none being older.
func (f *timeFlag) lower() time.Time {
	if f.set && f.t.IsZero() {
		return f.t.Add(time.Nanosecond)
	}
	return f.t
}
