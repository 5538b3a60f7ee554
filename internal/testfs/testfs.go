// Package testfs lets tests put a directory in the state a failing file system leaves it in.
package testfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// MakeReadOnly makes dir read-only until the returned undo is called (or the test ends): as root, a
// read-only bind mount of dir on itself, so that the kernel answers for the path as it would for a
// read-only remount (root ignores file modes); otherwise the modes of dir and of files (names in
// dir) are cleared of write. In CI a bind mount that fails fails the test; elsewhere (root without
// CAP_SYS_ADMIN) it skips with the reason.
func MakeReadOnly(t testing.TB, dir string, files ...string) (undo func()) {
	t.Helper()
	if os.Geteuid() == 0 {
		if out, err := exec.Command("mount", "--bind", dir, dir).CombinedOutput(); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("cannot bind-mount as root: %v: %s", err, out)
			}
			t.Skipf("cannot bind-mount here (root without CAP_SYS_ADMIN?): %v: %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
		if out, err := exec.Command("mount", "-o", "remount,bind,ro", dir).CombinedOutput(); err != nil {
			t.Fatalf("remount read-only: %v: %s", err, out)
		}
		return func() {
			t.Helper()
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Fatalf("umount: %v: %s", err, out)
			}
		}
	}
	for _, f := range files {
		if err := os.Chmod(filepath.Join(dir, f), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	return func() {
		t.Helper()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.Chmod(filepath.Join(dir, f), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
