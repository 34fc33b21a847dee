// Command kube-apiserver is the API server alone, for envtest: hack/lab/build-kube.sh builds it
// when the lab's combined binary (cmd/kube) is not built yet, so the tests can start before
// the other components are compiled. Its packages are the combined binary's, compiled once.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
}
