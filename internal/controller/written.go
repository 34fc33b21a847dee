package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
