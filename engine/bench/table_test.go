package bench

import (
	"bytes"
	"strings"
	"testing"
)

func TestFitFloat(t *testing.T) {
	tests := []struct {
		v     float64
		width int
		want  string
	}{
		{8.19, 7, "   8.19"},
		{12362.1234, 7, "12362.1"},
		{1234567.0, 7, "1234567"},
		{12345678.0, 7, "1.2e+07"},
		{347.431, 6, "347.43"},
		{1234.5, 6, "1234.5"},
		{123456.0, 6, "123456"},
		{1234567.0, 6, " 1e+06"},
		{0, 6, "  0.00"},
	}
	for _, tt := range tests {
		if got := fitFloat(tt.v, tt.width); got != tt.want {
			t.Errorf("fitFloat(%v, %d) = %q, want %q", tt.v, tt.width, got, tt.want)
		}
	}
}

// The table's lines must line up column for column with nccl-tests' output.
func TestTableLayout(t *testing.T) {
	var b bytes.Buffer
	writeHeader(&b)
	writeRow(&b, row{bytes: 134217728, count: 33554432, typeName: "float", opName: "sum", root: -1,
		outOfPlace: result{usec: 467.9, algBW: 286.85, busBW: 286.85, checked: true},
		inPlace:    result{usec: 468.75, algBW: 286.33, busBW: 286.33, wrong: 3, checked: true}})
	writeRow(&b, row{bytes: 8, count: 2, typeName: "half", opName: "none", root: 1,
		outOfPlace: result{usec: 12362.1, checked: true}, inPlace: result{usec: 8.2}})
	writeFooter(&b, 3, 74.44257)
	want := strings.Join([]string{
		"#",
		"#                                                              out-of-place                       in-place          ",
		"#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong ",
		"#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         ",
		"   134217728      33554432     float     sum      -1   467.90  286.85  286.85       0   468.75  286.33  286.33       3",
		"           8             2      half    none       1  12362.1    0.00    0.00       0     8.20    0.00    0.00     N/A",
		"# Out of bounds values : 3 FAILED",
		"# Avg bus bandwidth    : 74.4426 ",
		"#",
		"",
	}, "\n")
	if got := b.String(); got != want {
		t.Fatalf("table:\n%s\nwant:\n%s", got, want)
	}
}
