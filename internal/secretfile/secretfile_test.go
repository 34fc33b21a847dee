package secretfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteIsOwnerOnlyWhateverExisted(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		before os.FileMode // 0: no file before
	}{
		{"new file", 0},
		{"world-readable file", 0o644},
		{"world-writable file", 0o666},
		{"owner-only file", 0o600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".conf")
			if tc.before != 0 {
				if err := os.WriteFile(path, []byte("old contents, longer than the new ones"), tc.before); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tc.before); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			if err := Write(path, []byte("psk")); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want 0600", st.Mode().Perm())
			}
			if b, _ := os.ReadFile(path); string(b) != "psk" {
				t.Errorf("contents %q, want %q", b, "psk")
			}
		})
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestWriteFailureKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub") // a directory where the file should go: rename fails
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("psk")); err == nil {
		t.Fatal("writing over a non-empty directory succeeded")
	}
	if _, err := os.Stat(filepath.Join(path, "keep")); err != nil {
		t.Errorf("the directory's contents are gone: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
