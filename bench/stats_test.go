package bench

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		s    Samples
		p    float64
		want float64
	}{
		{"median odd", Samples{5, 1, 3}, 50, 3},
		{"median even takes lower", Samples{4, 1, 3, 2}, 50, 2},
		{"p99 of 100", func() Samples {
			s := make(Samples, 100)
			for i := range s {
				s[i] = float64(100 - i)
			}
			return s
		}(), 99, 99},
		{"p100 is max", Samples{1, 9, 3}, 100, 9},
		{"tiny p is min", Samples{7, 2, 5}, 0.1, 2},
		{"single", Samples{42}, 99, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.Percentile(tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v; want %v", tt.s, tt.p, got, tt.want)
			}
		})
	}
	if got := (Samples{}).Median(); !math.IsNaN(got) {
		t.Errorf("Median(empty) = %v; want NaN", got)
	}
}
