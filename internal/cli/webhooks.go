package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/internal/isodur"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/webhook"
)

// EnvWebhookSecret is where 'webhooks add' reads a webhook's secret: never from the command line,
// which other users of the machine can read in the process list.
const EnvWebhookSecret = "PRONTO_WEBHOOK_SECRET"

// webhookJSON is a webhook as 'webhooks list --json' prints it: never its secret.
type webhookJSON struct {
	ID          string   `json:"id"`
	URL         string   `json:"url"`
	Types       []string `json:"types"`
	Queues      []string `json:"queues"`
	JobTypes    []string `json:"job_types"`
	Timeout     string   `json:"timeout,omitempty"` // ISO 8601, as every duration in the JSON output
	MaxAttempts int      `json:"max_attempts,omitempty"`
	Enabled     bool     `json:"enabled"`
	HasSecret   bool     `json:"has_secret"`
}

// webhookSettings opens the database and returns its store as the keeper of the registrations.
func (r *runner) webhookSettings(ctx context.Context) (store.SettingStore, *database, error) {
	_, db, err := r.adminClient(ctx)
	if err != nil {
		return nil, nil, err
	}
	ss, ok := db.store.(store.SettingStore)
	if !ok {
		db.Close()
		return nil, nil, errorf("%s keeps no settings: webhooks need a store that does", db.t.display)
	}
	return ss, db, nil
}

func cmdWebhooksList(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto webhooks list [flags]",
		"List the registered webhooks (pronto serve delivers their events; see docs/webhooks.md).").withDatabase()
	asJSON := fs.Bool("json", false, `print {"webhooks": [...], "next": ""} as JSON`)
	if _, err := fs.parse(args, 0, 0); err != nil {
		return err
	}
	ss, db, err := r.webhookSettings(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	hooks, err := webhook.List(ctx, ss)
	if err != nil {
		return errorf("listing webhooks in %s: %v", db.t.display, err)
	}
	if *asJSON {
		out := make([]webhookJSON, len(hooks))
		for i, h := range hooks {
			out[i] = webhookJSON{ID: h.ID, URL: h.URL, Types: nonNilList(h.Types), Queues: nonNilList(h.Queues), JobTypes: nonNilList(h.JobTypes),
				MaxAttempts: h.MaxAttempts, Enabled: !h.Disabled, HasSecret: h.HasSecret()}
			if h.Timeout > 0 {
				out[i].Timeout = isodur.Format(h.Timeout)
			}
		}
		return writeList(r.env.Stdout, "webhooks", out, "")
	}
	if len(hooks) == 0 {
		fmt.Fprintln(r.env.Stderr, "no webhooks: add one with 'pronto webhooks add URL'")
		return nil
	}
	tw := tabwriter.NewWriter(r.env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "ID\tURL\tTYPES\tQUEUES\tJOB TYPES\tSIGNED\tENABLED\n")
	all := func(l []string) string {
		if len(l) == 0 {
			return "*"
		}
		return strings.Join(l, ",")
	}
	for _, h := range hooks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%v\n", h.ID, h.URL, all(h.Types), all(h.Queues), all(h.JobTypes), h.HasSecret(), !h.Disabled)
	}
	return tw.Flush()
}

func nonNilList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func cmdWebhooksAdd(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto webhooks add URL [flags]",
		"Register a webhook: pronto serve posts it every event its filters take, signed with the secret\n"+
			"read from $"+EnvWebhookSecret+" when set (X-OJS-Signature: sha256=HMAC of the body).\n\n"+
			"Example:\n"+
			"  "+EnvWebhookSecret+"=… pronto webhooks add https://hooks.example.com/pronto --types job.discarded,workflow.*").withDatabase()
	types := fs.String("types", "", "event `TYPES` to deliver, comma-separated; \"job.*\" matches a prefix (default: every type)")
	queues := fs.String("queues", "", "deliver only events of these `QUEUES` (comma-separated; default: every queue)")
	jobTypes := fs.String("job-types", "", "deliver only events of jobs of these `KINDS` (comma-separated; default: every kind)")
	timeout := fs.duration("timeout", 0, fmt.Sprintf("bound of one POST, `DURATION` (default %s, at most %s)", webhook.DefaultTimeout, webhook.MaxTimeout))
	maxAttempts := fs.Int("max-attempts", 0, fmt.Sprintf("tries of one delivery, `N` (default %d, at most %d)", webhook.DefaultMaxAttempts, webhook.MaxAttemptsLimit))
	disabled := fs.Bool("disabled", false, "register it disabled: no deliveries until enabled")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	h := webhook.Webhook{URL: pos[0], Secret: r.env.getenv(EnvWebhookSecret), Types: splitList(*types), Queues: splitList(*queues),
		JobTypes: splitList(*jobTypes), Timeout: *timeout, MaxAttempts: *maxAttempts, Disabled: *disabled}
	if err := h.Validate(); err != nil {
		return usageErrorf("webhooks add: %v", err)
	}
	ss, db, err := r.webhookSettings(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	stored, err := webhook.Put(ctx, ss, h)
	if err != nil {
		return errorf("%v", err)
	}
	fmt.Fprintln(r.env.Stdout, stored.ID)
	if !stored.HasSecret() {
		fmt.Fprintf(r.env.Stderr, "webhook %s is not signed: set $%s to sign its deliveries\n", stored.ID, EnvWebhookSecret)
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func cmdWebhooksDelete(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto webhooks delete ID [flags]",
		"Remove a webhook; its deliveries still queued are cancelled when their turn comes.").withDatabase()
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	if !uuidv7.Valid(pos[0]) {
		return usageErrorf("webhooks delete: %q is not a webhook id (a lowercase UUIDv7, as 'pronto webhooks list' shows)", pos[0])
	}
	ss, db, err := r.webhookSettings(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := webhook.Delete(ctx, ss, pos[0]); err != nil {
		if errors.Is(err, pronto.ErrNotFound) {
			return notFoundf("no webhook %s", pos[0])
		}
		return errorf("%v", err)
	}
	fmt.Fprintf(r.env.Stdout, "webhook %s deleted\n", pos[0])
	return nil
}
