package source

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
)

// API watches the gateway's ConfigMap and, by name, each Secret the current bundle references
// (the gateway's Role allows exactly those names), and sends an update on every change.
type API struct {
	Client    kubernetes.Interface
	Namespace string
	ConfigMap string
	Log       logr.Logger
	// Render are the agent's own rendering options (the dataplane it runs).
	Render render.Options
	// Rejected, when set, is told about every configuration refused (see render.FromConfigMapData).
	Rejected func(error)

	mu      sync.Mutex
	data    map[string]string
	secrets Secrets
	// watches are the running Secret watches by name, with their stop functions; synced tell
	// whether each has delivered its first state.
	watches map[string]context.CancelFunc
	synced  map[string]func() bool
	kick    chan struct{}
}

// Run sends updates on ch until ctx ends.
func (a *API) Run(ctx context.Context, ch chan<- agent.Update) error {
	a.kick = make(chan struct{}, 1)
	a.secrets = Secrets{}
	a.watches = map[string]context.CancelFunc{}
	a.synced = map[string]func() bool{}
	a.watch(ctx, "configmaps", a.ConfigMap, &corev1.ConfigMap{}, func(obj any) {
		cm, _ := obj.(*corev1.ConfigMap)
		a.mu.Lock()
		if cm == nil {
			a.data = nil
		} else {
			a.data = cm.Data
		}
		a.mu.Unlock()
		a.signal()
	})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-a.kick:
		}
		u, err := a.current(ctx)
		if err != nil {
			a.Log.Error(err, "gateway configuration refused; keeping the last applied one")
			if a.Rejected != nil {
				a.Rejected(err)
			}
			continue
		}
		if u.Bundle == nil {
			continue
		}
		select {
		case ch <- u:
		case <-ctx.Done():
			return nil
		}
	}
}

func (a *API) signal() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// current builds an update from what the watches have seen, and adjusts the Secret watches to
// the Secrets the bundle references.
func (a *API) current(ctx context.Context) (agent.Update, error) {
	a.mu.Lock()
	data := a.data
	a.mu.Unlock()
	if data == nil {
		return agent.Update{}, nil
	}
	b, err := render.FromConfigMapData(data, a.Render)
	if err != nil {
		return agent.Update{}, err
	}
	want := map[string]bool{}
	for _, name := range secretNames(b) {
		want[name] = true
	}
	a.mu.Lock()
	for name, stop := range a.watches {
		if !want[name] {
			stop()
			delete(a.watches, name)
			delete(a.synced, name)
			delete(a.secrets, name)
		}
	}
	var start []string
	for name := range want {
		if _, ok := a.watches[name]; !ok {
			start = append(start, name)
		}
	}
	a.mu.Unlock()
	for _, name := range start {
		wctx, cancel := context.WithCancel(ctx)
		name := name
		synced := a.watch(wctx, "secrets", name, &corev1.Secret{}, func(obj any) {
			s, _ := obj.(*corev1.Secret)
			a.mu.Lock()
			switch {
			case s == nil:
				delete(a.secrets, name)
			case !model.CredentialSecretAllowed(string(s.Type)):
				// Never authenticate with a Secret made for something else (a ServiceAccount
				// token, a TLS key): treated as missing, whatever the Role lets us read.
				delete(a.secrets, name)
			default:
				a.secrets[name] = s.Data
			}
			a.mu.Unlock()
			a.signal()
		})
		a.mu.Lock()
		a.watches[name], a.synced[name] = cancel, synced
		a.mu.Unlock()
	}
	// A configuration is applied with the Secrets it references as they are, not before their
	// watches have reported them (which would report a peer's key as missing for a moment).
	a.waitSynced(ctx)
	a.mu.Lock()
	secrets := make(Secrets, len(a.secrets))
	for name, kv := range a.secrets {
		secrets[name] = kv
	}
	a.mu.Unlock()
	return agent.Update{Bundle: b, Secrets: secrets}, nil
}

// waitSynced waits (at most 10 s) until every Secret watch has delivered its first state.
func (a *API) waitSynced(ctx context.Context) {
	a.mu.Lock()
	fns := make([]cache.InformerSynced, 0, len(a.synced))
	for _, f := range a.synced {
		fns = append(fns, f)
	}
	a.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cache.WaitForCacheSync(wctx.Done(), fns...)
}

// watch runs an informer on one object by name and calls set with it (nil when deleted); it
// returns whether the informer has synced.
func (a *API) watch(ctx context.Context, resource, name string, obj runtime.Object, set func(any)) func() bool {
	lw := cache.NewListWatchFromClient(a.Client.CoreV1().RESTClient(), resource, a.Namespace, fields.OneTermEqualSelector("metadata.name", name))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    obj,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { set(o) },
			UpdateFunc: func(_, o any) { set(o) },
			DeleteFunc: func(any) { set(nil) },
		},
	})
	go informer.RunWithContext(ctx)
	return informer.HasSynced
}
