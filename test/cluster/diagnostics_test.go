package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// What a failed step of a gateway with a standby prints: every agent's log and the pair's
// timeline (the Lease's holder, the pods labelled active, the load balancer's endpoints), so that
// an outage can be placed between the agents, the operator and the Service's endpoints.

// podLogs follows one container's log in every pod that matches a selector, the pods created
// while it runs included, so that a failed step can print what the pods said even when the step
// deleted them (a deleted pod's log is gone from the API).
type podLogs struct {
	namespace string
	selector  client.MatchingLabels
	container string

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	lines  []logLine
	seen   map[string]bool
}

// followGatewayLogs follows the agent's log of every pod of the gateway and the pair's timeline
// until the test ends, and prints them when it failed (or BNERD_LAB_AGENT_LOGS is set).
func followGatewayLogs(t *testing.T, gw string) {
	t.Helper()
	tl := startPairTimeline(gw)
	f := &podLogs{namespace: labNS, selector: client.MatchingLabels{gatewayKey: gw}, container: children.ContainerAgent,
		seen: map[string]bool{}}
	c, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	f.wg.Add(1)
	go f.discover(c)
	t.Cleanup(func() {
		f.stop()
		tl.stop()
		if t.Failed() || os.Getenv("BNERD_LAB_AGENT_LOGS") != "" {
			t.Logf("the agents of %s said (by timestamp):\n%s", gw, f.String())
			t.Logf("the pair of %s (changes only):\n%s", gw, tl.String())
		}
	})
}

// discover starts a follower for every matching pod, looking again every 250 ms.
func (f *podLogs) discover(c context.Context) {
	defer f.wg.Done()
	for c.Err() == nil {
		var pods corev1.PodList
		lc, cancel := context.WithTimeout(c, 10*time.Second)
		err := L.c.List(lc, &pods, client.InNamespace(f.namespace), f.selector)
		cancel()
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if f.seen[p.Name] || !containerStarted(p, f.container) {
					continue
				}
				f.seen[p.Name] = true
				f.wg.Add(1)
				go f.follow(c, p.Name)
			}
		}
		select {
		case <-c.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func containerStarted(p *corev1.Pod, name string) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			return s.State.Running != nil || s.State.Terminated != nil
		}
	}
	return false
}

// follow streams one pod's log until it ends (the pod went) or c is cancelled.
func (f *podLogs) follow(c context.Context, pod string) {
	defer f.wg.Done()
	rc, err := L.cs.CoreV1().Pods(f.namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: f.container, Follow: true, Timestamps: true}).Stream(c)
	if err != nil {
		f.add(logLine{at: time.Now(), pod: pod, text: fmt.Sprintf("(no log: %v)", err)})
		return
	}
	defer rc.Close()
	s := bufio.NewScanner(rc)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		ts, line, _ := strings.Cut(s.Text(), " ")
		at, _ := time.Parse(time.RFC3339Nano, ts)
		f.add(logLine{at: at, pod: pod, text: line})
	}
}

type logLine struct {
	at   time.Time
	pod  string
	text string
}

func (f *podLogs) add(line logLine) {
	f.mu.Lock()
	f.lines = append(f.lines, line)
	f.mu.Unlock()
}

func (f *podLogs) stop() {
	f.cancel()
	f.wg.Wait()
}

// String is every line, ordered by timestamp.
func (f *podLogs) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	lines := append([]logLine(nil), f.lines...)
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%s %s %s\n", l.at.UTC().Format("15:04:05.000"), l.pod, l.text)
	}
	return b.String()
}

// pairTimeline polls a gateway's Lease holder, its pods labelled active and the ready endpoints
// of its load balancer Service every 100 ms and keeps the changes.
type pairTimeline struct {
	cancel context.CancelFunc
	done   chan struct{}
	lines  []string
}

func startPairTimeline(gw string) *pairTimeline {
	c, cancel := context.WithCancel(context.Background())
	tl := &pairTimeline{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		last := ""
		for c.Err() == nil {
			if now := pairSnapshot(c, gw); now != last {
				tl.lines = append(tl.lines, time.Now().UTC().Format("15:04:05.000")+" "+now)
				last = now
			}
			select {
			case <-c.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return tl
}

// pairSnapshot is "lease=<holder> labelled=<pods> lb=<pods>".
func pairSnapshot(c context.Context, gw string) string {
	c, cancel := context.WithTimeout(c, 5*time.Second)
	defer cancel()
	holder := "?"
	var l coordinationv1.Lease
	if err := L.c.Get(c, client.ObjectKey{Namespace: labNS, Name: gw + "-gateway-active"}, &l); err == nil {
		holder = ptr.Deref(l.Spec.HolderIdentity, "")
	}
	labelled := "?"
	var pods corev1.PodList
	if err := L.c.List(c, &pods, client.InNamespace(labNS), client.MatchingLabels{gatewayKey: gw, labelRole: roleActive}); err == nil {
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		labelled = strings.Join(names, ",")
	}
	lb := "?"
	var slices discoveryv1.EndpointSliceList
	if err := L.c.List(c, &slices, client.InNamespace(labNS), client.MatchingLabels{discoveryv1.LabelServiceName: gw + "-gateway-lb"}); err == nil {
		var names []string
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if ep.TargetRef == nil {
					continue
				}
				state := ""
				if !ptr.Deref(ep.Conditions.Ready, true) {
					state += "(not ready)"
				}
				if ptr.Deref(ep.Conditions.Terminating, false) {
					state += "(terminating)"
				}
				names = append(names, ep.TargetRef.Name+state)
			}
		}
		lb = strings.Join(names, ",")
	}
	return fmt.Sprintf("lease=%s labelled=%s lb=%s", holder, labelled, lb)
}

func (tl *pairTimeline) stop() {
	tl.cancel()
	<-tl.done
}

func (tl *pairTimeline) String() string { return strings.Join(tl.lines, "\n") }
