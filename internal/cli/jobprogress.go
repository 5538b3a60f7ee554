package cli

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pronto-jobs/pronto"
)

// jobProgressJSON is a job's reported progress as --json prints it.
type jobProgressJSON struct {
	Value     *float64        `json:"value"`
	Data      json.RawMessage `json:"data,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func progressJSON(p *pronto.JobProgress) *jobProgressJSON {
	if p == nil {
		return nil
	}
	return &jobProgressJSON{Value: p.Value, Data: p.Data, UpdatedAt: p.UpdatedAt}
}

// formatProgress renders progress as "47% {data} (updated 3s ago)".
func formatProgress(p *pronto.JobProgress, now time.Time) string {
	s := "-"
	if p.Value != nil {
		s = fmt.Sprintf("%.0f%%", *p.Value*100)
	}
	if len(p.Data) > 0 {
		s += " " + compactJSON(p.Data)
	}
	return s + " (updated " + formatTime(p.UpdatedAt, now) + ")"
}
