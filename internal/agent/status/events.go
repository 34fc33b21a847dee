package status

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	ipsecv1 "github.com/bnerd/bnerd-vpn-operator/api/ipsec/v1alpha1"
	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// EventSource is the component the agent's Events name.
const EventSource = "bnerd-vpn-gateway-agent"

// Events records Kubernetes Events on the gateway's VPNGateway (core/v1 Events in its
// namespace: the one API the rendered Role grants without resource names). Recording is
// asynchronous and never blocks the engine; client-go's correlator aggregates repeats.
type Events struct {
	// Kind of the gateway's custom resource the Events name when no model is at hand (empty:
	// VPNGateway; model.KindIPsecGateway for a legacy gateway).
	Kind        string
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster
}

// NewEvents starts recording to the API server through c. Stop ends it.
func NewEvents(c kubernetes.Interface) *Events {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.CoreV1().Events("")})
	return &Events{broadcaster: b, recorder: b.NewRecorder(runtime.NewScheme(), corev1.EventSource{Component: EventSource})}
}

// Event implements agent.EventRecorder.
func (e *Events) Event(gw *model.Gateway, eventType, reason, message string) {
	ref := objectRef(gw.Kind, gw.Namespace, gw.Name)
	ref.UID = gw.UID
	e.recorder.Event(ref, eventType, reason, message)
}

// GatewayEvent records an Event on the VPNGateway by name (when no model is at hand, e.g. a
// configuration that was refused).
func (e *Events) GatewayEvent(namespace, name, eventType, reason, message string) {
	e.recorder.Event(objectRef(e.Kind, namespace, name), eventType, reason, message)
}

// objectRef names the gateway's custom resource of the given model kind.
func objectRef(kind, namespace, name string) *corev1.ObjectReference {
	if kind == model.KindIPsecGateway {
		return &corev1.ObjectReference{APIVersion: ipsecv1.GroupVersion.String(), Kind: model.KindIPsecGateway, Namespace: namespace, Name: name}
	}
	return &corev1.ObjectReference{APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway", Namespace: namespace, Name: name}
}

// Stop flushes what it can and stops recording.
func (e *Events) Stop() { e.broadcaster.Shutdown() }
