package source

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
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
	// Render are the agent's own rendering options (the dataplane it runs).
	Render render.Options
	// Rejected, when set, is told about every configuration refused.
	Rejected func(error)
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
				f.Log.Error(err, "gateway configuration refused; keeping the last applied one")
				last = []byte("error:" + err.Error())
				if f.Rejected != nil {
					f.Rejected(err)
				}
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
	entries, err := os.ReadDir(f.ConfigDir)
	if err != nil {
		return agent.Update{}, nil, err
	}
	for _, e := range entries {
		// A mounted ConfigMap is its keys plus the kubelet's ..data links and directories.
		if e.IsDir() || strings.HasPrefix(e.Name(), "..") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(f.ConfigDir, e.Name()))
		if err != nil {
			return agent.Update{}, nil, err
		}
		data[e.Name()] = string(raw)
		h.Write([]byte(e.Name()))
		h.Write(raw)
	}
	b, err := render.FromConfigMapData(data, f.Render)
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
