// Package eventfilter matches OJS events against the list filters of ojs-events.md 6.4 (types,
// queues, job_types), which the events endpoint, its stream and the webhooks share.
package eventfilter

import "strings"

// Match reports whether v passes list: an empty list passes everything, else v must equal an entry
// or, with prefix (the types filter), start with an entry's text before its closing "*" ("job.*").
func Match(list []string, v string, prefix bool) bool {
	if len(list) == 0 {
		return true
	}
	for _, p := range list {
		if p == v {
			return true
		}
		if pre, ok := strings.CutSuffix(p, "*"); prefix && ok && strings.HasPrefix(v, pre) {
			return true
		}
	}
	return false
}
