//go:build !unix

package sqlite

// canWrite cannot ask the operating system here without opening the file; the probe relies on
// SQLite's own word (a connection opened read-only).
func canWrite(string) error { return nil }

// readOnlyFS is never asked where canWrite answers nil.
func readOnlyFS(error) bool { return false }
