package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pronto-jobs/pronto"
)

// parseArgsJSON reads --args: a JSON array is the job's OJS args as they are; any other JSON value (an
// object, usually) becomes the array's one element, which is what pronto's typed Go workers decode.
// It returns the value to hand the client and the final args array.
func parseArgsJSON(text string) (elem, array json.RawMessage, err error) {
	trimmed := bytes.TrimSpace([]byte(text))
	if len(trimmed) == 0 {
		return nil, nil, usageErrorf("--args is empty: give a JSON object or array, for example --args '{\"to\":\"a@example.com\"}'")
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, nil, usageErrorf("--args is not valid JSON: %v", err)
	}
	if dec.More() || dec.InputOffset() != int64(len(trimmed)) {
		return nil, nil, usageErrorf("--args has text after its JSON value (offset %d)", dec.InputOffset())
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, nil, usageErrorf("--args is not valid JSON: %v", err)
	}
	compact := json.RawMessage(buf.Bytes())
	if _, ok := v.([]any); ok {
		return compact, compact, nil
	}
	return compact, json.RawMessage("[" + string(compact) + "]"), nil
}

// parseMetaJSON reads --meta: a JSON object, returned compacted but otherwise as written, so that
// its numbers stay exact and what no store can hold (bytes that are not UTF-8, a NUL) is refused by
// the library as in --args, not rewritten by a decoder.
func parseMetaJSON(text string) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace([]byte(text))
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, usageErrorf("enqueue: --meta must be a JSON object, for example '{\"tenant\":\"acme\"}'")
	}
	if dec.More() || dec.InputOffset() != int64(len(trimmed)) {
		return nil, usageErrorf("enqueue: --meta has text after its JSON object (offset %d)", dec.InputOffset())
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, trimmed); err != nil {
		return nil, usageErrorf("enqueue: --meta is not valid JSON: %v", err)
	}
	return buf.Bytes(), nil
}

// readArgsText resolves --args: "@FILE" reads a file, "-" reads standard input, anything else is the
// JSON. A file or standard input is read up to the args limit (pronto.DefaultMaxArgsBytes) and
// refused beyond it, so a huge file costs no more memory than the limit.
func (r *runner) readArgsText(v string) (string, error) {
	var src io.Reader
	switch {
	case v == "-":
		src = r.env.Stdin
	case strings.HasPrefix(v, "@"):
		f, err := os.Open(v[1:])
		if err != nil {
			return "", usageErrorf("%s: --args %s: %v", r.current, v, err)
		}
		defer f.Close()
		src = f
	default:
		return v, nil
	}
	const limit = pronto.DefaultMaxArgsBytes
	b, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		return "", errorf("%s: reading --args %s: %v", r.current, v, err)
	}
	if len(b) > limit {
		return "", usageErrorf("%s: --args %s: larger than the args limit of %d bytes (1 MiB)", r.current, v, limit)
	}
	return string(b), nil
}

