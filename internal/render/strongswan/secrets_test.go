package strongswan

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// secretData stands in for the Kubernetes Secrets the agent reads: values that must never show
// up in anything the renderer produces.
func secretData(cfg *Config) map[model.SecretKeyRef]string {
	out := map[model.SecretKeyRef]string{}
	for i, k := range cfg.SharedKeys {
		out[k.Secret] = fmt.Sprintf("Zk9PYmFy-PSK-%d-c2VjcmV0LXZhbHVlLW5ldmVyLWxvZ2dlZA==", i)
	}
	return out
}

func TestNoSecretValues(t *testing.T) {
	for _, tc := range cases() {
		cfg, conf := render(t, tc.gw, tc.opts)
		secrets := secretData(cfg)

		var outputs []string
		outputs = append(outputs, conf)
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(js), fmt.Sprintf("%v", cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg))
		for _, c := range cfg.Connections {
			m, err := c.LoadConnMessage()
			if err != nil {
				t.Fatal(err)
			}
			outputs = append(outputs, m.String())
		}
		// What the agent builds with the secret must print redacted too.
		for _, k := range cfg.SharedKeys {
			ls := k.LoadShared([]byte(secrets[k.Secret]))
			outputs = append(outputs, fmt.Sprintf("%v", ls), fmt.Sprintf("%+v", ls), fmt.Sprintf("%#v", ls), fmt.Sprint(ls))
			lj, err := json.Marshal(ls)
			if err != nil {
				t.Fatal(err)
			}
			outputs = append(outputs, string(lj))
		}
		for _, out := range outputs {
			for ref, v := range secrets {
				if strings.Contains(out, v) || strings.Contains(out, "PSK-") {
					t.Fatalf("%s: secret of %s/%s appears in output:\n%s", tc.name, ref.Name, ref.Key, out)
				}
			}
		}
		// The references are there, so an engineer can find the key.
		for _, k := range cfg.SharedKeys {
			want := fmt.Sprintf("%s: Secret %q key %q", k.ID, k.Secret.Name, k.Secret.Key)
			if !strings.Contains(conf, want) {
				t.Errorf("%s: swanctl.conf lacks the reference %q", tc.name, want)
			}
		}
	}
}

// The agent's load-shared request carries the data it read, under the key's id and owners.
func TestLoadSharedMessage(t *testing.T) {
	cfg, _ := render(t, cases()[1].gw, Options{})
	k := cfg.SharedKeys[0]
	m, err := k.LoadSharedMessage([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Get("id") != "ike-alpha" || m.Get("type") != "IKE" || m.Get("data") != "s3cret" {
		t.Errorf("load-shared: %v", m)
	}
	owners, _ := m.Get("owners").([]string)
	if len(owners) != 1 || owners[0] != "alpha.example.net" {
		t.Errorf("owners %v", owners)
	}
	var back LoadShared
	if err := vici.UnmarshalMessage(m, &back); err != nil || back.Data != "s3cret" {
		t.Errorf("unmarshal: %v %q", err, back.Data)
	}
	if _, err := k.LoadSharedMessage(nil); err == nil {
		t.Error("empty secret accepted")
	}
}
