package bench

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/musterhq/muster/engine"
)

// Test data depends on the rank and the element index, so a result from the
// wrong rank or the wrong offset shows up as a mismatch. The values are
// small integers, or halves for floating types, so that sums, maxima and
// minima are exact in every type and products stay small.

// period is how often the pattern repeats; a prime, so it never lines up
// with the power-of-two block sizes.
const period = 23

// value is rank's input element at global index i, for op.
func value(t engine.DataType, op engine.RedOp, rank int, i int64) float64 {
	k := (i + 5*int64(rank)) % period
	if op == engine.Prod {
		return float64(1 + k%3)
	}
	v := float64((k*7 + 3*int64(rank)) % 19)
	if t.IsFloat() && rank%2 == 1 {
		v += 0.5
	}
	return v
}

// reduced is op applied to every rank's element i.
func reduced(t engine.DataType, op engine.RedOp, nranks int, i int64) float64 {
	acc := value(t, op, 0, i)
	for r := 1; r < nranks; r++ {
		v := value(t, op, r, i)
		switch op {
		case engine.Sum, engine.Avg:
			acc += v
		case engine.Prod:
			acc *= v
		case engine.Max:
			acc = math.Max(acc, v)
		case engine.Min:
			acc = math.Min(acc, v)
		}
	}
	if op == engine.Avg {
		acc /= float64(nranks)
		if !t.IsFloat() {
			acc = math.Trunc(acc)
		}
	}
	return acc
}

// fill writes f(0..n-1) into dst as type t. f must repeat every period
// elements; the first period is computed and then doubled by copying, which
// keeps filling gigabytes cheap.
func fill(dst []byte, t engine.DataType, n int64, f func(j int64) float64) {
	size := int64(t.Size())
	first := min(n, period)
	for j := int64(0); j < first; j++ {
		encode(dst[j*size:], t, f(j))
	}
	total := n * size
	for done := first * size; done < total; {
		done += int64(copy(dst[done:total], dst[:done]))
	}
}

// compare counts elements of got that differ from want beyond the type's
// tolerance. Equal stretches are skipped with a byte compare first.
func compare(got, want []byte, t engine.DataType) int64 {
	const chunk = 1 << 16
	size := t.Size()
	var wrong int64
	for off := 0; off < len(want); off += chunk {
		end := min(off+chunk, len(want))
		if bytes.Equal(got[off:end], want[off:end]) {
			continue
		}
		for i := off; i+size <= end; i += size {
			if !near(decode(got[i:], t), decode(want[i:], t), t) {
				wrong++
			}
		}
	}
	return wrong
}

// near allows rounding in the last places of floating types (averages are
// divided after summing) and exact integers.
func near(got, want float64, t engine.DataType) bool {
	var tol float64
	switch t {
	case engine.Float16:
		tol = 1e-3
	case engine.Bfloat16:
		tol = 8e-3
	case engine.Float32:
		tol = 1e-6
	case engine.Float64:
		tol = 1e-12
	default:
		return got == want
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// encode stores v as one element of type t; integers wrap as they do in C,
// so an expected product that overflows matches the GPU's.
func encode(b []byte, t engine.DataType, v float64) {
	le := binary.LittleEndian
	switch t {
	case engine.Int8, engine.Uint8:
		b[0] = byte(int64(v))
	case engine.Int32, engine.Uint32:
		le.PutUint32(b, uint32(int64(v)))
	case engine.Int64, engine.Uint64:
		le.PutUint64(b, uint64(int64(v)))
	case engine.Float16:
		le.PutUint16(b, float16Bits(float32(v)))
	case engine.Bfloat16:
		le.PutUint16(b, bfloat16Bits(float32(v)))
	case engine.Float32:
		le.PutUint32(b, math.Float32bits(float32(v)))
	case engine.Float64:
		le.PutUint64(b, math.Float64bits(v))
	}
}

// decode reads one element of type t.
func decode(b []byte, t engine.DataType) float64 {
	le := binary.LittleEndian
	switch t {
	case engine.Int8:
		return float64(int8(b[0]))
	case engine.Uint8:
		return float64(b[0])
	case engine.Int32:
		return float64(int32(le.Uint32(b)))
	case engine.Uint32:
		return float64(le.Uint32(b))
	case engine.Int64:
		return float64(int64(le.Uint64(b)))
	case engine.Uint64:
		return float64(le.Uint64(b))
	case engine.Float16:
		return float64(float16Value(le.Uint16(b)))
	case engine.Bfloat16:
		return float64(math.Float32frombits(uint32(le.Uint16(b)) << 16))
	case engine.Float32:
		return float64(math.Float32frombits(le.Uint32(b)))
	case engine.Float64:
		return math.Float64frombits(le.Uint64(b))
	}
	return math.NaN()
}

// bfloat16Bits rounds a float32 to bfloat16, to nearest even.
func bfloat16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f { // NaN stays NaN
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// float16Bits rounds a float32 to IEEE half precision, to nearest even.
func float16Bits(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23&0xff) - 127 + 15
	mant := u & 0x7fffff
	switch {
	case u&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 31: // too large: infinity
		return sign | 0x7c00
	case exp <= 0: // subnormal half or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		half := mant >> shift
		rem := mant & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || rem == mid && half&1 == 1 {
			half++
		}
		return sign | uint16(half)
	}
	half := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || rem == 0x1000 && half&1 == 1 {
		half++ // may carry into the exponent, which is still right
	}
	return sign | uint16(half)
}

// float16Value widens half-precision bits to float32.
func float16Value(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h >> 10 & 0x1f)
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}
