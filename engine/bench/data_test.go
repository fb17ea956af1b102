package bench

import (
	"math"
	"testing"

	"github.com/musterhq/muster/engine"
)

var allTypes = []engine.DataType{engine.Int8, engine.Uint8, engine.Int32, engine.Uint32, engine.Int64,
	engine.Uint64, engine.Float16, engine.Float32, engine.Float64, engine.Bfloat16}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, dt := range allTypes {
		for _, v := range []float64{0, 1, 7, 18.5, 100, 127} {
			if !dt.IsFloat() {
				v = math.Trunc(v)
			}
			b := make([]byte, 8)
			encode(b, dt, v)
			if got := decode(b, dt); got != v {
				t.Errorf("%v: decode(encode(%v)) = %v", dt, v, got)
			}
		}
	}
}

func TestHalfAndBfloat16Rounding(t *testing.T) {
	tests := []struct {
		v        float32
		half, bf uint16
	}{
		{1, 0x3c00, 0x3f80},
		{-2, 0xc000, 0xc000},
		{65504, 0x7bff, 0x4780},
		{1e6, 0x7c00, 0x4974},                   // beyond half's range: infinity
		{1.0 + 1.0/4096, 0x3c00, 0x3f80},        // rounds to even
		{5.960464477539063e-08, 0x0001, 0x3380}, // smallest half subnormal
	}
	for _, tt := range tests {
		if got := float16Bits(tt.v); got != tt.half {
			t.Errorf("float16Bits(%v) = %#04x, want %#04x", tt.v, got, tt.half)
		}
		if got := bfloat16Bits(tt.v); got != tt.bf {
			t.Errorf("bfloat16Bits(%v) = %#04x, want %#04x", tt.v, got, tt.bf)
		}
	}
	if got := float16Value(0x3555); math.Abs(float64(got)-0.333251953125) > 0 {
		t.Errorf("float16Value(0x3555) = %v", got)
	}
}

// fill's doubling copy must produce exactly what computing every element does.
func TestFillMatchesDirect(t *testing.T) {
	for _, dt := range allTypes {
		for _, n := range []int64{0, 1, period - 1, period, period + 1, 1000} {
			f := func(j int64) float64 { return value(dt, engine.Sum, 3, j+11) }
			got := make([]byte, n*int64(dt.Size()))
			fill(got, dt, n, f)
			want := make([]byte, len(got))
			for j := int64(0); j < n; j++ {
				encode(want[j*int64(dt.Size()):], dt, f(j))
			}
			if wrong := compare(got, want, dt); wrong != 0 || string(got) != string(want) {
				t.Errorf("%v n=%d: %d elements differ", dt, n, wrong)
			}
		}
	}
}

// The check must catch corrupted elements, including results from the wrong
// rank, and count each one once.
func TestCompareCountsMismatches(t *testing.T) {
	for _, dt := range allTypes {
		const n = 5000
		size := int64(dt.Size())
		want := make([]byte, n*size)
		fill(want, dt, n, func(j int64) float64 { return reduced(dt, engine.Sum, 4, j) })
		got := append([]byte(nil), want...)
		// Element 10 from one rank only, element 4000 from another rank's data.
		encode(got[10*size:], dt, value(dt, engine.Sum, 0, 10))
		encode(got[4000*size:], dt, reduced(dt, engine.Sum, 4, 4001))
		if wrong := compare(got, want, dt); wrong != 2 {
			t.Errorf("%v: compare found %d wrong, want 2", dt, wrong)
		}
	}
}

func TestReducedTable(t *testing.T) {
	tests := []struct {
		dt   engine.DataType
		op   engine.RedOp
		want func(vals []float64) float64
	}{
		{engine.Float32, engine.Sum, func(v []float64) float64 { return v[0] + v[1] + v[2] }},
		{engine.Float32, engine.Prod, func(v []float64) float64 { return v[0] * v[1] * v[2] }},
		{engine.Float32, engine.Max, func(v []float64) float64 { return math.Max(v[0], math.Max(v[1], v[2])) }},
		{engine.Float32, engine.Min, func(v []float64) float64 { return math.Min(v[0], math.Min(v[1], v[2])) }},
		{engine.Float32, engine.Avg, func(v []float64) float64 { return (v[0] + v[1] + v[2]) / 3 }},
		{engine.Int32, engine.Avg, func(v []float64) float64 { return math.Trunc((v[0] + v[1] + v[2]) / 3) }},
	}
	for _, tt := range tests {
		for i := int64(0); i < 2*period; i++ {
			vals := []float64{value(tt.dt, tt.op, 0, i), value(tt.dt, tt.op, 1, i), value(tt.dt, tt.op, 2, i)}
			if got, want := reduced(tt.dt, tt.op, 3, i), tt.want(vals); got != want {
				t.Fatalf("%v %v i=%d: reduced = %v, want %v", tt.dt, tt.op, i, got, want)
			}
		}
	}
	// Inputs must differ by rank, or a missing rank would go unnoticed.
	same := 0
	for i := int64(0); i < period; i++ {
		if value(engine.Float32, engine.Sum, 0, i) == value(engine.Float32, engine.Sum, 1, i) {
			same++
		}
	}
	if same > 1 {
		t.Errorf("ranks 0 and 1 share %d of %d input values", same, period)
	}
}
