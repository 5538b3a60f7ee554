// Package cli implements the pronto command line. Every command is a function of its arguments,
// environment and output streams, so tests run the commands in-process exactly as the binary does;
// cmd/pronto only wires Run to the process.
//
// Exit codes are part of the interface, for scripts:
//
//	0  success
//	1  runtime or operational error (database unreachable, schema missing, refused transition, ...)
//	2  usage error (unknown command or flag, bad argument, bad database URL, invalid job)
//	3  not found (no job with that id)
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pronto-jobs/pronto"
)

// Exit codes returned by Run.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitUsage    = 2
	ExitNotFound = 3
)

// EnvDatabaseURL is the environment variable read when --database-url is not given.
const EnvDatabaseURL = "PRONTO_DATABASE_URL"

// EnvDatabaseListenURL is the environment variable read when --database-listen-url is not given.
const EnvDatabaseListenURL = "PRONTO_DATABASE_LISTEN_URL"

// DefaultDatabaseURL is the database used when neither --database-url nor PRONTO_DATABASE_URL is set:
// an SQLite file in the working directory.
const DefaultDatabaseURL = "sqlite:pronto.db"

// Env is the outside world of one Run: its streams and environment.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads an environment variable; nil reads none.
	Getenv func(string) string
	// IsTerminal reports whether Stdout is an interactive terminal, where the demo redraws its progress
	// in place. Nil: detected from Stdout when it is an *os.File (a character device), else false.
	IsTerminal func() bool
	// SharedMemory lets "memory:NAME" name an in-memory store shared by the Runs of this process
	// (tests, programs embedding the CLI). Off, as in the pronto binary, where a store lasts one
	// command, only "memory:" is accepted.
	SharedMemory bool
}

// OSEnv is the process's own environment.
func OSEnv() Env {
	return Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

func (e Env) terminal() bool {
	if e.IsTerminal != nil {
		return e.IsTerminal()
	}
	f, ok := e.Stdout.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// exitError carries an exit code and a message meant for the user.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// usageErrorf reports a mistake in the command line (exit 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: sprintf(format, args...)}
}

// notFoundf reports a missing job (exit 3).
func notFoundf(format string, args ...any) error {
	return &exitError{code: ExitNotFound, msg: sprintf(format, args...)}
}

// errorf reports an operational failure (exit 1) with a message that needs no further context.
func errorf(format string, args ...any) error {
	return &exitError{code: ExitError, msg: sprintf(format, args...)}
}

// sprintf formats a message for the user. Errors from the pronto package among args are stated
// without their "pronto: " prefix (every message already starts with "pronto: " when printed) nor
// the "invalid job: " of ErrInvalidArgs (the message says what is invalid, which is not always a job).
func sprintf(format string, args ...any) string {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = libMessage(err)
		}
	}
	return fmt.Sprintf(format, args...)
}

// libMessage is the text of an error from the pronto package, in the CLI's terms.
func libMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "pronto: ")
	return strings.Replace(msg, pronto.ErrInvalidArgs.Error()+": ", "", 1)
}

// errHelpShown ends a command whose help was printed on request (exit 0).
var errHelpShown = errors.New("help shown")

// Run runs the pronto command line args (without the program name) and returns the exit code. It
// never panics on bad input and never prints a Go stack trace: every failure is one or a few lines
// on env.Stderr.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Stdout == nil {
		env.Stdout = io.Discard
	}
	if env.Stderr == nil {
		env.Stderr = io.Discard
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	r := &runner{env: env, json: wantsJSON(args)}
	err := r.run(ctx, args)
	return r.report(err)
}

