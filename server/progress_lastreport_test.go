package server

import (
	"encoding/json"
	"testing"

	"github.com/pronto-jobs/pronto"
)

// TestLastReportKeepsTheLastData: the final event of a progress stream reports the last data the
// stream read when the row that ended it carries no progress, or its value without its data (a row
// read before the last report, or after its progress was cleared: a CI run's stream of a job
// removed as it completed ended with no data).
func TestLastReportKeepsTheLastData(t *testing.T) {
	v := 0.5
	last := &pronto.JobProgress{Value: &v, Data: json.RawMessage(`{"rows":5}`)}
	one := 1.0
	bare := &pronto.JobProgress{Value: &one}
	own := &pronto.JobProgress{Value: &one, Data: json.RawMessage(`{"rows":9}`)}
	if got := lastReport(nil, last); got != last {
		t.Fatalf("no progress on the ending row: got %+v, want the last read", got)
	}
	if got := lastReport(bare, last); string(got.Data) != `{"rows":5}` || *got.Value != 1 || bare.Data != nil {
		t.Fatalf("a bare ending row: got %+v (the row itself must not change), want its value with the last data", got)
	}
	if got := lastReport(own, last); got != own {
		t.Fatalf("an ending row with its own data: got %+v, want it", got)
	}
	if got := lastReport(nil, nil); got != nil {
		t.Fatalf("nothing read: got %+v", got)
	}
}
