// Package openstack is the OpenStack Neutron endpoint provider: per gateway a security group
// admitting only the tunnel (IKE UDP 500/4500 and ESP for IPsec, the listen port for
// WireGuard; from anywhere, or only from the peers' addresses when all are known), a port on
// the configured network with that group, and a floating IP — allocated from the external
// network floatingIPPool, or the pinned floatingIP adopted — associated with the port. The
// gateway pod gets the port as its second NIC through a Multus NetworkAttachmentDefinition
// described in Result.Pod.NetworkAttachment.
//
// Every resource is named "bnerd-vpn-<gateway UID>" (the floating IP: described so) and tagged
// "bnerd-vpn-gateway=<uid>" and "bnerd-vpn-owner=<namespace>/<name>", and Ensure always looks
// for what exists before creating, so an Ensure after a crash between a create and the status
// write adopts instead of leaking; duplicates (a create whose response was lost, then
// retried) are cleaned up. A pinned floating IP additionally carries "bnerd-vpn-pinned" while
// adopted, and is never released: Delete only disassociates it and removes the operator's
// tags. A floating IP is released only with positive proof the operator allocated it (its
// description is the gateway's name and it is not pinned).
package openstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	gopenstack "github.com/gophercloud/gophercloud/v2/openstack"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bnerd/bnerd-vpn-operator/internal/cloud"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// Tags and names put on the resources.
const (
	// NamePrefix + UID names the security group and port and describes the floating IP.
	NamePrefix = "bnerd-vpn-"
	// TagGatewayPrefix + UID marks every resource of a gateway.
	TagGatewayPrefix = "bnerd-vpn-gateway="
	// TagOwnerPrefix + namespace/name says which gateway (informational, cut to Neutron's
	// 60-character tag limit).
	TagOwnerPrefix = "bnerd-vpn-owner="
	// TagPinned marks an adopted floating IP: never released.
	TagPinned = "bnerd-vpn-pinned"
	// maxTag is Neutron's tag length limit.
	maxTag = 60
)

// Defaults of Config.
const (
	DefaultCallTimeout = 30 * time.Second
	DefaultSlowRetry   = 5 * time.Minute
	// DefaultCutoverRetry rechecks a pinned floating IP still held by another port: in a
	// cutover it is released any moment (the VM being migrated), and every minute waited is
	// the client's outage.
	DefaultCutoverRetry = 5 * time.Second
	DefaultCacheTTL     = 5 * time.Minute
	DefaultAuthBackoff  = time.Minute
	DefaultNADMaster    = "eth1"
)

