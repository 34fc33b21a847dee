package operator

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// GatewayResources are the requests and limits of each gateway container from the operator's
// flags (quantities; empty leaves that one unset), naming the flag of a bad quantity.
func GatewayResources(cpuRequest, memoryRequest, cpuLimit, memoryLimit string) (*corev1.ResourceRequirements, error) {
	out := &corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for _, q := range []struct {
		flag, value string
		list        corev1.ResourceList
		name        corev1.ResourceName
	}{
		{"--gateway-cpu-request", cpuRequest, out.Requests, corev1.ResourceCPU},
		{"--gateway-memory-request", memoryRequest, out.Requests, corev1.ResourceMemory},
		{"--gateway-cpu-limit", cpuLimit, out.Limits, corev1.ResourceCPU},
		{"--gateway-memory-limit", memoryLimit, out.Limits, corev1.ResourceMemory},
	} {
		if q.value == "" {
			continue
		}
		v, err := resource.ParseQuantity(q.value)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", q.flag, q.value, err)
		}
		if v.Sign() <= 0 {
			return nil, fmt.Errorf("%s %q: must be positive", q.flag, q.value)
		}
		q.list[q.name] = v
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, hasReq := out.Requests[name]
		lim, hasLim := out.Limits[name]
		if hasReq && hasLim && req.Cmp(lim) > 0 {
			return nil, fmt.Errorf("--gateway-%s-request %s is above --gateway-%s-limit %s", name, req.String(), name, lim.String())
		}
	}
	return out, nil
}

// GatewayTolerations reads --gateway-tolerations: a JSON list of Kubernetes tolerations
// (strictly: an unknown field is an error), each checked as the API server would.
func GatewayTolerations(text string) ([]corev1.Toleration, error) {
	if text == "" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(text)))
	dec.DisallowUnknownFields()
	var out []corev1.Toleration
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("--gateway-tolerations: not a JSON list of tolerations: %w", err)
	}
	for i, t := range out {
		where := fmt.Sprintf("--gateway-tolerations[%d]", i)
		switch t.Operator {
		case "", corev1.TolerationOpEqual:
		case corev1.TolerationOpExists:
			if t.Value != "" {
				return nil, fmt.Errorf("%s: operator Exists takes no value", where)
			}
		default:
			return nil, fmt.Errorf("%s: operator %q: Equal or Exists", where, t.Operator)
		}
		if t.Key == "" && t.Operator != corev1.TolerationOpExists {
			return nil, fmt.Errorf("%s: an empty key needs operator Exists", where)
		}
		switch t.Effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, fmt.Errorf("%s: effect %q: NoSchedule, PreferNoSchedule or NoExecute", where, t.Effect)
		}
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			return nil, fmt.Errorf("%s: tolerationSeconds needs effect NoExecute", where)
		}
	}
	return out, nil
}