// report prints err and returns its exit code.
func (r *runner) report(err error) int {
	if err == nil || errors.Is(err, errHelpShown) {
		return ExitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		ee = &exitError{code: ExitError, msg: libMessage(err)}
	}
	if r.json {
		// Scripts that asked for JSON get the error as JSON too, on standard error.
		_ = writeJSON(r.env.Stderr, map[string]any{"error": errorJSON{
			Code: exitCodeNames[ee.code], ExitCode: ee.code, Message: ee.msg, Command: r.current}})
		return ee.code
	}
	fmt.Fprintf(r.env.Stderr, "pronto: %s\n", ee.msg)
	if ee.code == ExitUsage {
		if r.current == "" {
			fmt.Fprintln(r.env.Stderr, "Run 'pronto --help' for usage.")
		} else {
			fmt.Fprintf(r.env.Stderr, "Run 'pronto %s --help' for usage.\n", r.current)
		}
	}
	return ee.code
}

// errorJSON is an error as printed with --json: {"error": {"code": "not_found", "exit_code": 3,
// "message": "job ... not found", "command": "jobs get"}}.
type errorJSON struct {
	Code     string `json:"code"`
	ExitCode int    `json:"exit_code"`
	Message  string `json:"message"`
	Command  string `json:"command,omitempty"`
}

// exitCodeNames names the exit codes in errorJSON.
var exitCodeNames = map[int]string{ExitError: "error", ExitUsage: "usage", ExitNotFound: "not_found"}

// wantsJSON reports whether the command line asks for --json output, before any "--" that ends the
// flags. It is read before parsing, so that a command line that fails to parse reports in JSON too.
func wantsJSON(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true", "--json=1", "-json=1":
			return true
		}
	}
	return false
}

// runner holds the state of one Run: the environment, the database flags (which may be given before
// the command or after it), and the name of the command being run, for messages.
type runner struct {
	env     Env
	current string // e.g. "jobs list"
	json    bool   // --json was given: errors are printed as JSON
	// collect, when set, makes a command record its flags here and return without running (for
	// 'pronto completion').
	collect *[]flagInfo

	dbURL     string // --database-url as given
	dbURLSet  bool   // --database-url was given, even empty (which is refused, not the default)
	listenURL string // --database-listen-url as given ("" if not)
	schema    string // --schema as given
	schemaSet bool
}

// command is one runnable command.
type command struct {
	name    string // full name, e.g. "jobs list"
	summary string
	run     func(ctx context.Context, r *runner, args []string) error
}

// group is a command with subcommands ("jobs", "queues", "migrate").
type group struct {
	name    string
	summary string
	subs    []command
}

