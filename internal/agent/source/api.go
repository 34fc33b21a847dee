package source

import (
	"context"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
)

// API watches the gateway's ConfigMap and, by name, each Secret the current bundle references
// (the gateway's Role allows exactly those names), and sends an update on every change.
type API struct {
	Client    kubernetes.Interface
	Namespace string
	ConfigMap string
	Log       logr.Logger

	mu      sync.Mutex
	data    map[string]string
	secrets Secrets
	// watches are the running Secret watches by name, with their stop functions.
	watches map[string]context.CancelFunc
	kick    chan struct{}
}

// Run sends updates on ch until ctx ends.
func (a *API) Run(ctx context.Context, ch chan<- agent.Update) error {
	a.kick = make(chan struct{}, 1)
	a.secrets = Secrets{}
	a.watches = map[string]context.CancelFunc{}
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
			a.Log.Error(err, "gateway configuration is not usable; keeping the last applied one")
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
	b, err := render.FromConfigMapData(data)
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
			delete(a.secrets, name)
		}
	}
	var start []string
	for name := range want {
		if _, ok := a.watches[name]; !ok {
			start = append(start, name)
		}
	}
	secrets := make(Secrets, len(a.secrets))
	for name, kv := range a.secrets {
		secrets[name] = kv
	}
	a.mu.Unlock()
	for _, name := range start {
		wctx, cancel := context.WithCancel(ctx)
		a.mu.Lock()
		a.watches[name] = cancel
		a.mu.Unlock()
		name := name
		a.watch(wctx, "secrets", name, &corev1.Secret{}, func(obj any) {
			s, _ := obj.(*corev1.Secret)
			a.mu.Lock()
			if s == nil {
				delete(a.secrets, name)
			} else {
				a.secrets[name] = s.Data
			}
			a.mu.Unlock()
			a.signal()
		})
	}
	return agent.Update{Bundle: b, Secrets: secrets}, nil
}

// watch runs an informer on one object by name and calls set with it (nil when deleted).
func (a *API) watch(ctx context.Context, resource, name string, obj runtime.Object, set func(any)) {
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
}
