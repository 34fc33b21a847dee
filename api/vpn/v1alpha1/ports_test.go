package v1alpha1

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestParsePort(t *testing.T) {
	tests := []struct {
		in      intstr.IntOrString
		want    PortSpec
		wantErr bool
		back    intstr.IntOrString // Value() of the parsed port
	}{
		{in: intstr.FromInt32(443), want: PortSpec{443, PortProtocolTCP, 443}, back: intstr.FromInt32(443)},
		{in: intstr.FromString("514/udp"), want: PortSpec{514, PortProtocolUDP, 514}, back: intstr.FromString("514/udp")},
		{in: intstr.FromString("8443:443"), want: PortSpec{8443, PortProtocolTCP, 443}, back: intstr.FromString("8443:443")},
		{in: intstr.FromString("8443:443/tcp"), want: PortSpec{8443, PortProtocolTCP, 443}, back: intstr.FromString("8443:443")},
		{in: intstr.FromString("53:5353/UDP"), want: PortSpec{53, PortProtocolUDP, 5353}, back: intstr.FromString("53:5353/udp")},
		{in: intstr.FromString("443"), want: PortSpec{443, PortProtocolTCP, 443}, back: intstr.FromInt32(443)},
		{in: intstr.FromInt32(0), wantErr: true},
		{in: intstr.FromInt32(65536), wantErr: true},
		{in: intstr.FromString("0/udp"), wantErr: true},
		{in: intstr.FromString("443:70000"), wantErr: true},
		{in: intstr.FromString("443/sctp"), wantErr: true},
		{in: intstr.FromString("443 "), wantErr: true},
		{in: intstr.FromString("8000-8080"), wantErr: true},
		{in: intstr.FromString(""), wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParsePort(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("%v: err %v, want error %v", tt.in.String(), err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if got != tt.want {
			t.Errorf("%v: got %+v, want %+v", tt.in.String(), got, tt.want)
		}
		if v := got.Value(); v != tt.back {
			t.Errorf("%v: Value() = %v, want %v", tt.in.String(), v.String(), tt.back.String())
		}
	}
}
