// Command pause is the lab cluster's sandbox ("pause") image: it sleeps until SIGTERM/SIGINT.
// "pause serve <addr>..." instead serves HTTP on each address, answering with the pod's
// hostname and the port: the lab's backend (no registry, so no nginx image either).
// Built static (CGO_ENABLED=0) and packed by hack/lab/build-images.sh.
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 2 && os.Args[1] == "serve" {
		host, _ := os.Hostname()
		for _, addr := range os.Args[2:] {
			go func() {
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintf(w, "hello from %s on %s (you are %s)\n", host, addr, r.RemoteAddr)
				})
				if err := http.ListenAndServe(addr, h); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}()
		}
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
