package dashboard_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
	"github.com/pronto-jobs/pronto/dashboard"
	"github.com/pronto-jobs/pronto/internal/teststore"
	"github.com/pronto-jobs/pronto/internal/uuidv7"
	"github.com/pronto-jobs/pronto/store"
)

// openKind opens a fresh, migrated store of kind (teststore.Kinds), closed and, for Redis, emptied
// of its keys when the test ends.
func openKind(t *testing.T, kind string) store.Store { return teststore.Open(t, kind) }

// dashboardOn serves a dashboard over st; its client works nothing, so jobs stay put.
func dashboardOn(t *testing.T, st store.Store, cfg dashboard.Config) (*httptest.Server, *pronto.Client) {
	t.Helper()
	c, err := pronto.NewClient(st, &pronto.Config{})
	require.NoError(t, err)
	cfg.Client, cfg.Tick = c, 50*time.Millisecond
	h, err := dashboard.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	return srv, c
}

// TestSetPriority: POST /api/jobs/{id}/priority changes the priority of an available, scheduled or
// pending job on every store, answers the one it had, and stores the new one; it refuses bad
// input (400 naming the range), an unknown job (404) and a job no longer waiting (409 naming its
// state), changing nothing.
func TestSetPriority(t *testing.T) {
	for _, kind := range teststore.Kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv, c := dashboardOn(t, openKind(t, kind), dashboard.Config{})
			b := newBrowser(t, srv.URL)
			require.Equal(t, http.StatusOK, b.open())
			insert := func(opts *pronto.InsertOpts) *pronto.JobRow {
				opts.Queue = "prio"
				j, err := c.Insert(ctx, noteArgs{}, opts)
				require.NoError(t, err)
				return j
			}
			setPriority := func(id, body string) (int, map[string]any) {
				code, resp := b.post("/api/jobs/"+id+"/priority", body)
				var out map[string]any
				require.NoError(t, json.Unmarshal([]byte(resp), &out), resp)
				return code, out
			}
			stored := func(id string) int {
				j, err := c.JobGet(ctx, id)
				require.NoError(t, err)
				return j.Priority
			}

			for _, tc := range []struct {
				name       string
				job        *pronto.JobRow
				body       string
				want, prev int
			}{
				{"available", insert(&pronto.InsertOpts{}), `{"priority":10}`, 10, 0},
				{"scheduled", insert(&pronto.InsertOpts{ScheduledAt: time.Now().Add(time.Hour), Priority: 3}), `{"priority":-7}`, -7, 3},
				{"pending", insert(&pronto.InsertOpts{Pending: true}), `{"priority":"low"}`, pronto.PriorityLow, 0},
			} {
				code, out := setPriority(tc.job.ID, tc.body)
				require.Equal(t, http.StatusOK, code, "%s: %v", tc.name, out)
				require.EqualValues(t, tc.want, out["priority"], tc.name)
				require.EqualValues(t, tc.prev, out["previous_priority"], tc.name)
				require.Equal(t, tc.job.ID, out["job"].(map[string]any)["id"], tc.name)
				require.EqualValues(t, tc.want, out["job"].(map[string]any)["priority"], tc.name)
				require.Equal(t, tc.name, out["job"].(map[string]any)["state"], "%s: the state is unchanged", tc.name)
				require.Equal(t, tc.want, stored(tc.job.ID), tc.name)
			}

			j := insert(&pronto.InsertOpts{Priority: 5})
			for _, tc := range []struct{ body, want string }{
				{`{"priority":101}`, "between -100 and 100"},
				{`{"priority":-101}`, "between -100 and 100"},
				{`{"priority":1.5}`, "from -100 to 100"},
				{`{"priority":"urgent"}`, "high, normal, low"},
				{`{"priority":true}`, "from -100 to 100"},
				{`{"priority":null}`, "priority is required"},
				{`{}`, "priority is required"},
				{`{"priority":1,"queue":"other"}`, "unknown field"},
				{`{"priority":`, "bad request body"},
			} {
				code, out := setPriority(j.ID, tc.body)
				require.Equal(t, http.StatusBadRequest, code, "%s: %v", tc.body, out)
				require.Contains(t, out["error"], tc.want, tc.body)
			}
			require.Equal(t, 5, stored(j.ID), "a refused change writes nothing")

			code, out := setPriority(uuidv7.New(), `{"priority":1}`)
			require.Equal(t, http.StatusNotFound, code, "%v", out)
			code, out = setPriority("not-an-id", `{"priority":1}`)
			require.Equal(t, http.StatusBadRequest, code, "%v", out)

			_, err := c.JobCancel(ctx, j.ID)
			require.NoError(t, err)
			code, out = setPriority(j.ID, `{"priority":1}`)
			require.Equal(t, http.StatusConflict, code, "%v", out)
			require.Contains(t, out["error"], "cancelled", "the 409 names the job's state")
			require.Equal(t, 5, stored(j.ID), "a refused change writes nothing")
		})
	}
}

