package status

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/model"
)

// EventSource is the component the agent's Events name.
const EventSource = "bnerd-vpn-gateway-agent"

// Events records Kubernetes Events on the gateway's VPNGateway (core/v1 Events in its
// namespace: the one API the rendered Role grants without resource names). Recording is
// asynchronous and never blocks the engine; client-go's correlator aggregates repeats.
type Events struct {
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
	e.recorder.Event(&corev1.ObjectReference{
		APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway",
		Namespace: gw.Namespace, Name: gw.Name, UID: gw.UID,
	}, eventType, reason, message)
}

// GatewayEvent records an Event on the VPNGateway by name (when no model is at hand, e.g. a
// configuration that was refused).
func (e *Events) GatewayEvent(namespace, name, eventType, reason, message string) {
	e.recorder.Event(&corev1.ObjectReference{
		APIVersion: vpnv1.GroupVersion.String(), Kind: "VPNGateway", Namespace: namespace, Name: name,
	}, eventType, reason, message)
}

// Stop flushes what it can and stops recording.
func (e *Events) Stop() { e.broadcaster.Shutdown() }
