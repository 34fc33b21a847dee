package strongswan

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/strongswan/govici/vici"

	"github.com/bnerd/bnerd-vpn-operator/internal/agent"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/strongswan"
)

// charonCommands are the VICI commands apply carries its plan out with.
type charonCommands interface {
	// unloadConn unloads a connection and ends its SAs.
	unloadConn(ctx context.Context, name string) error
	// unloadShared unloads a pre-shared key.
	unloadShared(ctx context.Context, id string) error
	// loadShared loads a pre-shared key with its data (replacing one of the same id).
	loadShared(ctx context.Context, k strongswan.SharedKey, data []byte) error
	// loadConn loads a connection (replacing one of the same name).
	loadConn(ctx context.Context, c strongswan.Connection) error
	// initiate starts a new or changed connection's CHILD_SAs charon does not start itself.
	initiate(ctx context.Context, c strongswan.Connection)
	// kick restarts the negotiations of a connection whose pre-shared key changed.
	kick(ctx context.Context, c strongswan.Connection)
}

var _ charonCommands = (*Driver)(nil)

// keyLoad is a pre-shared key read from its Secret, with the fingerprint it is loaded under.
type keyLoad struct {
	key  strongswan.SharedKey
	data []byte
	fp   string
	// replaces: charon holds another key of this id, loaded before.
	replaces bool
}

// applyPlan is what apply does to charon (planApply).
type applyPlan struct {
	// missing are the connections not loaded because a key of theirs could not be read, with
	// the reason.
	missing map[string]string
	// wanted are the connections to be loaded: the bundle's, but the missing ones.
	wanted map[string]bool
	// unloadConns and unloadKeys are what charon holds that is no longer wanted, sorted.
	unloadConns, unloadKeys []string
	// conns are the wanted connections in the bundle's order, with what each needs loaded.
	conns []connPlan
}

// connPlan is what one wanted connection needs loaded.
type connPlan struct {
	conn strongswan.Connection
	// keys are its keys charon does not hold as they are now: loaded before the connection.
	keys []keyLoad
	// fp is the connection's fingerprint; fpErr why it has none (it is then not loaded).
	fp    string
	fpErr error
	// load: charon does not hold the connection as it is now; reload: it holds another
	// version of it, loaded before.
	load, reload bool
}

// keyReplaced reports whether the connection gets a new key in place of one charon held.
func (cp *connPlan) keyReplaced() bool {
	return slices.ContainsFunc(cp.keys, func(k keyLoad) bool { return k.replaces })
}

// planApply decides, from the bundle's connections, their keys as read (keysByConn; missing:
// the connections a key could not be read for) and what charon holds as far as the driver
// loaded it (fingerprints by connection name and by key id), what to unload and what to load.
// Only what changed is loaded: a connection or key whose fingerprint charon already holds is
// not touched. A connection named twice is planned once, as when its first load succeeds.
func planApply(cfg *strongswan.Config, keysByConn map[string][]keyLoad, missing map[string]string,
	loadedConns, loadedKeys map[string]string) *applyPlan {
	plan := &applyPlan{missing: missing, wanted: map[string]bool{}}
	wantKeys := map[string]bool{}
	for _, c := range cfg.Connections {
		if _, miss := missing[c.Name]; miss {
			continue
		}
		plan.wanted[c.Name] = true
		for _, k := range keysByConn[c.Name] {
			wantKeys[k.key.ID] = true
		}
	}
	for name := range loadedConns {
		if !plan.wanted[name] {
			plan.unloadConns = append(plan.unloadConns, name)
		}
	}
	for id := range loadedKeys {
		if !wantKeys[id] {
			plan.unloadKeys = append(plan.unloadKeys, id)
		}
	}
	slices.Sort(plan.unloadConns)
	slices.Sort(plan.unloadKeys)

	// What charon holds once the loads before this one succeeded.
	conns, keys := make(map[string]string, len(loadedConns)), make(map[string]string, len(loadedKeys))
	maps.Copy(conns, loadedConns)
	maps.Copy(keys, loadedKeys)
	for _, c := range cfg.Connections {
		if !plan.wanted[c.Name] {
			continue
		}
		cp := connPlan{conn: c}
		for _, k := range keysByConn[c.Name] {
			loaded := keys[k.key.ID]
			if loaded == k.fp {
				continue
			}
			k.replaces = loaded != ""
			cp.keys = append(cp.keys, k)
			keys[k.key.ID] = k.fp
		}
		cp.fp, cp.fpErr = connFingerprint(c)
		if cp.fpErr == nil {
			loaded, held := conns[c.Name]
			cp.load, cp.reload = loaded != cp.fp, held
			conns[c.Name] = cp.fp
		}
		plan.conns = append(plan.conns, cp)
	}
	return plan
}

