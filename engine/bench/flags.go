package bench

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/musterhq/muster/engine"
)

// ParseArgs reads the bench's command line: one collective and nccl-tests'
// flags, short (-b 8) or long (--minbytes 8), before or after the
// collective. Usage goes to usage on -h.
func ParseArgs(args []string, usage io.Writer) (Options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(usage)
	def := DefaultOptions(AllReduce)
	var minB, maxB, stepB, dtype, op string
	var o Options
	both := func(short, long string, set func(name string)) { set(short); set(long) }
	both("b", "minbytes", func(n string) { fs.StringVar(&minB, n, "32M", "smallest size in bytes (K, M, G suffixes)") })
	both("e", "maxbytes", func(n string) { fs.StringVar(&maxB, n, "32M", "largest size in bytes") })
	both("i", "stepbytes", func(n string) { fs.StringVar(&stepB, n, "1M", "size increment when stepfactor is 1") })
	both("f", "stepfactor", func(n string) { fs.Int64Var(&o.StepFactor, n, def.StepFactor, "size multiplier") })
	both("n", "iters", func(n string) { fs.IntVar(&o.Iters, n, def.Iters, "timed iterations per size") })
	both("w", "warmup_iters", func(n string) { fs.IntVar(&o.WarmupIters, n, def.WarmupIters, "warm-up iterations per size") })
	both("c", "check", func(n string) { fs.IntVar(&o.Check, n, def.Check, "rounds of result checking (0 skips it)") })
	both("d", "datatype", func(n string) {
		fs.StringVar(&dtype, n, "float", "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16")
	})
	both("o", "op", func(n string) { fs.StringVar(&op, n, "sum", "sum prod max min avg") })
	both("r", "root", func(n string) { fs.IntVar(&o.Root, n, def.Root, "root rank of broadcast and reduce") })
	fs.Usage = func() {
		fmt.Fprintf(usage, "usage: launcher bench COLLECTIVE [flags]\ncollectives: %s\n", strings.Join(collectiveNames, ", "))
		fs.PrintDefaults()
	}

	var positional []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return o, err // flag.ErrHelp after -h
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return o, fmt.Errorf("bench takes one collective (%s), got %d arguments", strings.Join(collectiveNames, ", "), len(positional))
	}
	var err error
	if o.Collective, err = ParseCollective(positional[0]); err != nil {
		return o, err
	}
	for _, s := range []struct {
		name, val string
		dst       *int64
	}{{"minbytes", minB, &o.MinBytes}, {"maxbytes", maxB, &o.MaxBytes}, {"stepbytes", stepB, &o.StepBytes}} {
		if *s.dst, err = ParseSize(s.val); err != nil {
			return o, fmt.Errorf("--%s: %w", s.name, err)
		}
	}
	if o.DataType, err = engine.ParseDataType(dtype); err != nil {
		return o, fmt.Errorf("--datatype: %w", err)
	}
	if o.Op, err = engine.ParseRedOp(op); err != nil {
		return o, fmt.Errorf("--op: %w", err)
	}
	return o, nil
}
