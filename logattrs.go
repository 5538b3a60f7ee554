package pronto

// jobAttrs returns the slog attributes every log line about a job carries (its id, kind, queue and
// attempt), followed by extra key-value pairs.
func jobAttrs(row *JobRow, extra ...any) []any {
	return append([]any{"job", row.ID, "kind", row.Kind, "queue", row.Queue, "attempt", row.Attempt}, extra...)
}
