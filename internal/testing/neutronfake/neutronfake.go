// Package neutronfake is an in-process OpenStack for tests: a real HTTP server (httptest)
// speaking the Keystone v3 token call and the subset of Neutron the operator uses (networks,
// subnets, security groups and rules, ports with allowed-address-pairs and port security,
// floating IPs, trunks and their subports, resource tags, list filters), with
// fault injection (fail the Nth call with a status, delay it past a client timeout, commit a
// write and lose its response, quotas) and an inventory of what exists.
//
// It keeps Neutron's semantics where the operator depends on them: tags filter lists
// (?tags=a,b matches resources carrying all of them), a port's fixed IP holds at most one
// floating IP, deleting a port disassociates its floating IPs, a security group in use by a
// port cannot be deleted, quotas answer 409 OverQuota, and unknown list filters are a 400; a
// port is a subport of at most one trunk (its device_owner "trunk:subport", its device_id the
// trunk's ID), a segmentation ID is used once per trunk, and neither a subport nor a trunk's
// parent port can be deleted (409).
package neutronfake

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Resource collections, as they appear in URLs (and in Fault.Resource).
const (
	Networks           = "networks"
	Subnets            = "subnets"
	SecurityGroups     = "security-groups"
	SecurityGroupRules = "security-group-rules"
	Ports              = "ports"
	FloatingIPs        = "floatingips"
	Trunks             = "trunks"
	// Tokens is the Keystone token call (POST /v3/auth/tokens).
	Tokens = "tokens"
	// Versions is Neutron's version document (GET /), read once per client.
	Versions = "versions"
)

// Tags is the suffix of the resource kind of tag calls: "ports/tags", "floatingips/tags", ...
const Tags = "/tags"

// ProjectID is the project every token is scoped to.
const ProjectID = "5f1c4a53a3c54cd6a0bb6e3d6ad0c0de"

// Network is a Neutron network.
type Network struct {
	ID           string   `json:"id"`
	Name         string   `json:"name"`
	External     bool     `json:"router:external"`
	Subnets      []string `json:"subnets"`
	Status       string   `json:"status"`
	AdminStateUp bool     `json:"admin_state_up"`
	ProjectID    string   `json:"project_id"`
	Tags         []string `json:"tags"`
}

// Subnet is a Neutron subnet.
type Subnet struct {
	ID        string   `json:"id"`
	Name      string   `json:"name"`
	NetworkID string   `json:"network_id"`
	CIDR      string   `json:"cidr"`
	GatewayIP string   `json:"gateway_ip"`
	IPVersion int      `json:"ip_version"`
	ProjectID string   `json:"project_id"`
	Tags      []string `json:"tags"`

	prefix netip.Prefix
	next   netip.Addr
}

// SecurityGroup is a Neutron security group (rules are listed from the rule collection).
type SecurityGroup struct {
	ID             string   `json:"id"`
	Name           string   `json:"name"`
	Description    string   `json:"description"`
	ProjectID      string   `json:"project_id"`
	Stateful       bool     `json:"stateful"`
	Tags           []string `json:"tags"`
	CreatedAt      string   `json:"created_at"`
	RevisionNumber int      `json:"revision_number"`
	Rules          []*Rule  `json:"security_group_rules"`
}

// Rule is a Neutron security group rule.
type Rule struct {
	ID              string  `json:"id"`
	SecurityGroupID string  `json:"security_group_id"`
	Direction       string  `json:"direction"`
	EtherType       string  `json:"ethertype"`
	Protocol        *string `json:"protocol"`
	PortRangeMin    *int    `json:"port_range_min"`
	PortRangeMax    *int    `json:"port_range_max"`
	RemoteIPPrefix  *string `json:"remote_ip_prefix"`
	RemoteGroupID   *string `json:"remote_group_id"`
	Description     string  `json:"description"`
	ProjectID       string  `json:"project_id"`
	CreatedAt       string  `json:"created_at"`
}

// FixedIP is one address of a port.
type FixedIP struct {
	SubnetID  string `json:"subnet_id"`
	IPAddress string `json:"ip_address"`
}

// AddressPair is one of a port's allowed-address-pairs: an address (or CIDR) the port may
// also send from, with the MAC it may use for it (the port's own when empty on create).
type AddressPair struct {
	IPAddress  string `json:"ip_address"`
	MACAddress string `json:"mac_address"`
}

// Port is a Neutron port.
type Port struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	Description    string    `json:"description"`
	NetworkID      string    `json:"network_id"`
	MACAddress     string    `json:"mac_address"`
	FixedIPs       []FixedIP `json:"fixed_ips"`
	SecurityGroups []string  `json:"security_groups"`
	DeviceID       string    `json:"device_id"`
	DeviceOwner    string    `json:"device_owner"`
	// AllowedAddressPairs and PortSecurityEnabled: what the port may send from besides its own
	// MAC and fixed IPs, and whether the cloud checks that at all (true unless disabled).
	AllowedAddressPairs []AddressPair `json:"allowed_address_pairs"`
	PortSecurityEnabled bool          `json:"port_security_enabled"`
	// TrunkDetails is set on a trunk's parent port.
	TrunkDetails   *TrunkDetails `json:"trunk_details,omitempty"`
	Status         string        `json:"status"`
	AdminStateUp   bool          `json:"admin_state_up"`
	ProjectID      string        `json:"project_id"`
	Tags           []string      `json:"tags"`
	CreatedAt      string        `json:"created_at"`
	RevisionNumber int           `json:"revision_number"`
}

// FloatingIP is a Neutron floating IP.
type FloatingIP struct {
	ID                string   `json:"id"`
	Description       string   `json:"description"`
	FloatingNetworkID string   `json:"floating_network_id"`
	FloatingIPAddress string   `json:"floating_ip_address"`
	PortID            *string  `json:"port_id"`
	FixedIPAddress    *string  `json:"fixed_ip_address"`
	RouterID          *string  `json:"router_id"`
	Status            string   `json:"status"`
	ProjectID         string   `json:"project_id"`
	Tags              []string `json:"tags"`
	CreatedAt         string   `json:"created_at"`
	RevisionNumber    int      `json:"revision_number"`
}