// Config configures the provider.
type Config struct {
	// NetworkID is the Neutron network the gateways' ports are created on. Required.
	NetworkID string
	// SubnetID, when set, is the subnet of that network the port's address comes from.
	SubnetID string

	// PortBinding is how the cloud delivers the gateway port's frames to the node its pod runs
	// on: BindingTrunk (the default: the port a subport of the node's trunk, moved when the
	// pod moves), BindingAddressPairs (the port's address and MAC an allowed address pair of
	// the node's NIC, moved when the pod moves) or BindingNone (nothing is bound: only for
	// networks without port security on the nodes' ports).
	PortBinding string
	// NADConfigTemplate is a text/template producing the Multus NetworkAttachmentDefinition's
	// CNI config (JSON) for a gateway's port; when empty, TrunkNADConfigTemplate (BindingTrunk)
	// or MacvlanNADConfigTemplate (the others). Its data is NADTemplateData; the function
	// json quotes a value as a JSON string.
	NADConfigTemplate string
	// NADMaster is the node interface the default template attaches to (.Master); "eth1"
	// when empty.
	NADMaster string

	// NewProviderClient returns an authenticated gophercloud ProviderClient. The
	// NewFrom... constructors set it; set it yourself only with New.
	NewProviderClient func(ctx context.Context) (*gophercloud.ProviderClient, error)
	// EndpointOpts select Neutron in the catalog (region, interface).
	EndpointOpts gophercloud.EndpointOpts
	// HTTPClient is the base HTTP client the constructors use (timeouts, proxies); the
	// default client when nil.
	HTTPClient *http.Client

	// CallTimeout bounds every API call; DefaultCallTimeout when zero.
	CallTimeout time.Duration
	// SlowRetry is the RetryAfter of terminal conditions caused by state outside the cluster
	// (quota, credentials, a missing network, a conflicting port); DefaultSlowRetry when zero.
	SlowRetry time.Duration
	// CutoverRetry is the RetryAfter while a pinned floating IP is associated with another
	// port (a VM being migrated off); DefaultCutoverRetry when zero.
	CutoverRetry time.Duration
	// CacheTTL is how long a Ready result is returned for an unchanged request without
	// asking Neutron; DefaultCacheTTL when zero, never cached when negative. It is also the
	// resync period of a ready endpoint: a Ready result asks to be ensured again (RetryAfter)
	// when its cache entry expires, so what someone changed in the cloud (a security-group
	// rule removed, the floating IP disassociated) is repaired within CacheTTL although
	// nothing in the cluster changed.
	CacheTTL time.Duration
	// AuthBackoff is how long rejected credentials are not tried again (every gateway's
	// Ensure reports the same AuthFailed meanwhile); DefaultAuthBackoff when zero.
	AuthBackoff time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Provider is the OpenStack endpoint provider. It is safe for concurrent use.
type Provider struct {
	cfg     Config
	tmpl    *template.Template
	secrets []string

	mu     sync.Mutex
	client *gophercloud.ServiceClient
	// authErr is the last rejected login, returned without asking Keystone again until
	// AuthBackoff has passed (Keystone may lock an account out after repeated failures).
	authErr   *cloud.Error
	authErrAt time.Time

	cacheMu sync.Mutex
	cache   map[types.UID]cacheEntry

	// vlanMu serializes choosing a new port's VLAN (read the VLANs in use, tag the port).
	vlanMu sync.Mutex
}

type cacheEntry struct {
	key string
	res cloud.Result
	at  time.Time
}

var _ cloud.Provider = (*Provider)(nil)

// New builds a provider from cfg, whose NewProviderClient must be set.
func New(cfg Config) (*Provider, error) {
	if cfg.NetworkID == "" {
		return nil, errors.New("openstack: Config.NetworkID (the network for gateway ports) is required")
	}
	if cfg.NewProviderClient == nil {
		return nil, errors.New("openstack: Config.NewProviderClient is required")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.SlowRetry <= 0 {
		cfg.SlowRetry = DefaultSlowRetry
	}
	if cfg.CutoverRetry <= 0 {
		cfg.CutoverRetry = DefaultCutoverRetry
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.AuthBackoff <= 0 {
		cfg.AuthBackoff = DefaultAuthBackoff
	}
	if cfg.NADMaster == "" {
		cfg.NADMaster = DefaultNADMaster
	}
	switch cfg.PortBinding {
	case "":
		cfg.PortBinding = BindingTrunk
	case BindingTrunk, BindingAddressPairs, BindingNone:
	default:
		return nil, fmt.Errorf("openstack: port binding %q: must be %q, %q or %q", cfg.PortBinding, BindingTrunk, BindingAddressPairs, BindingNone)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	src := cfg.NADConfigTemplate
	switch {
	case src != "":
	case cfg.PortBinding == BindingTrunk:
		src = TrunkNADConfigTemplate
	default:
		src = MacvlanNADConfigTemplate
	}
	tmpl, err := template.New("nad").Option("missingkey=error").Funcs(template.FuncMap{"json": jsonString}).Parse(src)
	if err != nil {
		return nil, fmt.Errorf("openstack: NAD config template: %w", err)
	}
	return &Provider{cfg: cfg, tmpl: tmpl, cache: map[types.UID]cacheEntry{}}, nil
}

// Check authenticates (if not yet) and finds Neutron in the catalog: for a startup log line
// or readiness. Its error is an *cloud.Error without secrets.
func (p *Provider) Check(ctx context.Context) error {
	_, err := p.network(ctx)
	return err
}

// network returns the Neutron client, authenticating on first use.
func (p *Provider) network(ctx context.Context) (*gophercloud.ServiceClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		return p.client, nil
	}
	if p.authErr != nil && p.cfg.Now().Sub(p.authErrAt) < p.cfg.AuthBackoff {
		return nil, p.authErr
	}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	pc, err := p.cfg.NewProviderClient(cctx)
	if err != nil {
		e := p.classify(err, "authenticating with Keystone")
		if e.Reason == cloud.ReasonAuthFailed {
			p.authErr, p.authErrAt = e, p.cfg.Now()
		}
		return nil, e
	}
	p.authErr = nil
	sc, err := gopenstack.NewNetworkV2(pc, p.cfg.EndpointOpts)
	var noEndpoint *gophercloud.ErrEndpointNotFound
	var noService *gophercloud.ErrServiceNotFound
	if errors.As(err, &noEndpoint) || errors.As(err, &noService) {
		return nil, cloud.Terminalf(cloud.ReasonInvalidConfiguration, p.cfg.SlowRetry,
			"no Neutron endpoint in the service catalog (region %q, interface %q)", p.cfg.EndpointOpts.Region, p.cfg.EndpointOpts.Availability)
	}
	if err != nil {
		return nil, p.classify(err, "discovering the Neutron API version")
	}
	p.client = sc
	return sc, nil
}

// Ensure implements cloud.Provider.
func (p *Provider) Ensure(ctx context.Context, req cloud.Request) (cloud.Result, error) {
	if err := p.validate(req); err != nil {
		return cloud.Settle(err)
	}
	key := fingerprint(req)
	if res, ok := p.cached(req.UID, key); ok {
		return res, nil
	}
	sc, err := p.network(ctx)
	if err != nil {
		return cloud.Settle(err)
	}
	o := p.op(sc, req)
	res, err := o.ensure(ctx)
	if err != nil {
		p.forget(req.UID)
		return cloud.Settle(err)
	}
	p.remember(req.UID, key, res)
	if res.Ready && res.RetryAfter == 0 && p.cfg.CacheTTL > 0 {
		res.RetryAfter = p.cfg.CacheTTL // the resync: checked against the cloud again then
	}
	return res, nil
}

// Delete implements cloud.Provider.
func (p *Provider) Delete(ctx context.Context, req cloud.Request) error {
	p.forget(req.UID)
	if req.UID == "" {
		return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s has no UID: cannot find its resources", req)
	}
	sc, err := p.network(ctx)
	if err != nil {
		return err
	}
	return p.op(sc, req).delete(ctx)
}

// HandOver gives a released gateway's floating IP to its successor (a migration): the
// gateway's port and security group are deleted, and its floating IP — allocated from a pool or
// pinned — is disassociated and loses the gateway's tags, but is never released: the new gateway,
// pinned to that address, adopts it. Idempotent.
func (p *Provider) HandOver(ctx context.Context, req cloud.Request) error {
	p.forget(req.UID)
	if req.UID == "" {
		return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s has no UID: cannot find its resources", req)
	}
	sc, err := p.network(ctx)
	if err != nil {
		return err
	}
	o := p.op(sc, req)
	o.keepAddress = true
	return o.delete(ctx)
}

func (p *Provider) validate(req cloud.Request) error {
	if err := req.Validate(); err != nil {
		return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "%v", err)
	}
	switch req.Endpoint.Kind {
	case model.EndpointFloatingIPPool:
		if req.Endpoint.FloatingIPPool == "" {
			return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s: floatingIPPool is empty", req)
		}
	case model.EndpointFloatingIP:
		if !req.Endpoint.FloatingIP.Is4() {
			return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s: floatingIP %q is not an IPv4 address", req, req.Endpoint.FloatingIP)
		}
	default:
		return cloud.Terminalf(cloud.ReasonInvalidConfiguration, 0, "gateway %s: the OpenStack provider cannot serve a %q endpoint", req, req.Endpoint.Kind)
	}
	return nil
}

func fingerprint(req cloud.Request) string {
	b, _ := json.Marshal(req)
	return string(b)
}

func (p *Provider) cached(uid types.UID, key string) (cloud.Result, bool) {
	if p.cfg.CacheTTL < 0 {
		return cloud.Result{}, false
	}
	p.cacheMu.Lock()
	defer p.cacheMu.Unlock()
	e, ok := p.cache[uid]
	age := p.cfg.Now().Sub(e.at)
	if !ok || e.key != key || age > p.cfg.CacheTTL {
		return cloud.Result{}, false
	}
	res := e.res
	if res.RetryAfter == 0 {
		// the resync: when the entry expires (a second at least, past its expiry)
		res.RetryAfter = max(p.cfg.CacheTTL-age, 0) + time.Second
	}
	return res, true
}

func (p *Provider) remember(uid types.UID, key string, res cloud.Result) {
	if p.cfg.CacheTTL < 0 || !res.Ready {
		return
	}
	p.cacheMu.Lock()
	defer p.cacheMu.Unlock()
	p.cache[uid] = cacheEntry{key: key, res: res, at: p.cfg.Now()}
}

func (p *Provider) forget(uid types.UID) {
	p.cacheMu.Lock()
	defer p.cacheMu.Unlock()
	delete(p.cache, uid)
}

// --- errors ---

// statusOf finds the HTTP status and body of a gophercloud error (through re-authentication
// wrappers); 0 when err is not an HTTP answer.
func statusOf(err error) (int, []byte) {
	var reauth *gophercloud.ErrUnableToReauthenticate
	if errors.As(err, &reauth) {
		if s, b := statusOf(reauth.ErrReauth); s != 0 {
			return s, b
		}
		return statusOf(reauth.ErrOriginal)
	}
	var code gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &code) {
		return code.Actual, code.Body
	}
	var codePtr *gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &codePtr) {
		return codePtr.Actual, codePtr.Body
	}
	return 0, nil
}

