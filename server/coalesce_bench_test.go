package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto"
)

// BenchmarkHTTPEnqueueConcurrent measures single-job enqueues (POST /ojs/v1/jobs) made over real
// HTTP on the loopback by 100 concurrent clients, per store, with the client's insert coalescing
// (the default) and with every insert written on its own (InsertBatchSize 1). ops/s is the figure
// to watch; the load generator shares the machine with the server and the database.
func BenchmarkHTTPEnqueueConcurrent(b *testing.B) {
	for _, kind := range storeKinds {
		for _, mode := range []struct {
			name string
			size int
		}{{"coalesced", 0}, {"alone", 1}} {
			b.Run(kind+"/"+mode.name, func(b *testing.B) {
				client, err := pronto.NewClient(openStore(b, kind), &pronto.Config{InsertBatchSize: mode.size})
				if err != nil {
					b.Fatal(err)
				}
				s, _ := newTestServer(b, Config{Client: client})
				srv := httptest.NewServer(s)
				b.Cleanup(srv.Close)
				hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
				b.Cleanup(hc.CloseIdleConnections)
				benchHTTP(b, 100, func() error {
					resp, err := hc.Post(srv.URL+"/ojs/v1/jobs", "application/json", bytes.NewReader(benchJob))
					if err != nil {
						return err
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						return fmt.Errorf("enqueue: status %d", resp.StatusCode)
					}
					return nil
				})
			})
		}
	}
}

// BenchmarkHTTPFetchAckConcurrent measures fetch-then-ack round trips (POST /ojs/v1/workers/fetch of
// one job, then POST /ojs/v1/workers/ack with its claim token) made over real HTTP on the loopback
// by 100 concurrent workers, per store, with concurrent fetches sharing claims and acks sharing
// writes (the default) and with each on its own (FetchBatchSize 1).
func BenchmarkHTTPFetchAckConcurrent(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		for _, mode := range []struct {
			name string
			size int
		}{{"shared", 0}, {"alone", 1}} {
			b.Run(kind+"/"+mode.name, func(b *testing.B) {
				client, err := pronto.NewClient(openStore(b, kind), &pronto.Config{FetchBatchSize: mode.size})
				if err != nil {
					b.Fatal(err)
				}
				for left := b.N + 200; left > 0; left -= 1000 {
					batch := make([]pronto.OJSJob, min(left, 1000))
					for i := range batch {
						batch[i] = pronto.OJSJob{Kind: "bench.fetch", Args: json.RawMessage(`[1]`)}
					}
					if _, err := client.InsertOJS(context.Background(), batch); err != nil {
						b.Fatal(err)
					}
				}
				s, _ := newTestServer(b, Config{Client: client})
				srv := httptest.NewServer(s)
				b.Cleanup(srv.Close)
				hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
				b.Cleanup(hc.CloseIdleConnections)
				var workers atomic.Int64
				benchHTTP(b, 100, func() error {
					// 100 workers, as the clients: each worker's id is recorded once, not per fetch.
					worker := fmt.Sprintf("w%d", workers.Add(1)%100)
					var fetched struct {
						Jobs []struct {
							ID         string `json:"id"`
							ClaimToken string `json:"claim_token"`
						} `json:"jobs"`
					}
					if err := postJSON(hc, srv.URL+"/ojs/v1/workers/fetch",
						fmt.Sprintf(`{"queues":["default"],"worker_id":%q}`, worker), &fetched); err != nil {
						return err
					}
					if len(fetched.Jobs) != 1 {
						return fmt.Errorf("fetch: %d jobs", len(fetched.Jobs))
					}
					return postJSON(hc, srv.URL+"/ojs/v1/workers/ack", fmt.Sprintf(`{"job_id":%q,"worker_id":%q,"claim_token":%q}`,
						fetched.Jobs[0].ID, worker, fetched.Jobs[0].ClaimToken), nil)
				})
			})
		}
	}
}

// postJSON posts body to url, requires 200 and decodes the answer into out (unless nil).
func postJSON(hc *http.Client, url, body string, out any) error {
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: status %d: %s", url, resp.StatusCode, msg)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// benchHTTP runs b.N calls of op from clients goroutines and reports ops/s.
func benchHTTP(b *testing.B, clients int, op func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && next.Add(1) <= int64(b.N) {
				if err := op(); err != nil {
					b.Error(err)
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}