// Fault makes matching calls fail. A call matches when its method (empty: any) and resource
// kind (Networks, Ports, ... or "<kind>/tags" for tag calls, Tokens; empty: any) match; the
// Nth matching call (1-based, counted from injection; 0 means the first) and the Count-1
// following ones (Count 0 means 1, negative means every one) are faulted.
type Fault struct {
	Method   string
	Resource string
	// ID, when set, only matches calls on that resource ID.
	ID    string
	Nth   int
	Count int
	// Status answers the call (0 with a Delay: only delay).
	Status int
	// Body of the error answer; a Neutron-style fault when empty.
	Body string
	// Delay before the call is handled (a client with a shorter timeout gives up; the server
	// still carries the call out afterwards, like a real one).
	Delay time.Duration
	// Commit carries the call out before answering Status: the write happens, its response
	// is lost (a crash or timeout between create and status write).
	Commit bool

	seen, hit int
}

// Call is one request the server answered.
type Call struct {
	Method string
	Path   string
	// Resource is the kind as in Fault.Resource; ID the resource ID in the path, if any.
	Resource string
	ID       string
	Status   int
	// Query is the request's query string (list filters, pagination).
	Query string
}

// Inventory counts what exists.
type Inventory struct {
	SecurityGroups int
	Rules          int
	Ports          int
	FloatingIPs    int
}

// Sub is a - b, field by field.
func (a Inventory) Sub(b Inventory) Inventory {
	return Inventory{a.SecurityGroups - b.SecurityGroups, a.Rules - b.Rules, a.Ports - b.Ports, a.FloatingIPs - b.FloatingIPs}
}

// Total of all counts.
func (a Inventory) Total() int { return a.SecurityGroups + a.Rules + a.Ports + a.FloatingIPs }

func (a Inventory) String() string {
	return fmt.Sprintf("groups=%d rules=%d ports=%d fips=%d", a.SecurityGroups, a.Rules, a.Ports, a.FloatingIPs)
}

// Server is the fake cloud.
type Server struct {
	// URL of the server; the Keystone endpoint is URL+"/v3".
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	users    map[string]string    // name -> password
	appCreds map[string]string    // id -> secret
	tokens   map[string]time.Time // token -> when it expires
	tokenTTL time.Duration
	// EchoAuthBody makes a failed token call answer with the request body in its error
	// message, like a careless proxy would: a client must still not leak it.
	echoAuthBody bool

	networks map[string]*Network
	subnets  map[string]*Subnet
	groups   map[string]*SecurityGroup
	rules    map[string]*Rule
	ports    map[string]*Port
	fips     map[string]*FloatingIP
	trunks   map[string]*Trunk
	quota    map[string]int

	pageSize int

	faults []*Fault
	calls  []Call
	seq    int
	clock  time.Time
	fipNet map[string]*Subnet // external network -> the subnet its floating IPs come from

	inflight atomic.Int64
	// changed is closed (and replaced) whenever the cloud's state changes.
	changed chan struct{}
}

// New starts a server on a loopback port; it is closed when the test ends via Close.
func New() *Server {
	s := newServer()
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Serve starts a server on l (a process's listener: the lab's cloud); url is how clients reach
// it (its token's service catalog names it), "http://" + l's address when empty.
func Serve(l net.Listener, url string) *Server {
	s := newServer()
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	_ = s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = url
	if s.URL == "" {
		s.URL = "http://" + l.Addr().String()
	}
	return s
}

// Changed is closed when the cloud's state next changes (a write through the API or one of the
// Add/Disassociate helpers); call it again for the change after that.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// notify wakes Changed's waiters; s.mu is held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func newServer() *Server {
	return &Server{
		changed:  make(chan struct{}),
		users:    map[string]string{},
		appCreds: map[string]string{},
		tokens:   map[string]time.Time{},
		networks: map[string]*Network{},
		subnets:  map[string]*Subnet{},
		groups:   map[string]*SecurityGroup{},
		rules:    map[string]*Rule{},
		ports:    map[string]*Port{},
		fips:     map[string]*FloatingIP{},
		trunks:   map[string]*Trunk{},
		quota:    map[string]int{},
		fipNet:   map[string]*Subnet{},
		clock:    time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

// Close stops the server.
func (s *Server) Close() { s.srv.CloseClientConnections(); s.srv.Close() }

// AuthURL is the Keystone v3 endpoint.
func (s *Server) AuthURL() string { return s.URL + "/v3" }

// AddUser lets name log in with password.
func (s *Server) AddUser(name, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[name] = password
}

// AddApplicationCredential lets id log in with secret.
func (s *Server) AddApplicationCredential(id, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appCreds[id] = secret
}

// EchoAuthBody makes failed token calls echo the request (credentials included) back.
func (s *Server) EchoAuthBody(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.echoAuthBody = on
}

// SetTokenTTL makes tokens issued from now on expire after ttl (Keystone's token expiration;
// an hour when 0): a call with an expired token is answered 401.
func (s *Server) SetTokenTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokenTTL = ttl
}

// RevokeTokens invalidates every issued token (clients must re-authenticate).
func (s *Server) RevokeTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens = map[string]time.Time{}
}

// AddNetwork creates a network with one IPv4 subnet and returns their IDs. Floating IPs on an
// external network are allocated from its subnet.
func (s *Server) AddNetwork(name string, external bool, cidr string) (networkID, subnetID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := netip.MustParsePrefix(cidr).Masked()
	n := &Network{ID: s.newID(), Name: name, External: external, Status: "ACTIVE", AdminStateUp: true, ProjectID: ProjectID, Tags: []string{}}
	sub := &Subnet{ID: s.newID(), Name: name + "-subnet", NetworkID: n.ID, CIDR: p.String(), IPVersion: 4, ProjectID: ProjectID, Tags: []string{}, prefix: p}
	gw := p.Addr().Next()
	sub.GatewayIP = gw.String()
	sub.next = gw.Next()
	n.Subnets = []string{sub.ID}
	s.networks[n.ID] = n
	s.subnets[sub.ID] = sub
	if external {
		s.fipNet[n.ID] = sub
	}
	s.notify()
	return n.ID, sub.ID
}

// AddFloatingIP creates a floating IP with address on the external network (outside any test
// run: the migration's pinned address). portID may be empty.
func (s *Server) AddFloatingIP(networkID, address, portID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &FloatingIP{ID: s.newID(), FloatingNetworkID: networkID, FloatingIPAddress: address, Status: "DOWN", ProjectID: ProjectID, Tags: []string{"customer-x"}, CreatedAt: s.now()}
	if portID != "" {
		if err := s.associate(f, portID); err != nil {
			panic(err)
		}
	}
	s.fips[f.ID] = f
	s.notify()
	return f.ID
}

