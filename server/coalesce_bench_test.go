package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
	for _, kind := range []string{"memory", "sqlite", "postgres"} {
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
