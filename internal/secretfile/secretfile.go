// Package secretfile writes files that may hold a secret (a pre-shared key in a device's
// configuration) so that only their owner can read them, whatever was at the path before.
package secretfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write puts data at path as a file of mode 0600. It writes a new file beside path and renames
// it over whatever was there, so an existing file's wider mode is never kept, no reader sees a
// half-written file, and a failure leaves the old file as it was.
func Write(path string, data []byte) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 already; say so in case a umask or platform differs.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