// DisassociateFloatingIP detaches a floating IP from its port, as the cloud's user does when
// releasing a migrated VM's address.
func (s *Server) DisassociateFloatingIP(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.fips[id]; ok {
		f.PortID, f.FixedIPAddress, f.RouterID, f.Status = nil, nil, nil, "DOWN"
		s.notify()
	}
}

// AddPort creates a port on the network (someone else's: a VM's).
func (s *Server) AddPort(networkID, name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, apiErr := s.createPort(map[string]any{"network_id": networkID, "name": name})
	if apiErr != nil {
		panic(apiErr.msg)
	}
	s.notify()
	return p.ID
}

// SetPageSize makes list answers pages of at most n items (Neutron's pagination_max_limit),
// each with a "next" link (limit and marker) while more follow; 0 lists everything at once.
// A client's own limit is honoured up to n.
func (s *Server) SetPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageSize = n
}

// paginate cuts a list to the page the request's marker and limit select, as Neutron does
// (the marker is the ID of the previous page's last item); next is the following page's URL,
// empty on the last page.
func (s *Server) paginate(items []any, u *url.URL) (page []any, next string, apiErr *apiError) {
	q := u.Query()
	limit := s.pageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, "", errf(400, "HTTPBadRequest", "Invalid input for limit: %q is not a non-negative integer.", v)
		}
		if n > 0 && (limit == 0 || n < limit) {
			limit = n
		}
	}
	idOf := func(obj any) string {
		raw, _ := json.Marshal(obj)
		var m struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &m)
		return m.ID
	}
	start := 0
	if marker := q.Get("marker"); marker != "" {
		i := slices.IndexFunc(items, func(obj any) bool { return idOf(obj) == marker })
		if i < 0 {
			return nil, "", errf(404, "NotFound", "Marker %s could not be found.", marker)
		}
		start = i + 1
	}
	page = items[start:]
	if limit == 0 || len(page) <= limit {
		return page, "", nil
	}
	page = page[:limit]
	q.Set("limit", strconv.Itoa(limit))
	q.Set("marker", idOf(page[len(page)-1]))
	return page, s.URL + u.Path + "?" + q.Encode(), nil
}

// SetQuota limits how many of a resource the project may have ("port", "security_group",
// "security_group_rule", "floatingip"); negative removes the limit.
func (s *Server) SetQuota(resource string, limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit < 0 {
		delete(s.quota, resource)
		return
	}
	s.quota[resource] = limit
}

// Inject adds a fault; remove takes it out again (a fault window's end).
func (s *Server) Inject(f Fault) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Nth <= 0 {
		f.Nth = 1
	}
	if f.Count == 0 {
		f.Count = 1
	}
	fp := &f
	s.faults = append(s.faults, fp)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.faults = slices.DeleteFunc(s.faults, func(g *Fault) bool { return g == fp })
	}
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// FaultsHit is how many calls the faults injected so far have failed or delayed.
func (s *Server) FaultsHit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		n += f.hit
	}
	return n
}

// Calls returns every call answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// ResetCalls forgets the calls so far.
func (s *Server) ResetCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = nil
}

// WaitIdle waits until no call is being handled (delayed calls included).
func (s *Server) WaitIdle() {
	for s.inflight.Load() > 0 {
		time.Sleep(5 * time.Millisecond)
	}
}

// Inventory counts the security groups, rules, ports and floating IPs.
func (s *Server) Inventory() Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Inventory{len(s.groups), len(s.rules), len(s.ports), len(s.fips)}
}

// SecurityGroupList, PortList and FloatingIPList return copies of what exists, oldest first.
func (s *Server) SecurityGroupList() []SecurityGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SecurityGroup
	for _, g := range sorted(s.groups, func(g *SecurityGroup) string { return g.CreatedAt + g.ID }) {
		c := *g
		c.Rules = s.rulesOf(g.ID)
		out = append(out, c)
	}
	return out
}

// RuleList returns copies of the rules of a security group.
func (s *Server) RuleList(groupID string) []Rule {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Rule
	for _, r := range s.rulesOf(groupID) {
		out = append(out, *r)
	}
	return out
}

func (s *Server) PortList() []Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Port
	for _, p := range sorted(s.ports, func(p *Port) string { return p.CreatedAt + p.ID }) {
		out = append(out, *p)
	}
	return out
}

func (s *Server) FloatingIPList() []FloatingIP {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []FloatingIP
	for _, f := range sorted(s.fips, func(f *FloatingIP) string { return f.CreatedAt + f.ID }) {
		c := *f
		out = append(out, c)
	}
	return out
}

// FloatingIPByAddress returns a copy of the floating IP with the address.
func (s *Server) FloatingIPByAddress(addr string) (FloatingIP, bool) {
	for _, f := range s.FloatingIPList() {
		if f.FloatingIPAddress == addr {
			return f, true
		}
	}
	return FloatingIP{}, false
}

