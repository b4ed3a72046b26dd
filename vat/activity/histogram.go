package activity

// Histogram counts observations into cumulative buckets, as Prometheus
// histograms do.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending; +Inf is implied.
	Bounds []float64
	// Counts[i] counts observations <= Bounds[i] (cumulative).
	Counts []uint64
	Count  uint64
	Sum    float64
}

// NewHistogram returns an empty histogram with bounds.
func NewHistogram(bounds []float64) *Histogram {
	return &Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds))}
}

// Observe counts v.
func (h *Histogram) Observe(v float64) {
	for i, b := range h.Bounds {
		if v <= b {
			h.Counts[i]++
		}
	}
	h.Count++
	h.Sum += v
}

func (h *Histogram) clone() Histogram {
	c := *h
	c.Counts = append([]uint64(nil), h.Counts...)
	return c
}