// A read-only dashboard refuses a priority change, as it refuses every action, and the CSRF token
// is required as for the other actions.
func TestSetPriorityRefused(t *testing.T) {
	ctx := context.Background()
	for _, readOnly := range []bool{true, false} {
		srv, c := newDashboard(t, dashboard.Config{ReadOnly: readOnly})
		j, err := c.Insert(ctx, noteArgs{}, nil)
		require.NoError(t, err)
		b := newBrowser(t, srv.URL)
		require.Equal(t, http.StatusOK, b.open())
		if readOnly {
			code, body := b.post("/api/jobs/"+j.ID+"/priority", `{"priority":10}`)
			require.Equal(t, http.StatusForbidden, code, body)
			require.Contains(t, body, "read-only")
		} else {
			code, body := b.do("POST", "/api/jobs/"+j.ID+"/priority", `{"priority":10}`, map[string]string{"Content-Type": "application/json"})
			require.Equal(t, http.StatusForbidden, code, body)
			require.True(t, strings.Contains(body, "CSRF"), body)
		}
		got, err := c.JobGet(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, 0, got.Priority, "refused: unchanged")
	}
}

// TestSetPriorityFromJobPage: an operator sets a waiting job's priority from its page, by a level
// and by a number; the page shows the new priority and says what it was, the store holds it, and
// the jobs list shows it. A finished job's page has no priority control.
func TestSetPriorityFromJobPage(t *testing.T) {
	base, c := opDashboard(t, dashboard.Config{})
	ctx := context.Background()
	j, err := c.Insert(ctx, noteArgs{Text: "x"}, &pronto.InsertOpts{Queue: "prio"})
	require.NoError(t, err)
	u := newOpUI(t)
	u.step("the job's page", chromedp.Navigate(base+"/#/job/"+j.ID),
		u.wait(`document.querySelector('h1 .state[data-state="available"]') !== null && document.getElementById("priority-form") !== null`))
	require.Equal(t, "0", u.str(`document.getElementById("job-priority").textContent`))

	u.step("pick high and set", u.eval(`const s = document.getElementById("priority-level"); s.value = "10"; s.dispatchEvent(new Event("change")); document.getElementById("priority-set").click()`),
		u.wait(`document.getElementById("toast").textContent === "priority 10 (was 0)" && document.getElementById("job-priority").textContent === "10"`))
	got, err := c.JobGet(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, pronto.PriorityHigh, got.Priority)

	// Typed, then Enter (the form's submit).
	u.step("type -3 and press Enter", chromedp.SetValue(`#priority-input`, ""), chromedp.SendKeys(`#priority-input`, "-3\r"),
		u.wait(`document.getElementById("toast").textContent === "priority -3 (was 10)" && document.getElementById("job-priority").textContent === "-3"`))
	got, err = c.JobGet(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, -3, got.Priority)

	// Out of range: the server's refusal is shown, nothing changes.
	u.step("type 500 and set", chromedp.SetValue(`#priority-input`, "500"), u.eval(`document.getElementById("priority-set").click()`),
		u.wait(`document.getElementById("toast").classList.contains("bad") && document.getElementById("toast").textContent.includes("between -100 and 100")`))
	got, err = c.JobGet(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, -3, got.Priority)

	u.step("the jobs list shows the priority", chromedp.Navigate(base+"/#/jobs?queue=prio"),
		u.wait(`(document.querySelector('#jobs tr[data-id="`+j.ID+`"] td[data-priority]') || {}).textContent === "-3"`))

	_, err = c.JobCancel(ctx, j.ID)
	require.NoError(t, err)
	u.step("a cancelled job's page", chromedp.Navigate(base+"/#/job/"+j.ID),
		u.wait(`document.querySelector('h1 .state[data-state="cancelled"]') !== null`))
	require.Equal(t, "none", u.str(`document.getElementById("priority-form") ? "shown" : "none"`))
	u.mu.Lock()
	defer u.mu.Unlock()
	require.Empty(t, u.jsErrs, "errors in the page")
}