func sorted[T any](m map[string]T, key func(T) string) []T {
	out := make([]T, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out
}

// --- HTTP ---

type apiError struct {
	status int
	typ    string
	msg    string
}

func errf(status int, typ, format string, args ...any) *apiError {
	return &apiError{status: status, typ: typ, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	body, _ := io.ReadAll(r.Body)
	kind, id := classify(r.URL.Path)

	s.mu.Lock()
	var fault *Fault
	for _, f := range s.faults {
		if (f.Method == "" || f.Method == r.Method) && (f.Resource == "" || f.Resource == kind) && (f.ID == "" || f.ID == id) {
			f.seen++
			if f.seen >= f.Nth && (f.Count < 0 || f.seen < f.Nth+f.Count) {
				f.hit++
				fault = f
				break
			}
		}
	}
	s.mu.Unlock()

	if fault != nil && fault.Delay > 0 {
		time.Sleep(fault.Delay)
	}
	if fault != nil && fault.Status != 0 && !fault.Commit {
		s.record(r, kind, id, fault.Status)
		writeFault(w, fault)
		return
	}

	s.mu.Lock()
	status, resp, header := s.handle(r, kind, id, body)
	if r.Method != http.MethodGet && kind != Tokens && status < 300 {
		s.notify()
	}
	s.mu.Unlock()

	if fault != nil && fault.Status != 0 && fault.Commit {
		s.record(r, kind, id, fault.Status)
		writeFault(w, fault)
		return
	}
	s.record(r, kind, id, status)
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if resp == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(resp)
}

func writeFault(w http.ResponseWriter, f *Fault) {
	body := f.Body
	if body == "" {
		typ := map[int]string{500: "InternalServerError", 503: "ServiceUnavailable", 502: "BadGateway", 504: "GatewayTimeout"}[f.Status]
		if typ == "" {
			typ = http.StatusText(f.Status)
		}
		b, _ := json.Marshal(map[string]any{"NeutronError": map[string]string{"type": typ, "message": "injected fault: " + http.StatusText(f.Status), "detail": ""}})
		body = string(b)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(f.Status)
	_, _ = io.WriteString(w, body)
}

func (s *Server) record(r *http.Request, kind, id string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Call{Method: r.Method, Path: r.URL.Path, Resource: kind, ID: id, Status: status, Query: r.URL.RawQuery})
}

// classify turns a path into (kind, id).
func classify(path string) (kind, id string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "v3" && parts[1] == "auth" && parts[2] == "tokens":
		return Tokens, ""
	case len(parts) == 1 && parts[0] == "":
		return Versions, ""
	case len(parts) >= 2 && parts[0] == "v2.0":
		kind = parts[1]
		if len(parts) >= 3 {
			id = parts[2]
		}
		if len(parts) >= 4 && parts[3] == "tags" {
			kind += Tags
		}
		return kind, id
	}
	return path, ""
}

func (s *Server) handle(r *http.Request, kind, id string, body []byte) (int, any, map[string]string) {
	if kind == Tokens {
		if r.Method != http.MethodPost {
			return 405, nil, nil
		}
		return s.token(body)
	}
	if r.URL.Path == "/" && r.Method == http.MethodGet { // Neutron's version document
		return 200, map[string]any{"versions": []map[string]any{{"id": "v2.0", "status": "CURRENT",
			"links": []map[string]string{{"href": s.URL + "/v2.0/", "rel": "self"}}}}}, nil
	}
	if !strings.HasPrefix(r.URL.Path, "/v2.0/") {
		return 404, errBody(errf(404, "NotFound", "no route for %s", r.URL.Path)), nil
	}
	if exp, ok := s.tokens[r.Header.Get("X-Auth-Token")]; !ok || !time.Now().Before(exp) {
		return 401, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}, nil
	}
	status, resp, apiErr := s.neutron(r, kind, id, body)
	if apiErr != nil {
		return apiErr.status, errBody(apiErr), nil
	}
	return status, resp, nil
}

func errBody(e *apiError) any {
	return map[string]any{"NeutronError": map[string]string{"type": e.typ, "message": e.msg, "detail": ""}}
}

// --- Keystone ---

func (s *Server) token(body []byte) (int, any, map[string]string) {
	var req struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password *struct {
					User struct {
						Name     string `json:"name"`
						ID       string `json:"id"`
						Password string `json:"password"`
					} `json:"user"`
				} `json:"password"`
				ApplicationCredential *struct {
					ID     string `json:"id"`
					Name   string `json:"name"`
					Secret string `json:"secret"`
				} `json:"application_credential"`
			} `json:"identity"`
		} `json:"auth"`
	}
	unauthorized := func() (int, any, map[string]string) {
		msg := "The request you have made requires authentication."
		if s.echoAuthBody {
			msg += " Request was: " + string(body)
		}
		return 401, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": msg}}, nil
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return 400, map[string]any{"error": map[string]any{"code": 400, "title": "Bad Request", "message": "malformed request"}}, nil
	}
	id := req.Auth.Identity
	methods := []string{}
	switch {
	case id.Password != nil:
		want, ok := s.users[id.Password.User.Name]
		if !ok || want != id.Password.User.Password {
			return unauthorized()
		}
		methods = append(methods, "password")
	case id.ApplicationCredential != nil:
		want, ok := s.appCreds[id.ApplicationCredential.ID]
		if !ok || want != id.ApplicationCredential.Secret {
			return unauthorized()
		}
		methods = append(methods, "application_credential")
	default:
		return unauthorized()
	}
	tok := "tok-" + s.newID()
	ttl := s.tokenTTL
	if ttl == 0 {
		ttl = time.Hour
	}
	expires := time.Now().Add(ttl)
	s.tokens[tok] = expires
	endpoint := func(url string) []map[string]any {
		var out []map[string]any
		for _, iface := range []string{"public", "internal", "admin"} {
			out = append(out, map[string]any{"id": s.newID(), "interface": iface, "region": "RegionOne", "region_id": "RegionOne", "url": url})
		}
		return out
	}
	now := time.Now().UTC()
	return 201, map[string]any{"token": map[string]any{
		"methods":    methods,
		"issued_at":  now.Format("2006-01-02T15:04:05.000000Z"),
		"expires_at": expires.UTC().Format("2006-01-02T15:04:05.000000Z"),
		"user":       map[string]any{"id": "u1", "name": "operator", "domain": map[string]string{"id": "default", "name": "Default"}},
		"project":    map[string]any{"id": ProjectID, "name": "vpn", "domain": map[string]string{"id": "default", "name": "Default"}},
		"catalog": []map[string]any{
			{"type": "identity", "name": "keystone", "id": "c-identity", "endpoints": endpoint(s.URL + "/v3/")},
			{"type": "network", "name": "neutron", "id": "c-network", "endpoints": endpoint(s.URL + "/")},
		},
	}}, map[string]string{"X-Subject-Token": tok}
}

// --- Neutron ---

func (s *Server) now() string {
	s.clock = s.clock.Add(time.Second)
	return s.clock.Format(time.RFC3339)
}

func (s *Server) newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func (s *Server) overQuota(resource string, have int) *apiError {
	if limit, ok := s.quota[resource]; ok && have >= limit {
		return errf(409, "OverQuota", "Quota exceeded for resources: ['%s'].", resource)
	}
	return nil
}

// singular is the JSON key of one resource of a collection.
var singular = map[string]string{
	Networks: "network", Subnets: "subnet", SecurityGroups: "security_group",
	SecurityGroupRules: "security_group_rule", Ports: "port", FloatingIPs: "floatingip", Trunks: "trunk",
}

// plural is the JSON key of a list of a collection.
var plural = map[string]string{
	Networks: "networks", Subnets: "subnets", SecurityGroups: "security_groups",
	SecurityGroupRules: "security_group_rules", Ports: "ports", FloatingIPs: "floatingips", Trunks: "trunks",
}

