// Package version is the version every binary reports (--version, the startup log and the
// bnerd_vpn_build_info metric).
//
// A release build sets it with the linker:
//
//	go build -ldflags "-X github.com/bnerd/bnerd-vpn-operator/internal/version.Version=v1.2.3" ./cmd/...
//
// Without that, the version comes from what the Go toolchain stamped into the binary: the main
// module's version (from the VCS tag or a pseudo-version since Go 1.24), else the VCS revision
// ("-dirty" with uncommitted changes), else "dev" (go run, go test).
package version

import (
	"runtime/debug"
	"strings"
)

// Version is set at link time (-X); empty means "ask the build info".
var Version string

// Get is the binary's version (see the package comment).
func Get() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(Version, bi)
}

// Dev is the version of a binary that carries neither a linker-set version nor VCS information.
const Dev = "dev"

// resolve picks the version: the linker's, the main module's, the VCS revision, or Dev.
func resolve(linked string, bi *debug.BuildInfo) string {
	if v := strings.TrimSpace(linked); v != "" {
		return v
	}
	if bi == nil {
		return Dev
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var revision string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if revision == "" {
		return Dev
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if modified {
		revision += "-dirty"
	}
	return revision
}
