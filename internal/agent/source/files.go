package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/render"
)

// Files reads the ConfigMap data from ConfigDir (one file per key, as a mounted ConfigMap) and
// each Secret from SecretsDir/<secret name>/<key> (as mounted Secrets), and sends an update
// whenever either changes.
type Files struct {
	ConfigDir, SecretsDir string
	// Interval between checks (default 200 ms).
	Interval time.Duration
	Log      logr.Logger
}

// Run sends updates on ch until ctx ends.
func (f *Files) Run(ctx context.Context, ch chan<- agent.Update) error {
	every := f.Interval
	if every == 0 {
		every = 200 * time.Millisecond
	}
	var last []byte
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		u, digest, err := f.Read()
		switch {
		case err != nil:
			if !bytes.Equal(last, []byte("error:"+err.Error())) {
				f.Log.Error(err, "reading configuration files")
				last = []byte("error:" + err.Error())
			}
		case !bytes.Equal(digest, last):
			last = digest
			select {
			case ch <- u:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Read reads the files once; digest changes when anything read changes.
func (f *Files) Read() (agent.Update, []byte, error) {
	h := sha256.New()
	data := map[string]string{}
	for _, key := range []string{render.KeyModel, render.KeyStrongSwan, render.KeyWireGuard, render.KeyRuleset} {
		raw, err := os.ReadFile(filepath.Join(f.ConfigDir, key))
		if os.IsNotExist(err) {
			continue
		} else if err != nil {
			return agent.Update{}, nil, err
		}
		data[key] = string(raw)
		h.Write([]byte(key))
		h.Write(raw)
	}
	b, err := render.FromConfigMapData(data)
	if err != nil {
		return agent.Update{}, nil, err
	}
	secrets := Secrets{}
	for _, name := range secretNames(b) {
		entries, err := os.ReadDir(filepath.Join(f.SecretsDir, name))
		if os.IsNotExist(err) {
			continue // reported by the driver as a missing secret
		} else if err != nil {
			return agent.Update{}, nil, err
		}
		secrets[name] = map[string][]byte{}
		for _, e := range entries {
			if e.IsDir() || e.Name()[0] == '.' {
				continue
			}
			v, err := os.ReadFile(filepath.Join(f.SecretsDir, name, e.Name()))
			if err != nil {
				return agent.Update{}, nil, err
			}
			secrets[name][e.Name()] = v
			h.Write([]byte(name + "/" + e.Name()))
			h.Write(v)
		}
	}
	return agent.Update{Bundle: b, Secrets: secrets}, h.Sum(nil), nil
}
