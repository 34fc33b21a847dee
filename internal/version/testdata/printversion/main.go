// Command printversion prints version.Get(): the test builds it with -ldflags -X to prove the
// variable's path is the one the Makefile sets.
package main

import (
	"fmt"

	"github.com/bnerd/bnerd-vpn-operator/internal/version"
)

func main() { fmt.Println(version.Get()) }
