package openstack

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"sigs.k8s.io/yaml"
)

// cloudsFile is the part of clouds.yaml the operator understands. (gophercloud's
// openstack/config/clouds parser needs gopkg.in/yaml.v2, which this module does not carry;
// this reads the same format with sigs.k8s.io/yaml.)
type cloudsFile struct {
	Clouds map[string]cloudEntry `json:"clouds"`
}

type cloudEntry struct {
	Auth         cloudAuth `json:"auth"`
	AuthType     string    `json:"auth_type"`
	RegionName   string    `json:"region_name"`
	Interface    string    `json:"interface"`
	EndpointType string    `json:"endpoint_type"`
	Verify       *bool     `json:"verify"`
	CACert       string    `json:"cacert"`
}

type cloudAuth struct {
	AuthURL                     string `json:"auth_url"`
	Username                    string `json:"username"`
	UserID                      string `json:"user_id"`
	Password                    string `json:"password"`
	ProjectName                 string `json:"project_name"`
	ProjectID                   string `json:"project_id"`
	ProjectDomainName           string `json:"project_domain_name"`
	ProjectDomainID             string `json:"project_domain_id"`
	UserDomainName              string `json:"user_domain_name"`
	UserDomainID                string `json:"user_domain_id"`
	DomainName                  string `json:"domain_name"`
	DomainID                    string `json:"domain_id"`
	ApplicationCredentialID     string `json:"application_credential_id"`
	ApplicationCredentialName   string `json:"application_credential_name"`
	ApplicationCredentialSecret string `json:"application_credential_secret"`
}

// backticked matches what YAML decoders quote from the input in their errors.
var backticked = regexp.MustCompile("`[^`]*`")

// NewFromCloudsYAML builds a provider from a clouds.yaml document (the content of the
// operator's credentials Secret) and the name of the cloud in it. Password and application
// credential authentication are supported; a relative or absolute cacert path is read when
// the provider first connects. Nothing is contacted here: the provider authenticates on
// first use, so rejected credentials surface as AuthFailed on the gateways (Check
// authenticates eagerly). Errors never contain the document's secrets.
func NewFromCloudsYAML(cloudsYAML []byte, cloudName string, cfg Config) (*Provider, error) {
	var f cloudsFile
	if err := yaml.Unmarshal(cloudsYAML, &f); err != nil {
		// YAML errors may quote input (a password): keep only their structure.
		return nil, fmt.Errorf("clouds.yaml: cannot parse: %s", backticked.ReplaceAllString(err.Error(), "`…`"))
	}
	c, ok := f.Clouds[cloudName]
	if !ok {
		names := make([]string, 0, len(f.Clouds))
		for n := range f.Clouds {
			names = append(names, n)
		}
		return nil, fmt.Errorf("clouds.yaml: no cloud %q (it has %s)", cloudName, strings.Join(names, ", "))
	}
	a := c.Auth
	if a.AuthURL == "" {
		return nil, fmt.Errorf("clouds.yaml: cloud %q has no auth.auth_url", cloudName)
	}
	ao := gophercloud.AuthOptions{IdentityEndpoint: a.AuthURL, AllowReauth: true}
	switch {
	case a.ApplicationCredentialID != "" || a.ApplicationCredentialName != "" || strings.Contains(c.AuthType, "applicationcredential"):
		if a.ApplicationCredentialSecret == "" {
			return nil, fmt.Errorf("clouds.yaml: cloud %q: application credential without application_credential_secret", cloudName)
		}
		ao.ApplicationCredentialID = a.ApplicationCredentialID
		ao.ApplicationCredentialName = a.ApplicationCredentialName
		ao.ApplicationCredentialSecret = a.ApplicationCredentialSecret
		ao.Username, ao.UserID = a.Username, a.UserID
		ao.DomainName, ao.DomainID = first(a.UserDomainName, a.DomainName), first(a.UserDomainID, a.DomainID)
	case c.AuthType == "" || c.AuthType == "password" || c.AuthType == "v3password":
		if a.Password == "" || (a.Username == "" && a.UserID == "") {
			return nil, fmt.Errorf("clouds.yaml: cloud %q: password authentication needs username (or user_id) and password", cloudName)
		}
		ao.Username, ao.UserID, ao.Password = a.Username, a.UserID, a.Password
		ao.DomainName, ao.DomainID = first(a.UserDomainName, a.DomainName), first(a.UserDomainID, a.DomainID)
		switch {
		case a.ProjectID != "":
			ao.Scope = &gophercloud.AuthScope{ProjectID: a.ProjectID}
		case a.ProjectName != "":
			ao.Scope = &gophercloud.AuthScope{ProjectName: a.ProjectName,
				DomainName: first(a.ProjectDomainName, a.DomainName), DomainID: first(a.ProjectDomainID, a.DomainID)}
			if ao.Scope.DomainName == "" && ao.Scope.DomainID == "" {
				ao.Scope.DomainID = "default"
			}
		}
		if ao.DomainName == "" && ao.DomainID == "" && ao.Username != "" {
			ao.DomainID = "default"
		}
	default:
		return nil, fmt.Errorf("clouds.yaml: cloud %q: auth_type %q is not supported (password or v3applicationcredential)", cloudName, c.AuthType)
	}
	tlsOpts := tlsSource{insecure: c.Verify != nil && !*c.Verify, caFile: c.CACert}
	eo := gophercloud.EndpointOpts{Region: c.RegionName, Availability: availability(first(c.Interface, c.EndpointType))}
	return newWithAuth(ao, eo, tlsOpts, cfg)
}

