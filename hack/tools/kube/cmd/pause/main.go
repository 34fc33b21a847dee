// Command pause is the lab cluster's sandbox ("pause") image: it sleeps until SIGTERM/SIGINT.
// "pause serve <addr>..." instead serves HTTP on each address, answering with the pod's
// hostname and the port: the lab's backend (no registry, so no nginx image either).
// "pause get <url>" is the lab's HTTP client (no curl in any lab image): it prints the answer's
// body and exits 0 on a 2xx answer, else prints the error and exits 1 (5 s timeout).
// Built static (CGO_ENABLED=0) and packed by hack/lab/build-images.sh.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "get" {
		os.Exit(get(os.Args[2]))
	}
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

func get(url string) int {
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	os.Stdout.Write(b)
	if err != nil || resp.StatusCode/100 != 2 {
		fmt.Fprintln(os.Stderr, resp.Status, err)
		return 1
	}
	return 0
}