func isStatus(err error, status int) bool {
	s, _ := statusOf(err)
	return s == status
}

// faultOf reads the fault type and message of a Neutron or Keystone error body.
func faultOf(body []byte) (typ, msg string) {
	var b struct {
		NeutronError *struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"NeutronError"`
		Error *struct {
			Title   string `json:"title"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &b) != nil {
		return "", ""
	}
	switch {
	case b.NeutronError != nil:
		return b.NeutronError.Type, b.NeutronError.Message
	case b.Error != nil:
		return b.Error.Title, b.Error.Message
	}
	return "", ""
}

func isQuota(err error) bool {
	s, body := statusOf(err)
	if s != http.StatusConflict && s != http.StatusRequestEntityTooLarge && s != http.StatusForbidden {
		return false
	}
	typ, msg := faultOf(body)
	return typ == "OverQuota" || strings.Contains(strings.ToLower(msg), "quota exceeded")
}

// classify maps an API error onto the condition reasons: credentials rejected (401/403) ->
// AuthFailed, over quota -> QuotaExceeded, a malformed request (400) -> InvalidConfiguration,
// all terminal with a slow re-check; everything else (5xx, 429, 404 and 409 where the caller
// did not handle them, timeouts, connection errors) is transient. Messages are built from the
// status and the fault's own message, never the request, and are scrubbed of credentials.
func (p *Provider) classify(err error, what string) *cloud.Error {
	if e, ok := cloud.AsError(err); ok {
		return e
	}
	status, body := statusOf(err)
	typ, msg := faultOf(body)
	detail := fmt.Sprintf("HTTP %d", status)
	if typ != "" || msg != "" {
		if len(msg) > 300 {
			msg = msg[:300] + "…"
		}
		detail += " (" + strings.TrimPrefix(typ+": ", ": ") + msg + ")"
	}
	detail = p.redact(detail)
	switch {
	case status == 0:
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return cloud.Transient(context.DeadlineExceeded, "%s: timed out (retrying)", what)
		}
		if errors.Is(err, context.Canceled) {
			return cloud.Transient(context.Canceled, "%s: canceled", what)
		}
		return cloud.Transient(nil, "%s: %s (retrying)", what, p.redact(scrubURLError(err)))
	case isQuota(err):
		return cloud.Terminalf(cloud.ReasonQuotaExceeded, p.cfg.SlowRetry, "%s: project quota exceeded: %s", what, detail)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return cloud.Terminalf(cloud.ReasonAuthFailed, p.cfg.SlowRetry, "%s: OpenStack rejected the operator's credentials: %s", what, detail)
	case status == http.StatusBadRequest:
		return cloud.Terminalf(cloud.ReasonInvalidConfiguration, p.cfg.SlowRetry, "%s: Neutron rejected the request: %s", what, detail)
	}
	return cloud.Transient(nil, "%s: %s (retrying)", what, detail)
}

// scrubURLError keeps the operation and cause of a transport error, not the URL's query.
func scrubURLError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "?"); i >= 0 {
		if j := strings.Index(s[i:], "\": "); j >= 0 {
			s = s[:i] + s[i+j:]
		}
	}
	return s
}

func (p *Provider) redact(s string) string {
	for _, secret := range p.secrets {
		if len(secret) < 4 {
			continue
		}
		s = strings.ReplaceAll(s, secret, "[redacted]")
		// As it appears inside a JSON document echoed back by a server.
		if quoted, err := json.Marshal(secret); err == nil {
			s = strings.ReplaceAll(s, string(quoted[1:len(quoted)-1]), "[redacted]")
		}
	}
	return s
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(fmt.Sprint(v))
	return string(b), err
}