// ApplicationCredential authenticates with a Keystone application credential.
type ApplicationCredential struct {
	// AuthURL is the Keystone endpoint, e.g. https://keystone.example:5000/v3.
	AuthURL string
	// ID of the credential; or Name together with the owning user (UserName and
	// UserDomainName, or UserID).
	ID, Name                 string
	UserName, UserDomainName string
	UserID                   string
	Secret                   string
	// Region and Interface (public, internal, admin; public when empty) of the Neutron
	// endpoint in the catalog.
	Region, Interface string
	// CACert is a PEM bundle to trust instead of the system's; Insecure skips verification.
	CACert   []byte
	Insecure bool
}

// NewFromApplicationCredential builds a provider authenticating with an application
// credential. Like NewFromCloudsYAML it contacts nothing until first use.
func NewFromApplicationCredential(ac ApplicationCredential, cfg Config) (*Provider, error) {
	switch {
	case ac.AuthURL == "":
		return nil, errors.New("application credential: no auth URL")
	case ac.ID == "" && ac.Name == "":
		return nil, errors.New("application credential: neither ID nor name")
	case ac.ID == "" && ac.UserName == "" && ac.UserID == "":
		return nil, errors.New("application credential: a credential named without its user (UserName or UserID)")
	case ac.Secret == "":
		return nil, errors.New("application credential: no secret")
	}
	ao := gophercloud.AuthOptions{
		IdentityEndpoint:            ac.AuthURL,
		ApplicationCredentialID:     ac.ID,
		ApplicationCredentialName:   ac.Name,
		ApplicationCredentialSecret: ac.Secret,
		Username:                    ac.UserName,
		UserID:                      ac.UserID,
		DomainName:                  ac.UserDomainName,
		AllowReauth:                 true,
	}
	eo := gophercloud.EndpointOpts{Region: ac.Region, Availability: availability(ac.Interface)}
	return newWithAuth(ao, eo, tlsSource{insecure: ac.Insecure, caPEM: ac.CACert}, cfg)
}

type tlsSource struct {
	insecure bool
	caFile   string
	caPEM    []byte
}

func (t tlsSource) config() (*tls.Config, error) {
	if !t.insecure && t.caFile == "" && len(t.caPEM) == 0 {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.insecure} //nolint:gosec // only when clouds.yaml says verify: false
	pem := t.caPEM
	if t.caFile != "" {
		b, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("reading cacert: %w", err)
		}
		pem = b
	}
	if len(pem) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New("cacert holds no PEM certificate")
		}
		c.RootCAs = pool
	}
	return c, nil
}

// newWithAuth makes a provider whose ProviderClient factory authenticates with ao.
func newWithAuth(ao gophercloud.AuthOptions, eo gophercloud.EndpointOpts, ts tlsSource, cfg Config) (*Provider, error) {
	if cfg.NewProviderClient != nil {
		return nil, errors.New("openstack: Config.NewProviderClient is set by the constructor; leave it empty")
	}
	base := cfg.HTTPClient
	cfg.NewProviderClient = func(ctx context.Context) (*gophercloud.ProviderClient, error) {
		pc, err := gopenstack.NewClient(ao.IdentityEndpoint)
		if err != nil {
			return nil, err
		}
		hc := http.Client{}
		if base != nil {
			hc = *base
		}
		tc, err := ts.config()
		if err != nil {
			return nil, err
		}
		if tc != nil {
			var tr *http.Transport
			if t, ok := hc.Transport.(*http.Transport); ok && t != nil {
				tr = t.Clone()
			} else {
				tr = http.DefaultTransport.(*http.Transport).Clone()
			}
			tr.TLSClientConfig = tc
			hc.Transport = tr
		}
		pc.HTTPClient = hc
		if err := gopenstack.Authenticate(ctx, pc, ao); err != nil {
			return nil, err
		}
		return pc, nil
	}
	cfg.EndpointOpts = eo
	p, err := New(cfg)
	if err != nil {
		return nil, err
	}
	p.secrets = secretsOf(ao.Password, ao.ApplicationCredentialSecret, ao.TokenID)
	return p, nil
}

func secretsOf(candidates ...string) []string {
	var out []string
	for _, s := range candidates {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func availability(iface string) gophercloud.Availability {
	switch strings.TrimSuffix(strings.ToLower(iface), "url") {
	case "internal":
		return gophercloud.AvailabilityInternal
	case "admin":
		return gophercloud.AvailabilityAdmin
	}
	return gophercloud.AvailabilityPublic
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