func (s *Server) neutron(r *http.Request, kind, id string, body []byte) (int, any, *apiError) {
	if base, ok := strings.CutSuffix(kind, Tags); ok {
		return s.tags(r, base, id, body)
	}
	if _, ok := singular[kind]; !ok {
		return 0, nil, errf(404, "NotFound", "resource %s not found", kind)
	}
	if kind == Trunks && id != "" {
		if action := strings.TrimPrefix(r.URL.Path, "/v2.0/trunks/"+id); action != "" {
			return s.trunkAction(r.Method, id, strings.TrimPrefix(action, "/"), body)
		}
	}
	switch {
	case r.Method == http.MethodGet && id == "":
		items, apiErr := s.list(kind, r.URL.Query())
		if apiErr != nil {
			return 0, nil, apiErr
		}
		page, next, apiErr := s.paginate(items, r.URL)
		if apiErr != nil {
			return 0, nil, apiErr
		}
		resp := map[string]any{plural[kind]: page}
		if next != "" {
			resp[plural[kind]+"_links"] = []map[string]string{{"rel": "next", "href": next}}
		}
		return 200, resp, nil
	case r.Method == http.MethodGet:
		obj := s.get(kind, id)
		if obj == nil {
			return 0, nil, errf(404, notFoundType(kind), "%s %s could not be found.", singular[kind], id)
		}
		return 200, map[string]any{singular[kind]: obj}, nil
	case r.Method == http.MethodPost && id == "":
		return s.create(kind, body)
	case r.Method == http.MethodPut && id != "":
		if e := s.revisionMatches(kind, id, r.Header.Get("If-Match")); e != nil {
			return 0, nil, e
		}
		return s.update(kind, id, body)
	case r.Method == http.MethodDelete && id != "":
		if apiErr := s.delete(kind, id); apiErr != nil {
			return 0, nil, apiErr
		}
		return 204, nil, nil
	}
	return 0, nil, errf(405, "HTTPMethodNotAllowed", "%s not allowed on %s", r.Method, r.URL.Path)
}

// revisionMatches enforces an update's If-Match: revision_number=N (Neutron's compare and
// swap): 412 when the resource has moved on.
func (s *Server) revisionMatches(kind, id, ifMatch string) *apiError {
	want, ok := strings.CutPrefix(ifMatch, "revision_number=")
	if !ok {
		return nil
	}
	have := -1
	switch kind {
	case Ports:
		if p, ok := s.ports[id]; ok {
			have = p.RevisionNumber
		}
	case SecurityGroups:
		if g, ok := s.groups[id]; ok {
			have = g.RevisionNumber
		}
	case FloatingIPs:
		if f, ok := s.fips[id]; ok {
			have = f.RevisionNumber
		}
	}
	if have >= 0 && want != strconv.Itoa(have) {
		return errf(412, "RevisionNumberConstraintFailed", "Constrained to %s, but current revision is %d", want, have)
	}
	return nil
}

func notFoundType(kind string) string {
	return map[string]string{
		Networks: "NetworkNotFound", Subnets: "SubnetNotFound", SecurityGroups: "SecurityGroupNotFound",
		SecurityGroupRules: "SecurityGroupRuleNotFound", Ports: "PortNotFound", FloatingIPs: "FloatingIPNotFound",
		Trunks: "TrunkNotFound",
	}[kind]
}

// get returns the resource (as a JSON-ready value) or nil.
func (s *Server) get(kind, id string) any {
	switch kind {
	case Networks:
		if v, ok := s.networks[id]; ok {
			return v
		}
	case Subnets:
		if v, ok := s.subnets[id]; ok {
			return v
		}
	case SecurityGroups:
		if v, ok := s.groups[id]; ok {
			c := *v
			c.Rules = s.rulesOf(id)
			return &c
		}
	case SecurityGroupRules:
		if v, ok := s.rules[id]; ok {
			return v
		}
	case Ports:
		if v, ok := s.ports[id]; ok {
			return v
		}
	case FloatingIPs:
		if v, ok := s.fips[id]; ok {
			return v
		}
	case Trunks:
		if v, ok := s.trunks[id]; ok {
			return v
		}
	}
	return nil
}

func (s *Server) rulesOf(groupID string) []*Rule {
	out := []*Rule{}
	for _, r := range sorted(s.rules, func(r *Rule) string { return r.CreatedAt + r.ID }) {
		if r.SecurityGroupID == groupID {
			out = append(out, r)
		}
	}
	return out
}

func (s *Server) all(kind string) []any {
	var out []any
	switch kind {
	case Networks:
		for _, v := range sorted(s.networks, func(v *Network) string { return v.ID }) {
			out = append(out, v)
		}
	case Subnets:
		for _, v := range sorted(s.subnets, func(v *Subnet) string { return v.ID }) {
			out = append(out, v)
		}
	case SecurityGroups:
		for _, v := range sorted(s.groups, func(v *SecurityGroup) string { return v.CreatedAt + v.ID }) {
			out = append(out, s.get(kind, v.ID))
		}
	case SecurityGroupRules:
		for _, v := range sorted(s.rules, func(v *Rule) string { return v.CreatedAt + v.ID }) {
			out = append(out, v)
		}
	case Ports:
		for _, v := range sorted(s.ports, func(v *Port) string { return v.CreatedAt + v.ID }) {
			out = append(out, v)
		}
	case FloatingIPs:
		for _, v := range sorted(s.fips, func(v *FloatingIP) string { return v.CreatedAt + v.ID }) {
			out = append(out, v)
		}
	case Trunks:
		for _, v := range sorted(s.trunks, func(v *Trunk) string { return v.CreatedAt + v.ID }) {
			out = append(out, v)
		}
	}
	return out
}

// list answers GET /v2.0/<kind>?filters: every filter key must be a field of the resource
// (else 400, like Neutron's filter validation); tags / tags-any / not-tags / not-tags-any
// take comma-separated tags.
func (s *Server) list(kind string, q url.Values) ([]any, *apiError) {
	out := []any{}
	meta := map[string]bool{"fields": true, "limit": true, "marker": true, "sort_key": true, "sort_dir": true, "page_reverse": true}
	for _, obj := range s.all(kind) {
		raw, _ := json.Marshal(obj)
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		keep := true
		for key, vals := range q {
			if meta[key] {
				continue
			}
			switch key {
			case "tags", "tags-any", "not-tags", "not-tags-any":
				have := map[string]bool{}
				if ts, ok := m["tags"].([]any); ok {
					for _, t := range ts {
						have[fmt.Sprint(t)] = true
					}
				}
				var want []string
				for _, v := range vals {
					want = append(want, strings.Split(v, ",")...)
				}
				all, anyOf := true, false
				for _, t := range want {
					if have[t] {
						anyOf = true
					} else {
						all = false
					}
				}
				switch key {
				case "tags":
					keep = keep && all
				case "tags-any":
					keep = keep && anyOf
				case "not-tags":
					keep = keep && !all
				case "not-tags-any":
					keep = keep && !anyOf
				}
				continue
			}
			field, ok := m[key]
			if !ok {
				return nil, errf(400, "HTTPBadRequest", "%s is invalid attribute for filtering", key)
			}
			if !slices.Contains(vals, scalar(field)) {
				keep = false
			}
		}
		if keep {
			out = append(out, obj)
		}
	}
	return out, nil
}

