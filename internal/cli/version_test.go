package cli

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/internal/version"
)

// TestOneVersionString: 'pronto version' and the manifest of 'pronto serve' report the same version.
func TestOneVersionString(t *testing.T) {
	out := run(t, "version").ok(t).stdout
	if !strings.HasPrefix(out, "pronto "+version.String()+" go1.") {
		t.Fatalf("pronto version: %q, want the version %q", out, version.String())
	}
	db := "sqlite:" + filepath.Join(t.TempDir(), "serve.db")
	base, stop := startServe(t, nil, "--addr", "127.0.0.1:0", "--database-url", db)
	defer stop()
	resp, err := http.Get(base + "/ojs/manifest")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Implementation struct {
			Version string `json:"version"`
		} `json:"implementation"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m.Implementation.Version != version.String() {
		t.Fatalf("manifest version %q, pronto version %q", m.Implementation.Version, version.String())
	}
}