func cmdEnqueue(ctx context.Context, r *runner, args []string) error {
	fs := r.newFlagSet("pronto enqueue KIND [--args JSON] [flags]",
		"Insert one job of any kind and print its id (or the whole job with --json). KIND is an OJS type\n"+
			"such as email.send. --args is a JSON array (the job's OJS args, as they are) or any other\n"+
			"JSON value, usually an object, which becomes the array's one element: the form pronto's typed\n"+
			"Go workers decode. A job waits in its queue until a client with a worker for its kind claims it.\n\n"+
			"Example:\n"+
			"  pronto enqueue email.send --args '{\"to\":\"ada@example.com\"}' --queue email --priority 10").withDatabase()
	argsText := fs.String("args", "{}", "the job's args: `JSON`, @FILE to read a file, or - to read standard input")
	queue := fs.String("queue", pronto.DefaultQueue, "`QUEUE` to insert into")
	priority := fs.priority(fmt.Sprintf("`N` from %d to %d, or high (10), normal (0) or low (-10); higher runs first", pronto.PriorityMin, pronto.PriorityMax))
	delay := fs.duration("delay", 0, "run no sooner than `DURATION` from now (for example 30s, 5m)")
	at := fs.String("at", "", "run no sooner than `TIME` (RFC 3339, for example 2030-01-02T15:04:05Z)")
	maxAttempts := fs.Int("max-attempts", 0, "attempts before the job is discarded, `N` including the first (default: the retry policy's, 3)")
	timeout := fs.duration("timeout", 0, "bound each attempt to `DURATION` (default: none)")
	var tags listValue
	fs.Var(&tags, "tag", "label the job with `TAGS` (repeatable or comma-separated)")
	meta := fs.String("meta", "", "the job's meta, a JSON `OBJECT`")
	id := fs.String("id", "", "the job's `ID`, a UUIDv7 (default: a new one)")
	tenant := fs.String("tenant", "", "the job's `TENANT`, its fairness key (see 'pronto tenants')")
	pending := fs.Bool("pending", false, "insert the job pending: it waits for 'pronto jobs activate ID'")
	asJSON := fs.Bool("json", false, "print the inserted job as JSON instead of its id")
	pos, err := fs.parse(args, 1, 1)
	if err != nil {
		return err
	}
	kind := pos[0]
	if !pronto.ValidKind(kind) {
		return usageErrorf("enqueue: invalid kind %q: kinds are %s", kind, pronto.KindRule)
	}
	opts := &pronto.InsertOpts{Queue: *queue, Priority: *priority, Delay: *delay, MaxAttempts: *maxAttempts,
		Timeout: *timeout, Tags: tags, Pending: *pending, Tenant: *tenant}
	if !pronto.ValidQueueName(*queue) {
		return usageErrorf("enqueue: invalid queue name %q: queue names are %s", *queue, pronto.QueueNameRule)
	}
	if *delay < 0 || *timeout < 0 || *maxAttempts < 0 {
		return usageErrorf("enqueue: --delay, --timeout and --max-attempts must not be negative")
	}
	if *at != "" {
		if *delay != 0 {
			return usageErrorf("enqueue: give --delay or --at, not both")
		}
		t, err := time.Parse(time.RFC3339Nano, *at)
		if err != nil {
			return usageErrorf("enqueue: --at %q: not an RFC 3339 time such as 2030-01-02T15:04:05Z", *at)
		}
		opts.ScheduledAt = t
	}
	var metaJSON json.RawMessage
	if *meta != "" {
		if metaJSON, err = parseMetaJSON(*meta); err != nil {
			return err
		}
	}
	if *id != "" {
		jid, err := parseJobID(*id)
		if err != nil {
			return err
		}
		opts.ID = jid
	}
	text, err := r.readArgsText(*argsText)
	if err != nil {
		return err
	}
	_, array, err := parseArgsJSON(text)
	if err != nil {
		return usageErrorf("enqueue: %v", err)
	}

	db, err := r.open(ctx, openOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := pronto.NewClient(db.store, nil)
	if err != nil {
		return errorf("%v", err)
	}
	var j *pronto.JobRow
	// InsertOJS takes the meta as raw JSON: checked by the library as the args are, numbers unrounded.
	rows, err := c.InsertOJS(ctx, []pronto.OJSJob{{Kind: kind, Args: array, Meta: metaJSON, Opts: *opts}})
	if err == nil {
		j = rows[0]
	}
	switch {
	case errors.Is(err, pronto.ErrInvalidArgs):
		return usageErrorf("enqueue: %v", err)
	case errors.Is(err, pronto.ErrDuplicate):
		return errorf("enqueue: a job with id %s already exists", opts.ID)
	case err != nil:
		return errorf("enqueue: %v", err)
	}
	if *asJSON {
		return writeJSON(r.env.Stdout, toJSON(j))
	}
	fmt.Fprintln(r.env.Stdout, j.ID)
	return nil
}
