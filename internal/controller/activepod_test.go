package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vpnv1 "github.com/bnerd/bnerd-vpn-operator/api/vpn/v1alpha1"
	"github.com/bnerd/bnerd-vpn-operator/internal/render/children"
)

// pod is a gateway pod: "name", "name:active", "name:active:1000", with "!" ending the name for
// a terminating pod and "~" for a finished one.
func pod(spec string) corev1.Pod {
	parts := strings.Split(spec, ":")
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.TrimRight(parts[0], "!~"), Labels: map[string]string{}, Annotations: map[string]string{}}}
	if strings.HasSuffix(parts[0], "!") {
		p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	}
	if strings.HasSuffix(parts[0], "~") {
		p.Status.Phase = corev1.PodFailed
	}
	if len(parts) > 1 && parts[1] != "" {
		p.Labels[children.LabelRole] = parts[1]
	}
	if len(parts) > 2 {
		p.Annotations[corev1.PodDeletionCost] = parts[2]
	}
	return p
}

func pods(specs ...string) []corev1.Pod {
	var out []corev1.Pod
	for _, s := range specs {
		out = append(out, pod(s))
	}
	return out
}

func TestRoleChanges(t *testing.T) {
	for _, tc := range []struct {
		name, holder string
		pods         []string
		// want: each pod and its patch, in order
		want string
	}{
		{"first-holder", "a", []string{"a", "b"},
			`[a {"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"1000"},"labels":{"vpn.bnerd.net/role":"active"}}} b {"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-1000"}}}]`},
		{"converged", "a", []string{"a:active:1000", "b::-1000"}, `[]`},
		{"moved-active-first", "b", []string{"a:active:1000", "b::-1000"},
			`[b {"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"1000"},"labels":{"vpn.bnerd.net/role":"active"}}} a {"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-1000"},"labels":{"vpn.bnerd.net/role":null}}}]`},
		{"holder-not-a-pod-of-the-gateway", "other-a", []string{"a:active:1000", "b::-1000"},
			`[a {"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-1000"},"labels":{"vpn.bnerd.net/role":null}}}]`},
		{"foreign-label-value-goes", "a", []string{"a:active:1000", "b:yes:-1000"},
			`[b {"metadata":{"labels":{"vpn.bnerd.net/role":null}}}]`},
		{"terminating-holder-stays-active", "a", []string{"a!::1000", "b::-1000"},
			`[a {"metadata":{"labels":{"vpn.bnerd.net/role":"active"}}}]`},
		{"handed-over-by-a-terminating-pod", "b", []string{"a!:active:1000", "b::-1000"},
			`[b {"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"1000"},"labels":{"vpn.bnerd.net/role":"active"}}} a {"metadata":{"labels":{"vpn.bnerd.net/role":null}}}]`},
		{"finished-holder-is-not-active", "a", []string{"a~:active:1000", "b::-1000"},
			`[a {"metadata":{"labels":{"vpn.bnerd.net/role":null}}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := pods(tc.pods...)
			var got []string
			for _, c := range RoleChanges(ActivePod(tc.holder, ps), ps) {
				got = append(got, c.Pod, string(c.patch()))
			}
			if s := "[" + strings.Join(got, " ") + "]"; s != tc.want {
				t.Errorf("changes\n got %s\nwant %s", s, tc.want)
			}
		})
	}
}

// The last-takeover annotation comes from an internet-facing agent: only a well-formed,
// bounded report reaches the status.
func TestParseTakeover(t *testing.T) {
	good := `{"time":"2026-12-07T18:00:00.123456789Z","from":"gw-a","to":"gw-b","reason":"HandedOver","outageMillis":40}`
	got := ParseTakeover(good)
	want := &vpnv1.Takeover{Time: metav1.NewMicroTime(time.Date(2026, 12, 7, 18, 0, 0, 123456000, time.UTC)), From: "gw-a", To: "gw-b", Reason: "HandedOver", OutageMillis: 40}
	if got == nil || !got.Time.Equal(&want.Time) || got.From != want.From || got.To != want.To || got.Reason != want.Reason || got.OutageMillis != want.OutageMillis {
		t.Errorf("ParseTakeover(good) = %+v, want %+v", got, want)
	}
	if got := ParseTakeover(`{"time":"2026-12-07T18:00:00Z","to":"gw-a","reason":"Initial"}`); got == nil || got.From != "" {
		t.Errorf("the first takeover: %+v", got)
	}
	for _, bad := range []string{
		"", "not json", "[]", `{"time":"2026-12-07T18:00:00Z"}`,
		`{"time":"yesterday","to":"gw-b","reason":"ActiveGone"}`,
		`{"time":"2026-12-07T18:00:00Z","to":"gw-b","reason":"BecauseICan"}`,
		`{"time":"2026-12-07T18:00:00Z","to":"<script>","reason":"ActiveGone"}`,
		`{"time":"2026-12-07T18:00:00Z","from":"../x","to":"gw-b","reason":"ActiveGone"}`,
		`{"time":"2026-12-07T18:00:00Z","to":"gw-b","reason":"ActiveGone","outageMillis":-1}`,
		`{"time":"2026-12-07T18:00:00Z","to":"gw-b","reason":"ActiveGone","outageMillis":99999999999}`,
		`{"time":"0001-01-01T00:00:00Z","to":"gw-b","reason":"ActiveGone"}`,
		fmt.Sprintf(`{"time":"2026-12-07T18:00:00Z","to":"gw-b","reason":"ActiveGone","pad":"%s"}`, strings.Repeat("x", 2000)),
		`{"time":"2026-12-07T18:00:00Z","to":"` + strings.Repeat("a", 254) + `","reason":"ActiveGone"}`,
	} {
		if got := ParseTakeover(bad); got != nil {
			t.Errorf("ParseTakeover(%.80q) = %+v, want nil", bad, got)
		}
	}
}

func TestAvailabilityStatus(t *testing.T) {
	holder := "b"
	lease := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	st := AvailabilityStatus(lease, pods("c", "b:active", "a", "d!", "e~"))
	if st.ActivePod != "b" || fmt.Sprint(st.StandbyPods) != "[a c]" || st.LastTakeover != nil {
		t.Errorf("status %+v", st)
	}
	if st := AvailabilityStatus(nil, pods("a", "b")); st.ActivePod != "" || fmt.Sprint(st.StandbyPods) != "[a b]" {
		t.Errorf("without a Lease: %+v", st)
	}
}