func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (s *Server) tags(r *http.Request, kind, id string, body []byte) (int, any, *apiError) {
	var tags *[]string
	switch kind {
	case SecurityGroups:
		if g, ok := s.groups[id]; ok {
			tags = &g.Tags
			defer func() { g.RevisionNumber++ }()
		}
	case Ports:
		if p, ok := s.ports[id]; ok {
			tags = &p.Tags
			defer func() { p.RevisionNumber++ }()
		}
	case FloatingIPs:
		if f, ok := s.fips[id]; ok {
			tags = &f.Tags
			defer func() { f.RevisionNumber++ }()
		}
	case Networks:
		if n, ok := s.networks[id]; ok {
			tags = &n.Tags
		}
	default:
		return 0, nil, errf(404, "NotFound", "tags are not supported on %s", kind)
	}
	if tags == nil {
		return 0, nil, errf(404, notFoundType(kind), "%s %s could not be found.", singular[kind], id)
	}
	rest := strings.TrimPrefix(r.URL.Path, "/v2.0/"+kind+"/"+id+"/tags")
	tag := ""
	if rest != "" {
		t, err := url.PathUnescape(strings.TrimPrefix(rest, "/"))
		if err != nil {
			return 0, nil, errf(400, "HTTPBadRequest", "bad tag")
		}
		tag = t
	}
	switch {
	case r.Method == http.MethodGet && tag == "":
		return 200, map[string]any{"tags": *tags}, nil
	case r.Method == http.MethodGet:
		if slices.Contains(*tags, tag) {
			return 204, nil, nil
		}
		return 0, nil, errf(404, "TagNotFound", "Tag %s could not be found.", tag)
	case r.Method == http.MethodPut && tag == "":
		var req struct {
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(body, &req); err != nil || req.Tags == nil {
			return 0, nil, errf(400, "HTTPBadRequest", "Invalid input for tags")
		}
		for _, t := range req.Tags {
			if bad := validTag(t); bad != nil {
				return 0, nil, bad
			}
		}
		*tags = dedupe(req.Tags)
		return 200, map[string]any{"tags": *tags}, nil
	case r.Method == http.MethodPut:
		if bad := validTag(tag); bad != nil {
			return 0, nil, bad
		}
		if !slices.Contains(*tags, tag) {
			*tags = append(*tags, tag)
		}
		return 201, nil, nil
	case r.Method == http.MethodDelete && tag == "":
		*tags = []string{}
		return 204, nil, nil
	case r.Method == http.MethodDelete:
		i := slices.Index(*tags, tag)
		if i < 0 {
			return 0, nil, errf(404, "TagNotFound", "Tag %s could not be found.", tag)
		}
		*tags = slices.Delete(*tags, i, i+1)
		return 204, nil, nil
	}
	return 0, nil, errf(405, "HTTPMethodNotAllowed", "method not allowed")
}

// validTag enforces Neutron's tag rules: at most 60 characters, no commas.
func validTag(t string) *apiError {
	if t == "" || len(t) > 60 || strings.Contains(t, ",") {
		return errf(400, "HTTPBadRequest", "Invalid input for tags: '%s' is not a valid tag", t)
	}
	return nil
}

func dedupe(in []string) []string {
	out := []string{}
	for _, t := range in {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func decode(body []byte, key string) (map[string]any, *apiError) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, errf(400, "HTTPBadRequest", "malformed JSON")
	}
	raw, ok := req[key]
	if !ok {
		return nil, errf(400, "HTTPBadRequest", "Resource body required: %s", key)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errf(400, "HTTPBadRequest", "malformed %s", key)
	}
	return m, nil
}

func str(m map[string]any, k string) string {
	if v, ok := m[k].(string); ok {
		return v
	}
	return ""
}

func (s *Server) create(kind string, body []byte) (int, any, *apiError) {
	switch kind {
	case SecurityGroups:
		m, e := decode(body, "security_group")
		if e != nil {
			return 0, nil, e
		}
		if e := s.overQuota("security_group", len(s.groups)); e != nil {
			return 0, nil, e
		}
		g := &SecurityGroup{ID: s.newID(), Name: str(m, "name"), Description: str(m, "description"), ProjectID: ProjectID, Stateful: true, Tags: []string{}, CreatedAt: s.now()}
		s.groups[g.ID] = g
		// Like Neutron: a new group allows all egress.
		for _, et := range []string{"IPv4", "IPv6"} {
			r := &Rule{ID: s.newID(), SecurityGroupID: g.ID, Direction: "egress", EtherType: et, ProjectID: ProjectID, CreatedAt: s.now()}
			s.rules[r.ID] = r
		}
		return 201, map[string]any{"security_group": s.get(kind, g.ID)}, nil
	case SecurityGroupRules:
		var req map[string]json.RawMessage
		if err := json.Unmarshal(body, &req); err != nil {
			return 0, nil, errf(400, "HTTPBadRequest", "malformed JSON")
		}
		if raw, ok := req["security_group_rules"]; ok { // bulk: all or nothing
			var ms []map[string]any
			if err := json.Unmarshal(raw, &ms); err != nil {
				return 0, nil, errf(400, "HTTPBadRequest", "malformed security_group_rules")
			}
			var made []*Rule
			for _, m := range ms {
				r, e := s.newRule(m, len(s.rules)+len(made), made)
				if e != nil {
					return 0, nil, e
				}
				made = append(made, r)
			}
			for _, r := range made {
				s.rules[r.ID] = r
			}
			return 201, map[string]any{"security_group_rules": made}, nil
		}
		m, e := decode(body, "security_group_rule")
		if e != nil {
			return 0, nil, e
		}
		r, e := s.newRule(m, len(s.rules), nil)
		if e != nil {
			return 0, nil, e
		}
		s.rules[r.ID] = r
		return 201, map[string]any{"security_group_rule": r}, nil
	case Ports:
		m, e := decode(body, "port")
		if e != nil {
			return 0, nil, e
		}
		p, e := s.createPort(m)
		if e != nil {
			return 0, nil, e
		}
		return 201, map[string]any{"port": p}, nil
	case FloatingIPs:
		m, e := decode(body, "floatingip")
		if e != nil {
			return 0, nil, e
		}
		netID := str(m, "floating_network_id")
		n, ok := s.networks[netID]
		if !ok {
			return 0, nil, errf(404, "NetworkNotFound", "Network %s could not be found.", netID)
		}
		if !n.External {
			return 0, nil, errf(400, "BadRequest", "Bad floatingip request: Network %s is not a valid external network.", netID)
		}
		if e := s.overQuota("floatingip", len(s.fips)); e != nil {
			return 0, nil, e
		}
		sub := s.fipNet[netID]
		addr, e := s.allocate(sub, func(a string) bool {
			for _, f := range s.fips {
				if f.FloatingIPAddress == a {
					return true
				}
			}
			return false
		})
		if e != nil {
			return 0, nil, e
		}
		f := &FloatingIP{ID: s.newID(), Description: str(m, "description"), FloatingNetworkID: netID, FloatingIPAddress: addr, Status: "DOWN", ProjectID: ProjectID, Tags: []string{}, CreatedAt: s.now()}
		if pid := str(m, "port_id"); pid != "" {
			if e := s.associate(f, pid); e != nil {
				return 0, nil, e
			}
		}
		s.fips[f.ID] = f
		return 201, map[string]any{"floatingip": f}, nil
	case Trunks:
		m, e := decode(body, "trunk")
		if e != nil {
			return 0, nil, e
		}
		t, e := s.createTrunk(m)
		if e != nil {
			return 0, nil, e
		}
		return 201, map[string]any{"trunk": t}, nil
	}
	return 0, nil, errf(405, "HTTPMethodNotAllowed", "cannot create %s", kind)
}

func (s *Server) newRule(m map[string]any, have int, pending []*Rule) (*Rule, *apiError) {
	gid := str(m, "security_group_id")
	if _, ok := s.groups[gid]; !ok {
		return nil, errf(404, "SecurityGroupNotFound", "Security group %s does not exist", gid)
	}
	dir, et := str(m, "direction"), str(m, "ethertype")
	if (dir != "ingress" && dir != "egress") || (et != "IPv4" && et != "IPv6") {
		return nil, errf(400, "HTTPBadRequest", "invalid direction or ethertype")
	}
	if e := s.overQuota("security_group_rule", have); e != nil {
		return nil, e
	}
	r := &Rule{ID: s.newID(), SecurityGroupID: gid, Direction: dir, EtherType: et, Description: str(m, "description"), ProjectID: ProjectID, CreatedAt: s.now()}
	if p := str(m, "protocol"); p != "" {
		r.Protocol = &p
	}
	for k, dst := range map[string]**int{"port_range_min": &r.PortRangeMin, "port_range_max": &r.PortRangeMax} {
		if v, ok := m[k].(float64); ok {
			i := int(v)
			*dst = &i
		}
	}
	if p := str(m, "remote_ip_prefix"); p != "" {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, errf(400, "HTTPBadRequest", "invalid remote_ip_prefix %q", p)
		}
		if (pfx.Addr().Is4()) != (et == "IPv4") {
			return nil, errf(400, "HTTPBadRequest", "Conflicting value ethertype %s for CIDR %s", et, p)
		}
		c := pfx.Masked().String()
		r.RemoteIPPrefix = &c
	}
	if g := str(m, "remote_group_id"); g != "" {
		r.RemoteGroupID = &g
	}
	for _, o := range append(s.rulesOf(gid), pending...) {
		if sameRule(o, r) {
			return nil, errf(409, "SecurityGroupRuleExists", "Security group rule already exists. Rule id is %s.", o.ID)
		}
	}
	return r, nil
}

