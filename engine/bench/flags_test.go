package bench

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/musterhq/muster/engine"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"8", 8, false}, {"64K", 64 << 10, false}, {"64k", 64 << 10, false}, {"1M", 1 << 20, false},
		{"1.5M", 3 << 19, false}, {"4G", 4 << 30, false}, {"0", 0, false},
		{"", 0, true}, {"-1", 0, true}, {"4T", 0, true}, {"M", 0, true}, {"1e30G", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseArgs(t *testing.T) {
	def := DefaultOptions(AllReduce)
	tests := []struct {
		name    string
		args    string
		want    func(o *Options)
		wantErr string
	}{
		{"defaults", "allreduce", func(o *Options) {}, ""},
		{"short flags after the collective", "allreduce -b 8 -e 4G -f 2 -n 5 -w 3 -c 0 -d half -o max -r 1",
			func(o *Options) {
				o.MinBytes, o.MaxBytes, o.StepFactor, o.Iters, o.WarmupIters, o.Check = 8, 4<<30, 2, 5, 3, 0
				o.DataType, o.Op, o.Root = engine.Float16, engine.Max, 1
			}, ""},
		{"long flags before the collective", "--minbytes 1K --maxbytes 1M --stepbytes 64K --datatype bfloat16 --op avg broadcast --root 1",
			func(o *Options) {
				o.Collective, o.MinBytes, o.MaxBytes, o.StepBytes = Broadcast, 1<<10, 1<<20, 64<<10
				o.DataType, o.Op, o.Root = engine.Bfloat16, engine.Avg, 1
			}, ""},
		{"nccl-tests binary name", "all_gather_perf -d int8", func(o *Options) { o.Collective, o.DataType = AllGather, engine.Int8 }, ""},
		{"no collective", "-b 8", nil, "bench takes one collective"},
		{"two collectives", "allreduce reduce", nil, "got 2 arguments"},
		{"unknown collective", "allsum", nil, `unknown collective "allsum"`},
		{"bad size", "allreduce -e 4X", nil, `--maxbytes: invalid size "4X"`},
		{"bad type", "allreduce -d quad", nil, `--datatype: unknown datatype "quad"`},
		{"bad op", "allreduce -o xor", nil, `--op: unknown reduction "xor"`},
		{"unknown flag", "allreduce -z 1", nil, "flag provided but not defined: -z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(strings.Fields(tt.args), io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := def
			tt.want(&want)
			if got != want {
				t.Fatalf("got  %+v\nwant %+v", got, want)
			}
		})
	}
	if _, err := ParseArgs([]string{"-h"}, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: err = %v, want flag.ErrHelp", err)
	}
}

func TestSizesAndValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(o *Options)
		sizes   []int64
		wantErr string
	}{
		{"factor", func(o *Options) { o.MinBytes, o.MaxBytes, o.StepFactor = 8, 64, 2 }, []int64{8, 16, 32, 64}, ""},
		{"factor not landing on max", func(o *Options) { o.MinBytes, o.MaxBytes, o.StepFactor = 1, 100, 10 }, []int64{1, 10, 100}, ""},
		{"increment", func(o *Options) { o.MinBytes, o.MaxBytes, o.StepBytes = 1, 10, 4 }, []int64{1, 5, 9}, ""},
		{"one size", func(o *Options) {}, []int64{32 << 20}, ""},
		{"zero with factor ends", func(o *Options) { o.MinBytes, o.MaxBytes, o.StepFactor = 0, 8, 2 }, []int64{0}, ""},
		{"min above max", func(o *Options) { o.MinBytes, o.MaxBytes = 9, 8 }, nil, "minbytes 9 is larger than maxbytes 8"},
		{"no step", func(o *Options) { o.StepBytes = 0 }, nil, "stepbytes must be positive"},
		{"no iters", func(o *Options) { o.Iters = 0 }, nil, "iters must be at least 1"},
		{"root outside world", func(o *Options) { o.Collective, o.Root = Reduce, 2 }, nil, "root 2 is not a rank of a world of 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions(AllReduce)
			tt.edit(&o)
			err := o.Validate(2)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := o.Sizes()
			if len(got) != len(tt.sizes) {
				t.Fatalf("Sizes = %v, want %v", got, tt.sizes)
			}
			for i := range got {
				if got[i] != tt.sizes[i] {
					t.Fatalf("Sizes = %v, want %v", got, tt.sizes)
				}
			}
		})
	}
}
