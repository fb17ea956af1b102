package engine

import (
	"fmt"
	"strings"
)

// DataType is ncclDataType_t; the values are NCCL's ABI and never change.
type DataType int32

// NCCL's element types.
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9
)

// dataTypeNames are the names nccl-tests prints and accepts, so tables and
// flags read the same in both tools.
var dataTypeNames = map[DataType]string{
	Int8: "int8", Uint8: "uint8", Int32: "int32", Uint32: "uint32",
	Int64: "int64", Uint64: "uint64", Float16: "half", Float32: "float",
	Float64: "double", Bfloat16: "bfloat16",
}

// dataTypeAliases are other spellings accepted on the command line.
var dataTypeAliases = map[string]DataType{
	"char": Int8, "int": Int32, "float16": Float16, "fp16": Float16,
	"float32": Float32, "fp32": Float32, "float64": Float64, "fp64": Float64,
	"bf16": Bfloat16,
}

func (t DataType) String() string {
	if s, ok := dataTypeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("datatype(%d)", int32(t))
}

// Size is the width of one element in bytes.
func (t DataType) Size() int {
	switch t {
	case Int8, Uint8:
		return 1
	case Float16, Bfloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// IsFloat reports whether t holds floating-point values.
func (t DataType) IsFloat() bool {
	return t == Float16 || t == Float32 || t == Float64 || t == Bfloat16
}

// ParseDataType reads a type name as nccl-tests spells it ("float", "half",
// "bfloat16", ...) or a common alias ("fp32", "bf16").
func ParseDataType(s string) (DataType, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for t, name := range dataTypeNames {
		if name == s {
			return t, nil
		}
	}
	if t, ok := dataTypeAliases[s]; ok {
		return t, nil
	}
	return 0, fmt.Errorf("unknown datatype %q (want one of int8 uint8 int32 uint32 int64 uint64 half float double bfloat16)", s)
}

// RedOp is ncclRedOp_t for the built-in reductions.
type RedOp int32

// NCCL's built-in reductions.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

var redOpNames = map[RedOp]string{Sum: "sum", Prod: "prod", Max: "max", Min: "min", Avg: "avg"}

func (op RedOp) String() string {
	if s, ok := redOpNames[op]; ok {
		return s
	}
	return fmt.Sprintf("redop(%d)", int32(op))
}

// ParseRedOp reads sum, prod, max, min or avg.
func ParseRedOp(s string) (RedOp, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for op, name := range redOpNames {
		if name == s {
			return op, nil
		}
	}
	return 0, fmt.Errorf("unknown reduction %q (want one of sum prod max min avg)", s)
}

// ncclResult_t codes NCCL returns.
const (
	ncclSuccess    = 0
	ncclInProgress = 7
)

// cudaMemcpyKind values of the CUDA runtime.
const (
	memcpyHostToDevice = 1
	memcpyDeviceToHost = 2
)