func (r *runner) groups() []group {
	return []group{
		{name: "jobs", summary: "inspect and manage jobs", subs: []command{
			{name: "jobs list", summary: "list jobs, newest first, with filters", run: cmdJobsList},
			{name: "jobs get", summary: "show one job in full", run: cmdJobsGet},
			{name: "jobs retry", summary: "make a discarded or cancelled job available again", run: cmdJobsRetry},
			{name: "jobs cancel", summary: "cancel a job that has not finished", run: cmdJobsCancel},
			{name: "jobs activate", summary: "make a pending job available", run: cmdJobsActivate},
			{name: "jobs run-now", summary: "make a scheduled or retryable job due now", run: cmdJobsRunNow},
			{name: "jobs set-priority", summary: "change the priority of a job waiting to run", run: cmdJobsSetPriority},
			{name: "jobs delete", summary: "delete a job that is not running", run: cmdJobsDelete},
		}},
		{name: "queues", summary: "inspect, pause and resume queues", subs: []command{
			{name: "queues list", summary: "list queues with job counts per state", run: cmdQueuesList},
			{name: "queues pause", summary: "stop every client from claiming a queue's jobs", run: cmdQueuesPause},
			{name: "queues resume", summary: "let clients claim a queue's jobs again", run: cmdQueuesResume},
			{name: "queues set-max-depth", summary: "bound a queue's unfinished jobs (backpressure)", run: cmdQueuesSetMaxDepth},
			{name: "queues priorities", summary: "count a queue's available jobs per priority", run: cmdQueuesPriorities},
		}},
		{name: "workflows", summary: "inspect and cancel workflows", subs: []command{
			{name: "workflows list", summary: "list workflows, newest first, with their state", run: cmdWorkflowsList},
			{name: "workflows get", summary: "show a workflow's state and step counts", run: cmdWorkflowsGet},
			{name: "workflows jobs", summary: "list a workflow's jobs", run: cmdWorkflowsJobs},
			{name: "workflows cancel", summary: "cancel every unfinished job of a workflow", run: cmdWorkflowsCancel},
		}},
		{name: "clients", summary: "see the clients using the database", subs: []command{
			{name: "clients list", summary: "list live clients: host, queues, workers, leader", run: cmdClientsList},
		}},
		{name: "webhooks", summary: "register the endpoints pronto serve posts events to", subs: []command{
			{name: "webhooks list", summary: "list the registered webhooks", run: cmdWebhooksList},
			{name: "webhooks add", summary: "register a webhook (secret from $PRONTO_WEBHOOK_SECRET)", run: cmdWebhooksAdd},
			{name: "webhooks delete", summary: "remove a webhook", run: cmdWebhooksDelete},
		}},
		{name: "rate-limits", summary: "inspect and set rate and concurrency limits", subs: []command{
			{name: "rate-limits list", summary: "list stored limits with their use", run: cmdRateLimitsList},
			{name: "rate-limits set", summary: "store the limit of a rate key", run: cmdRateLimitsSet},
			{name: "rate-limits delete", summary: "remove a rate key's limit", run: cmdRateLimitsDelete},
		}},
		{name: "tenants", summary: "inspect tenants and set their weights and limits", subs: []command{
			{name: "tenants list", summary: "list tenants with their weights, limits and job counts", run: cmdTenantsList},
			{name: "tenants get", summary: "show one tenant", run: cmdTenantsGet},
			{name: "tenants set", summary: "set a tenant's weight and limits", run: cmdTenantsSet},
			{name: "tenants delete", summary: "forget a tenant's weight and limits", run: cmdTenantsDelete},
		}},
		{name: "cron", summary: "schedule periodic jobs", subs: []command{
			{name: "cron list", summary: "list cron schedules with their next run", run: cmdCronList},
			{name: "cron add", summary: "register a periodic job", run: cmdCronAdd},
			{name: "cron get", summary: "show one cron schedule", run: cmdCronGet},
			{name: "cron delete", summary: "remove a cron schedule", run: cmdCronDelete},
			{name: "cron pause", summary: "stop a cron schedule from firing", run: cmdCronPause},
			{name: "cron resume", summary: "let a paused cron schedule fire again", run: cmdCronResume},
		}},
		{name: "migrate", summary: "create, upgrade or roll back the database schema", subs: []command{
			{name: "migrate up", summary: "apply every pending migration", run: cmdMigrateUp},
			{name: "migrate down", summary: "roll back the latest migrations", run: cmdMigrateDown},
			{name: "migrate status", summary: "list migrations and whether each is applied", run: cmdMigrateStatus},
		}},
	}
}

func (r *runner) commands() []command {
	return []command{
		{name: "demo", summary: "run a self-contained demo: insert a mix of jobs and work them live", run: cmdDemo},
		{name: "enqueue", summary: "insert a job of any kind with JSON args", run: cmdEnqueue},
		{name: "serve", summary: "serve the OJS HTTP API: enqueue and work jobs from any language", run: cmdServe},
		{name: "version", summary: "print the version", run: cmdVersion},
		{name: "completion", summary: "print a bash, zsh or fish completion script", run: cmdCompletion},
	}
}

