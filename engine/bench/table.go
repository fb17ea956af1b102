package bench

import (
	"fmt"
	"io"
	"strconv"
)

// The table has nccl-tests' columns and widths, so that tools which parse
// nccl-tests output read muster's too.

// writeHeader prints the column heads.
func writeHeader(w io.Writer) {
	fmt.Fprintf(w, "#\n")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "", "", "")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")
}

// result is one measurement: one size, out-of-place or in-place.
type result struct {
	usec         float64
	algBW, busBW float64
	wrong        int64
	checked      bool // false prints N/A in #wrong
}

// row is one line of the table.
type row struct {
	bytes, count int64
	typeName     string
	opName       string // "none" for collectives without a reduction
	root         int    // -1 for collectives without a root
	outOfPlace   result
	inPlace      result
}

func writeRow(w io.Writer, r row) {
	fmt.Fprintf(w, "%12d  %12d  %8s  %6s  %6d", r.bytes, r.count, r.typeName, r.opName, r.root)
	for _, res := range []result{r.outOfPlace, r.inPlace} {
		wrong := "   N/A"
		if res.checked {
			wrong = fmt.Sprintf("%6s", strconv.FormatInt(res.wrong, 10))
		}
		fmt.Fprintf(w, "  %7s  %6s  %6s  %s", fitFloat(res.usec, 7), fitFloat(res.algBW, 6), fitFloat(res.busBW, 6), wrong)
	}
	fmt.Fprintln(w)
}

// writeFooter prints the closing summary; avgBusBW averages every busbw
// printed, out-of-place and in-place.
func writeFooter(w io.Writer, wrong int64, avgBusBW float64) {
	status := "OK"
	if wrong != 0 {
		status = "FAILED"
	}
	fmt.Fprintf(w, "# %-20s : %d %s\n", "Out of bounds values", wrong, status)
	fmt.Fprintf(w, "# %-20s : %s \n", "Avg bus bandwidth", strconv.FormatFloat(avgBusBW, 'g', 6, 64))
	fmt.Fprintf(w, "#\n")
}

// fitFloat prints v in width columns, dropping decimals before switching to
// exponent form, so a column never widens.
func fitFloat(v float64, width int) string {
	for _, prec := range []int{2, 1, 0} {
		if s := fmt.Sprintf("%*.*f", width, prec, v); len(s) <= width {
			return s
		}
	}
	if width >= 7 {
		return fmt.Sprintf("%*.1e", width, v)
	}
	return fmt.Sprintf("%*.0e", width, v)
}
