// Command pronto is the command line of the pronto job queue: run a live demo, migrate a database,
// enqueue jobs, and inspect or manage jobs and queues on PostgreSQL, SQLite or an in-memory store.
//
// Run 'pronto --help' for the commands, and 'pronto <command> --help' for each command's flags. The
// commands themselves live in internal/cli, so that tests run them in-process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pronto-jobs/pronto/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], cli.OSEnv())
	stop()
	os.Exit(code)
}