func (r *runner) run(ctx context.Context, args []string) error {
	fs := r.newFlagSet("pronto [--database-url URL] <command> [arguments] [flags]", "").withDatabase()
	help := fs.Bool("help", false, "show this help")
	fs.BoolVar(help, "h", false, "show this help")
	version := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		return usageErrorf("%s", flagErrorText(fs.FlagSet, err))
	}
	rest := fs.Args()
	if *version {
		return cmdVersion(ctx, r, nil)
	}
	if *help {
		r.topUsage(r.env.Stdout)
		return nil
	}
	if len(rest) == 0 {
		r.topUsage(r.env.Stderr)
		return &exitError{code: ExitUsage, msg: "no command given"}
	}
	name, rest := rest[0], rest[1:]
	if name == "help" {
		return r.help(rest)
	}
	for _, c := range r.commands() {
		if c.name == name {
			r.current = c.name
			return c.run(ctx, r, rest)
		}
	}
	for _, g := range r.groups() {
		if g.name != name {
			continue
		}
		r.current = g.name
		if len(rest) == 0 {
			r.groupUsage(r.env.Stderr, g)
			return &exitError{code: ExitUsage, msg: fmt.Sprintf("%s: no subcommand given", g.name)}
		}
		if rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" || rest[0] == "help" {
			r.groupUsage(r.env.Stdout, g)
			return nil
		}
		for _, c := range g.subs {
			if c.name == g.name+" "+rest[0] {
				r.current = c.name
				return c.run(ctx, r, rest[1:])
			}
		}
		return usageErrorf("unknown command %q", g.name+" "+rest[0])
	}
	return usageErrorf("unknown command %q", name)
}

// help prints the help of a command named by words ("jobs", "list").
func (r *runner) help(words []string) error {
	if len(words) == 0 {
		r.topUsage(r.env.Stdout)
		return nil
	}
	name := strings.Join(words, " ")
	for _, c := range r.commands() {
		if c.name == name {
			r.current = c.name
			return c.run(context.Background(), r, []string{"--help"})
		}
	}
	for _, g := range r.groups() {
		if g.name == name {
			r.groupUsage(r.env.Stdout, g)
			return nil
		}
		for _, c := range g.subs {
			if c.name == name {
				r.current = c.name
				return c.run(context.Background(), r, []string{"--help"})
			}
		}
	}
	return usageErrorf("unknown command %q", name)
}

func (r *runner) topUsage(w io.Writer) {
	fmt.Fprint(w, `pronto: a durable background-job queue (PostgreSQL, Redis, SQLite or in-memory).

Usage:
  pronto [--database-url URL] <command> [arguments] [flags]

Commands:
`)
	for _, c := range r.commands() {
		fmt.Fprintf(w, "  %-19s %s\n", c.name, c.summary)
	}
	for _, g := range r.groups() {
		for _, c := range g.subs {
			fmt.Fprintf(w, "  %-19s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprint(w, `
Database (every command that reads or writes jobs):
  --database-url URL   where the jobs live; default $`+EnvDatabaseURL+`, else `+DefaultDatabaseURL+`
                         postgres://user:pass@host:5432/db   PostgreSQL (postgresql:// also works)
                         redis://host:6379/0                 Redis 7+ (rediss:// for TLS)
                         sqlite:PATH                         an SQLite file (created by 'migrate up')
                         memory:                             an in-memory store that lasts one command
  --schema NAME        PostgreSQL schema holding pronto's tables (default "pronto")
  --database-listen-url URL
                       PostgreSQL behind PgBouncer (transaction pooling): a direct URL for the
                       notification listener; default $`+EnvDatabaseListenURL+` (docs/pgbouncer.md)

Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 not found.

Start with 'pronto demo'. Run 'pronto <command> --help' for a command's flags.
`)
}

func (r *runner) groupUsage(w io.Writer, g group) {
	fmt.Fprintf(w, "pronto %s: %s.\n\nUsage:\n  pronto %s <subcommand> [arguments] [flags]\n\nSubcommands:\n", g.name, g.summary, g.name)
	for _, c := range g.subs {
		fmt.Fprintf(w, "  %-15s %s\n", strings.TrimPrefix(c.name, g.name+" "), c.summary)
	}
	fmt.Fprintf(w, "\nRun 'pronto %s <subcommand> --help' for its flags.\n", g.name)
}