// readKeys reads every pre-shared key of the bundle: a connection without one of its keys is
// missing (with the reason), and none of its keys is loaded.
func (d *Driver) readKeys(keys []strongswan.SharedKey, secrets agent.Secrets) (map[string][]keyLoad, map[string]string) {
	missing := map[string]string{}
	keysByConn := map[string][]keyLoad{}
	for _, k := range keys {
		data, err := secrets.Get(k.Secret)
		switch {
		case err != nil:
			missing[k.Connection] = fmt.Sprintf("pre-shared key not loaded: Secret %q key %q: %v", k.Secret.Name, k.Secret.Key, err)
		case len(data) == 0:
			missing[k.Connection] = fmt.Sprintf("pre-shared key not loaded: Secret %q key %q is empty", k.Secret.Name, k.Secret.Key)
		default:
			keysByConn[k.Connection] = append(keysByConn[k.Connection], keyLoad{key: k, data: data, fp: d.keyFingerprint(k, data)})
		}
	}
	for conn := range missing {
		// With any of its keys missing, a connection is not loaded, nor are its other keys.
		delete(keysByConn, conn)
	}
	return keysByConn, missing
}

// carryOut runs the plan with charon: unloads first (connections, then keys), then each
// connection's keys and the connection, in the bundle's order. It records what charon holds
// and why a connection is not loaded; the errors name connections, Secrets and keys.
func (d *Driver) carryOut(ctx context.Context, plan *applyPlan, charon charonCommands) error {
	var errs []error
	// 1. Connections no longer wanted: unload, and end their SAs (unload-conn ends them only
	// for connections with start_action start).
	for _, name := range plan.unloadConns {
		if err := charon.unloadConn(ctx, name); err != nil {
			errs = append(errs, err)
			continue
		}
		d.mu.Lock()
		delete(d.loadedConns, name)
		d.mu.Unlock()
	}
	// 2. Keys no longer wanted.
	for _, id := range plan.unloadKeys {
		if err := charon.unloadShared(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("unloading pre-shared key %s: %w", id, err))
			continue
		}
		d.mu.Lock()
		delete(d.loadedKeys, id)
		d.mu.Unlock()
	}
	// 3. New and changed keys, then new and changed connections, in the bundle's order.
	for i := range plan.conns {
		errs = append(errs, d.loadConnection(ctx, &plan.conns[i], charon)...)
	}
	return errors.Join(errs...)
}

// loadConnection loads what one connection needs: its changed keys, then the connection when
// it changed (and initiates it); a connection whose only change is a key replaced is kicked.
// A failed key leaves the connection as it is.
func (d *Driver) loadConnection(ctx context.Context, cp *connPlan, charon charonCommands) []error {
	c := cp.conn
	var errs []error
	keysOK := true
	before := d.seenID()
	for _, k := range cp.keys {
		if err := charon.loadShared(ctx, k.key, k.data); err != nil {
			keysOK = false
			errs = append(errs, fmt.Errorf("connection %s: loading pre-shared key %s (Secret %q key %q): %w", c.Name, k.key.ID, k.key.Secret.Name, k.key.Secret.Key, err))
			continue
		}
		d.mu.Lock()
		d.loadedKeys[k.key.ID] = k.fp
		d.mu.Unlock()
	}
	if !keysOK {
		d.setLoadErr(c.Name, "pre-shared key could not be loaded")
		return errs
	}
	keyChanged := cp.keyReplaced()
	if keyChanged {
		// A new key is a new chance: failures of the negotiations so far (with the old
		// key) are no longer the state.
		d.forgetFailures(c.Name, before)
	}
	if cp.fpErr != nil {
		d.setLoadErr(c.Name, cp.fpErr.Error())
		return append(errs, cp.fpErr)
	}
	if !cp.load {
		if keyChanged {
			charon.kick(ctx, c)
		}
		return errs
	}
	before = d.seenID()
	if err := charon.loadConn(ctx, c); err != nil {
		err = fmt.Errorf("connection %s (peer %s): load-conn: %w", c.Name, c.Peer, err)
		d.setLoadErr(c.Name, err.Error())
		return append(errs, err)
	}
	d.mu.Lock()
	d.loadedConns[c.Name] = cp.fp
	delete(d.loadErrs, c.Name)
	d.mu.Unlock()
	d.forgetFailures(c.Name, before)
	if cp.reload {
		d.log.Info("reloaded changed connection", "connection", c.Name, "peer", c.Peer)
	} else {
		d.log.Info("loaded connection", "connection", c.Name, "peer", c.Peer)
	}
	charon.initiate(ctx, c)
	return errs
}

// unloadShared unloads a pre-shared key.
func (d *Driver) unloadShared(ctx context.Context, id string) error {
	in := vici.NewMessage()
	_ = in.Set("id", id)
	_, err := d.call(ctx, "unload-shared", in)
	return err
}

// loadShared loads a pre-shared key.
func (d *Driver) loadShared(ctx context.Context, k strongswan.SharedKey, data []byte) error {
	m, err := k.LoadSharedMessage(data)
	if err == nil {
		_, err = d.call(ctx, "load-shared", m)
	}
	return err
}

// loadConn loads a connection.
func (d *Driver) loadConn(ctx context.Context, c strongswan.Connection) error {
	m, err := c.LoadConnMessage()
	if err == nil {
		_, err = d.call(ctx, "load-conn", m)
	}
	return err
}
