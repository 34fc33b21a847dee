// Command failed-tests reads `go test -v` output on stdin and prints the failed tests' own
// lines (internal/testing/testoutput). make e2e-cluster runs it when the suite fails: a CI log keeps
// only its tail, and the suite's output is long.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/bnerd/bnerd-vpn-operator/internal/testing/testoutput"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed-tests:", err)
		os.Exit(1)
	}
	fmt.Print(testoutput.Failed(string(in)))
}
