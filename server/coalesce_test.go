package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pronto-jobs/pronto"
)

// TestConcurrentEnqueuesAnsweredOneByOne sends many single-job enqueues at once over HTTP, which
// the client merges into batched store writes: each request still gets its own answer, a 201 with
// its own job, or a 409 for the enqueues refused by a unique key another one holds.
func TestConcurrentEnqueuesAnsweredOneByOne(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			client, err := pronto.NewClient(openStore(t, kind), nil)
			require.NoError(t, err)
			s, _ := newTestServer(t, Config{Client: client})
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
			t.Cleanup(hc.CloseIdleConnections)

			post := func(body string) (int, map[string]any) {
				resp, err := hc.Post(srv.URL+"/ojs/v1/jobs", "application/json", bytes.NewReader([]byte(body)))
				if err != nil {
					t.Error(err)
					return 0, nil
				}
				defer resp.Body.Close()
				raw, _ := io.ReadAll(resp.Body)
				var out map[string]any
				if err := json.Unmarshal(raw, &out); err != nil {
					t.Errorf("response %q: %v", raw, err)
				}
				return resp.StatusCode, out
			}
			const plain, uniques = 60, 8
			ids := make([]string, plain)
			statuses := make([]int, uniques)
			var wg sync.WaitGroup
			for i := range plain {
				wg.Add(1)
				go func() {
					defer wg.Done()
					status, out := post(fmt.Sprintf(`{"type":"email.send","args":[%d]}`, i))
					if status != http.StatusCreated {
						t.Errorf("enqueue %d: status %d %v", i, status, out)
						return
					}
					job := out["job"].(map[string]any)
					if args := job["args"].([]any); len(args) != 1 || args[0].(float64) != float64(i) {
						t.Errorf("enqueue %d answered with job %v", i, job)
					}
					ids[i] = job["id"].(string)
				}()
			}
			for i := range uniques {
				wg.Add(1)
				go func() {
					defer wg.Done()
					statuses[i], _ = post(`{"type":"report.build","args":[1],"options":{"unique":{"keys":["type","args"],"on_conflict":"reject"}}}`)
				}()
			}
			wg.Wait()
			seen := map[string]bool{}
			for i, id := range ids {
				require.NotEmpty(t, id, "enqueue %d", i)
				require.False(t, seen[id], "job %s answered twice", id)
				seen[id] = true
			}
			created, conflicts := 0, 0
			for _, st := range statuses {
				switch st {
				case http.StatusCreated:
					created++
				case http.StatusConflict:
					conflicts++
				default:
					t.Errorf("unique enqueue: status %d", st)
				}
			}
			require.Equal(t, 1, created)
			require.Equal(t, uniques-1, conflicts)
		})
	}
}
