package postgres

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// handedSample is a hand-off notification's job as PostgreSQL's json_build_array writes it
// (handedPayload): a job of 31 columns with args, meta, tags and a claim token.
const handedSample = `["01937a4e-8f00-7c3a-9b1e-5d2c8a4f6e10", "bench.job", "default", {"w": 10000, "ins": 1732848000123456, "seq": 42}, {"trace": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, 0, "active", 1, 25, [], null, ["a", "b\"c"], null, null, 1732848000123456, 1732848000123456, 1732848000125000, null, null, 1732848030375000, "host-1/1234/default", null, null, null, null, null, null, null, null, null, "7b0c6f1e-2d4a-4e8b-9c3f-1a2b3c4d5e6f"]`

func TestDecodeHanded(t *testing.T) {
	j, full, err := decodeHanded([]byte(handedSample))
	if err != nil || !full {
		t.Fatalf("decodeHanded: full %v, error %v", full, err)
	}
	if j.ID != "01937a4e-8f00-7c3a-9b1e-5d2c8a4f6e10" || j.Kind != "bench.job" || j.Queue != "default" ||
		j.Attempt != 1 || j.MaxAttempts != 25 || j.State != "active" || j.WorkerID != "host-1/1234/default" ||
		j.ClaimToken != "7b0c6f1e-2d4a-4e8b-9c3f-1a2b3c4d5e6f" {
		t.Fatalf("decoded job %+v", j)
	}
	if string(j.Args) != `{"w": 10000, "ins": 1732848000123456, "seq": 42}` {
		t.Errorf("args %s", j.Args)
	}
	if strings.Join(j.Tags, "|") != `a|b"c` {
		t.Errorf("tags %q", j.Tags)
	}
	if !j.CreatedAt.Equal(time.UnixMicro(1732848000123456)) || !j.LeaseExpiresAt.Equal(time.UnixMicro(1732848030375000)) {
		t.Errorf("times: created %v, lease %v", j.CreatedAt, j.LeaseExpiresAt)
	}
	if !j.CompletedAt.IsZero() || j.UniqueKey != "" || j.Result != nil {
		t.Errorf("null columns decoded as values: %+v", j)
	}

	// The short form, for jobs too large for a notification.
	j, full, err = decodeHanded([]byte(`["01937a4e-8f00-7c3a-9b1e-5d2c8a4f6e10", "7b0c6f1e-2d4a-4e8b-9c3f-1a2b3c4d5e6f"]`))
	if err != nil || full || j.ID != "01937a4e-8f00-7c3a-9b1e-5d2c8a4f6e10" || j.ClaimToken != "7b0c6f1e-2d4a-4e8b-9c3f-1a2b3c4d5e6f" {
		t.Fatalf("short form: %+v, full %v, error %v", j, full, err)
	}
}

func TestDecodeHandedRefusesMalformed(t *testing.T) {
	// Every prefix of a good payload is malformed; none may panic or decode.
	for n := range len(handedSample) {
		if _, _, err := decodeHanded([]byte(handedSample[:n])); !errors.Is(err, errHanded) {
			t.Fatalf("prefix of %d bytes: error %v, want errHanded", n, err)
		}
	}
	for _, bad := range []string{
		``, `{}`, `[1,]`, `[1 2]`, `["a"]x`, `[["a"]}`, `["\"]`,
		strings.Replace(handedSample, `0, "active", 1, 25`, `0, "active", "1", 25`, 1),        // a string for an integer
		strings.Replace(handedSample, `0, "active", 1, 25`, `0, "active", 1.5, 25`, 1),        // not an integer
		strings.Replace(handedSample, `0, "active", 1, 25`, `0, "active", 4294967296, 25`, 1), // beyond int4
		strings.Replace(handedSample, `"bench.job"`, `7`, 1),                                  // a number for a string
		strings.Replace(handedSample, `"01937a4e-8f00`, `"x1937a4e-8f00`, 1),                  // not a UUID
		strings.Replace(handedSample, `["a", "b\"c"]`, `["a", 1]`, 1),                         // a number among strings
		`[` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100) + `]`,                       // too deep
	} {
		if _, _, err := decodeHanded([]byte(bad)); err == nil {
			t.Errorf("decodeHanded(%.80q) decoded", bad)
		}
	}
}

func BenchmarkDecodeHanded(b *testing.B) {
	payload := []byte(handedSample)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := decodeHanded(payload); err != nil {
			b.Fatal(err)
		}
	}
}
