package cli

import (
	"context"
	"fmt"

	"github.com/pronto-jobs/pronto"
)

// listCommand is an unpaged list command ('cron list', 'tenants list', 'rate-limits list'): it
// reads every item of type T, then prints them as a table, or with --json as writeList's object of
// J items under key.
type listCommand[T, J any] struct {
	synopsis, about string
	key             string // the --json object's key for the items
	empty           string // told on standard error instead of an empty table
	// list is a method expression such as (*pronto.Client).CronList, hence the order of its parameters.
	list   func(c *pronto.Client, ctx context.Context) ([]T, error)
	toJSON func(T) J
	table  func(r *runner, items []T) error
}

func (l listCommand[T, J]) run(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet(l.synopsis, l.about).withDatabase()
	asJSON := fs.Bool("json", false, fmt.Sprintf(`print {%q: [...], "next": ""} as JSON`, l.key))
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	c, db, err := r.adminClient(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	items, err := l.list(c, ctx)
	if err != nil {
		return errorf("%v", err)
	}
	if *asJSON {
		out := make([]J, len(items))
		for i, it := range items {
			out[i] = l.toJSON(it)
		}
		return writeList(r.env.Stdout, l.key, out, "")
	}
	if len(items) == 0 {
		fmt.Fprintln(r.env.Stderr, l.empty)
		return nil
	}
	return l.table(r, items)
}
