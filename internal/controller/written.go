package controller

import (
	"maps"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// written remembers, per object, the object as this operator's last pass left it (its
// finalizer and its status as applied) and the resourceVersions that pass saw before its
// writes. A watch event for a write arrives a little after the write: a pass that starts in
// between reads a cached object one of those older resourceVersions and, without this, would
// apply the same status a second time (a no-op apply is still a request the API server
// serves) and emit the transition's events again. With it, such a pass starts from what was
// written. The first cached object with any other resourceVersion (the write's own, or
// anybody's later one) is the truth again and the entry is dropped.
//
// Nothing here skips a write whose content differs: recall only substitutes the state the
// operator itself produced for a cache that is known not to show it yet.
type written[T client.Object] struct {
	m sync.Map // types.NamespacedName -> *writtenEntry[T]
}

type writtenEntry[T client.Object] struct {
	stale []string // resourceVersions older than the write
	obj   T
}

// recall returns the object as last written when cached is older than that write (and the
// resourceVersions older than the write, for the next record), or cached itself.
func (w *written[T]) recall(cached T) (T, []string) {
	key := client.ObjectKeyFromObject(cached)
	v, found := w.m.Load(key)
	if !found {
		return cached, []string{cached.GetResourceVersion()}
	}
	e := v.(*writtenEntry[T])
	if !slices.Contains(e.stale, cached.GetResourceVersion()) || e.obj.GetUID() != cached.GetUID() {
		w.m.CompareAndDelete(key, v)
		return cached, []string{cached.GetResourceVersion()}
	}
	return e.obj.DeepCopyObject().(T), slices.Clone(e.stale)
}

// record remembers obj as written; stale are the resourceVersions older than the write.
func (w *written[T]) record(stale []string, obj T) {
	w.m.Store(client.ObjectKeyFromObject(obj), &writtenEntry[T]{stale: stale, obj: obj.DeepCopyObject().(T)})
}

// forget drops what is remembered of a deleted object.
func (w *written[T]) forget(key types.NamespacedName) { w.m.Delete(key) }

// notStatusOnly passes every event except an update that changed nothing but the object's
// status (and the resourceVersion and managed fields that come with any write): for the
// operator's own kinds, that is the operator's status write coming back (or the agent's
// Connected condition), which changes nothing a pass reads as input. Without it each status
// write cost one more full pass over the object.
var notStatusOnly = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld, e.ObjectNew
		if o == nil || n == nil {
			return true
		}
		return o.GetGeneration() != n.GetGeneration() ||
			!maps.Equal(o.GetLabels(), n.GetLabels()) ||
			!maps.Equal(o.GetAnnotations(), n.GetAnnotations()) ||
			!slices.Equal(withoutOwnFinalizer(o.GetFinalizers()), withoutOwnFinalizer(n.GetFinalizers())) ||
			(slices.Contains(o.GetFinalizers(), FinalizerAddresses) && !slices.Contains(n.GetFinalizers(), FinalizerAddresses)) ||
			!o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) ||
			!equality.Semantic.DeepEqual(o.GetOwnerReferences(), n.GetOwnerReferences())
	},
}

func withoutOwnFinalizer(fs []string) []string {
	return slices.DeleteFunc(slices.Clone(fs), func(f string) bool { return f == FinalizerAddresses })
}
