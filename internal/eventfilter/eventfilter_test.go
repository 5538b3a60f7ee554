package eventfilter

import "testing"

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		list   []string
		v      string
		prefix bool
		want   bool
	}{
		{nil, "job.completed", true, true},
		{[]string{"job.completed"}, "job.completed", false, true},
		{[]string{"job.completed"}, "job.failed", true, false},
		{[]string{"job.*"}, "job.failed", true, true},
		{[]string{"job.*"}, "job.failed", false, false}, // a queue named "job.*" is only itself
		{[]string{"job.*"}, "workflow.completed", true, false},
		{[]string{"*"}, "anything", true, true},
		{[]string{"email", "billing"}, "billing", false, true},
	} {
		if got := Match(c.list, c.v, c.prefix); got != c.want {
			t.Errorf("Match(%q, %q, %v) = %v, want %v", c.list, c.v, c.prefix, got, c.want)
		}
	}
}