func sameRule(a, b *Rule) bool {
	p := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	i := func(v *int) int {
		if v == nil {
			return -1
		}
		return *v
	}
	return a.Direction == b.Direction && a.EtherType == b.EtherType && p(a.Protocol) == p(b.Protocol) &&
		i(a.PortRangeMin) == i(b.PortRangeMin) && i(a.PortRangeMax) == i(b.PortRangeMax) &&
		p(a.RemoteIPPrefix) == p(b.RemoteIPPrefix) && p(a.RemoteGroupID) == p(b.RemoteGroupID)
}

func (s *Server) allocate(sub *Subnet, used func(string) bool) (string, *apiError) {
	if sub == nil {
		return "", errf(409, "IpAddressGenerationFailure", "No more IP addresses available on network.")
	}
	for a := sub.next; sub.prefix.Contains(a); a = a.Next() {
		if !used(a.String()) && a != sub.prefix.Addr() {
			sub.next = a.Next()
			return a.String(), nil
		}
	}
	return "", errf(409, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", sub.NetworkID)
}

func (s *Server) createPort(m map[string]any) (*Port, *apiError) {
	netID := str(m, "network_id")
	n, ok := s.networks[netID]
	if !ok {
		return nil, errf(404, "NetworkNotFound", "Network %s could not be found.", netID)
	}
	if e := s.overQuota("port", len(s.ports)); e != nil {
		return nil, e
	}
	subID := ""
	if fixed, ok := m["fixed_ips"].([]any); ok && len(fixed) > 0 {
		if f0, ok := fixed[0].(map[string]any); ok {
			subID = str(f0, "subnet_id")
		}
	}
	if subID == "" && len(n.Subnets) > 0 {
		subID = n.Subnets[0]
	}
	sub, ok := s.subnets[subID]
	if !ok || sub.NetworkID != netID {
		return nil, errf(400, "InvalidInput", "Invalid input for operation: subnet %s is not on network %s.", subID, netID)
	}
	addr, e := s.allocate(sub, func(a string) bool {
		for _, p := range s.ports {
			for _, f := range p.FixedIPs {
				if f.IPAddress == a {
					return true
				}
			}
		}
		return a == sub.GatewayIP
	})
	if e != nil {
		return nil, e
	}
	groups := []string{}
	if sg, ok := m["security_groups"].([]any); ok {
		for _, g := range sg {
			gid := fmt.Sprint(g)
			if _, ok := s.groups[gid]; !ok {
				return nil, errf(404, "SecurityGroupNotFound", "Security group %s does not exist", gid)
			}
			groups = append(groups, gid)
		}
	}
	id := s.newID()
	p := &Port{
		ID: id, Name: str(m, "name"), Description: str(m, "description"), NetworkID: netID,
		MACAddress: "fa:16:3e:" + id[0:2] + ":" + id[2:4] + ":" + id[4:6],
		FixedIPs:   []FixedIP{{SubnetID: subID, IPAddress: addr}}, SecurityGroups: groups,
		DeviceID: str(m, "device_id"), DeviceOwner: str(m, "device_owner"),
		AllowedAddressPairs: []AddressPair{}, PortSecurityEnabled: true,
		Status: "DOWN", AdminStateUp: true, ProjectID: ProjectID, Tags: []string{}, CreatedAt: s.now(),
	}
	if e := s.setPortSecurity(p, m); e != nil {
		return nil, e
	}
	s.ports[p.ID] = p
	return p, nil
}

// associate points f at the port (its first fixed IP), enforcing one floating IP per fixed IP.
func (s *Server) associate(f *FloatingIP, portID string) *apiError {
	p, ok := s.ports[portID]
	if !ok {
		return errf(404, "PortNotFound", "Port %s could not be found.", portID)
	}
	if len(p.FixedIPs) == 0 {
		return errf(400, "BadRequest", "Port %s does not have any IP addresses", portID)
	}
	fixed := p.FixedIPs[0].IPAddress
	for _, o := range s.fips {
		if o.ID != f.ID && o.PortID != nil && *o.PortID == portID {
			return errf(409, "FloatingIPPortAlreadyAssociated", "Cannot associate floating IP %s (%s) with port %s using fixed IP %s, as that fixed IP already has a floating IP on external network %s.", f.FloatingIPAddress, f.ID, portID, fixed, o.FloatingNetworkID)
		}
	}
	pid, router := portID, "router-1"
	f.PortID, f.FixedIPAddress, f.RouterID, f.Status = &pid, &fixed, &router, "ACTIVE"
	return nil
}

func (s *Server) update(kind, id string, body []byte) (int, any, *apiError) {
	switch kind {
	case FloatingIPs:
		f, ok := s.fips[id]
		if !ok {
			return 0, nil, errf(404, "FloatingIPNotFound", "Floating IP %s could not be found", id)
		}
		m, e := decode(body, "floatingip")
		if e != nil {
			return 0, nil, e
		}
		if v, present := m["port_id"]; present {
			if v == nil || v == "" {
				f.PortID, f.FixedIPAddress, f.RouterID, f.Status = nil, nil, nil, "DOWN"
			} else if e := s.associate(f, fmt.Sprint(v)); e != nil {
				return 0, nil, e
			}
		}
		if v, ok := m["description"].(string); ok {
			f.Description = v
		}
		f.RevisionNumber++
		return 200, map[string]any{"floatingip": f}, nil
	case Ports:
		p, ok := s.ports[id]
		if !ok {
			return 0, nil, errf(404, "PortNotFound", "Port %s could not be found.", id)
		}
		m, e := decode(body, "port")
		if e != nil {
			return 0, nil, e
		}
		if sg, ok := m["security_groups"].([]any); ok {
			groups := []string{}
			for _, g := range sg {
				gid := fmt.Sprint(g)
				if _, ok := s.groups[gid]; !ok {
					return 0, nil, errf(404, "SecurityGroupNotFound", "Security group %s does not exist", gid)
				}
				groups = append(groups, gid)
			}
			p.SecurityGroups = groups
		}
		if v, ok := m["name"].(string); ok {
			p.Name = v
		}
		if v, ok := m["description"].(string); ok {
			p.Description = v
		}
		if e := s.setPortSecurity(p, m); e != nil {
			return 0, nil, e
		}
		p.RevisionNumber++
		return 200, map[string]any{"port": p}, nil
	case SecurityGroups:
		g, ok := s.groups[id]
		if !ok {
			return 0, nil, errf(404, "SecurityGroupNotFound", "Security group %s does not exist", id)
		}
		m, e := decode(body, "security_group")
		if e != nil {
			return 0, nil, e
		}
		if v, ok := m["name"].(string); ok {
			g.Name = v
		}
		if v, ok := m["description"].(string); ok {
			g.Description = v
		}
		g.RevisionNumber++
		return 200, map[string]any{"security_group": s.get(kind, id)}, nil
	}
	return 0, nil, errf(405, "HTTPMethodNotAllowed", "cannot update %s", kind)
}

func (s *Server) delete(kind, id string) *apiError {
	switch kind {
	case FloatingIPs:
		if _, ok := s.fips[id]; !ok {
			return errf(404, "FloatingIPNotFound", "Floating IP %s could not be found", id)
		}
		delete(s.fips, id)
	case Ports:
		p, ok := s.ports[id]
		if !ok {
			return errf(404, "PortNotFound", "Port %s could not be found.", id)
		}
		if p.DeviceOwner == SubportOwner {
			return errf(409, "PortInUseAsSubPort", "Port %s is currently a subport for trunk %s.", id, p.DeviceID)
		}
		if p.TrunkDetails != nil {
			return errf(409, "PortInUseAsTrunkParent", "Port %s is currently in use and is not eligible for deletion: it is the parent port of trunk %s.", id, p.TrunkDetails.TrunkID)
		}
		for _, f := range s.fips {
			if f.PortID != nil && *f.PortID == id {
				f.PortID, f.FixedIPAddress, f.RouterID, f.Status = nil, nil, nil, "DOWN"
			}
		}
		delete(s.ports, id)
	case SecurityGroups:
		if _, ok := s.groups[id]; !ok {
			return errf(404, "SecurityGroupNotFound", "Security group %s does not exist", id)
		}
		for _, p := range s.ports {
			if slices.Contains(p.SecurityGroups, id) {
				return errf(409, "SecurityGroupInUse", "Security Group %s in use.", id)
			}
		}
		for rid, r := range s.rules {
			if r.SecurityGroupID == id {
				delete(s.rules, rid)
			}
		}
		delete(s.groups, id)
	case SecurityGroupRules:
		if _, ok := s.rules[id]; !ok {
			return errf(404, "SecurityGroupRuleNotFound", "Security group rule %s does not exist", id)
		}
		delete(s.rules, id)
	case Trunks:
		return s.deleteTrunk(id)
	default:
		return errf(405, "HTTPMethodNotAllowed", "cannot delete %s", kind)
	}
	return nil
}
