// Package hack holds the scripts the Makefile runs (tests' dependencies, the lab, the VM kit,
// generated files). It has no code of its own: its test (tools_test.go) checks that
// hack/install-test-deps.sh, the one table of the external programs the repository runs,
// lists every program the Go code and the scripts name, so a fresh machine gets them all.
package hack
