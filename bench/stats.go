package bench

import (
	"math"
	"slices"
	"time"
)

// Samples is a set of measurements of one quantity.
type Samples []float64

// Median returns the median, or NaN for no samples.
func (s Samples) Median() float64 { return s.Percentile(50) }

// Percentile returns the p-th percentile (0 < p <= 100) by nearest rank,
// or NaN for no samples.
func (s Samples) Percentile(p float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := slices.Clone(s)
	slices.Sort(c)
	rank := int(math.Ceil(p / 100 * float64(len(c))))
	rank = max(1, min(rank, len(c)))
	return c[rank-1]
}

// Durations converts durations to Samples in unit u (e.g. time.Microsecond).
func Durations(ds []time.Duration, u time.Duration) Samples {
	out := make(Samples, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(u)
	}
	return out
}

// MBps is a throughput in MB/s (10^6 bytes per second).
func MBps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return math.NaN()
	}
	return float64(bytes) / d.Seconds() / 1e6
}
