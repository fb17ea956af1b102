package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{
		{},
		{GPUsTotal: 8, GPUsFree: 3, GRPCAddr: "10.0.0.7:29400", Store: true, Version: "v0.4.1"},
		{GRPCAddr: "10.0.0.7:29400", Store: true, StoreStarting: true},
		{GPUsTotal: maxGPUs, GPUsFree: maxGPUs, GRPCAddr: strings.Repeat("a", maxAddrLen), Version: strings.Repeat("v", maxVersionLen)},
		{GRPCAddr: "[fe80::1%eth0]:29400", Version: "dev-ü"},
		{GPUsTotal: 8, Version: "v1", NodeTimeout: 5 * time.Second},
		{NodeTimeout: MaxNodeTimeout},
	} {
		b, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("%+v: %v", m, err)
		}
		if len(b) > MetaMaxSize {
			t.Fatalf("%+v: %d bytes", m, len(b))
		}
		var got Meta
		if err := got.UnmarshalBinary(b); err != nil || got != m {
			t.Fatalf("round trip of %+v: %+v, %v", m, got, err)
		}
		// A later format may append fields: they are ignored.
		if err := got.UnmarshalBinary(append(b, 9, 9, 9)); err != nil || got != m {
			t.Fatalf("with a trailing field %+v: %+v, %v", m, got, err)
		}
	}
}

// Metadata of the format before the node timeout decodes, without it.
func TestMetaWithoutNodeTimeout(t *testing.T) {
	var m Meta
	if err := m.UnmarshalBinary([]byte{1, flagStore, 8, 8, 0, 2, 'v', '1'}); err != nil {
		t.Fatal(err)
	}
	if want := (Meta{GPUsTotal: 8, GPUsFree: 8, Store: true, Version: "v1"}); m != want {
		t.Fatalf("%+v, want %+v", m, want)
	}
}

func TestMetaCompact(t *testing.T) {
	b, err := Meta{GPUsTotal: 8, GPUsFree: 8, GRPCAddr: "10.0.0.7:29400", Version: "v0.4.1"}.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 32 {
		t.Fatalf("typical metadata takes %d bytes", len(b))
	}
}

func TestMetaBounds(t *testing.T) {
	for name, m := range map[string]Meta{
		"negative total": {GPUsTotal: -1},
		"total too big":  {GPUsTotal: maxGPUs + 1},
		"free > total":   {GPUsTotal: 2, GPUsFree: 3},
		"negative free":  {GPUsTotal: 2, GPUsFree: -1},
		"address long":   {GRPCAddr: strings.Repeat("a", maxAddrLen+1)},
		"version long":   {Version: strings.Repeat("v", maxVersionLen+1)},
		"not UTF-8":      {Version: "\xff"},
		"timeout long":   {NodeTimeout: MaxNodeTimeout + time.Millisecond},
		"timeout ns":     {NodeTimeout: time.Second + 1},
	} {
		if _, err := m.MarshalBinary(); !errors.Is(err, ErrMeta) {
			t.Errorf("%s: %v, want ErrMeta", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":           nil,
		"one byte":        {1},
		"unknown format":  {2, 0, 0, 0, 0, 0},
		"truncated":       {1, 0, 8},
		"free > total":    {1, 0, 2, 3, 0, 0},
		"string cut":      {1, 0, 0, 0, 5, 'a'},
		"overlong varint": {1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"too big":         append([]byte{1, 0, 0, 0, 0, 0}, make([]byte, MetaMaxSize)...),
		"bad UTF-8":       {1, 0, 0, 0, 1, 0xff, 0},
		"timeout long":    {1, 0, 0, 0, 0, 0, 0xc1, 0xcf, 0x24}, // 600001 ms
	} {
		var m Meta
		if err := m.UnmarshalBinary(b); !errors.Is(err, ErrMeta) {
			t.Errorf("%s: %v, want ErrMeta", name, err)
		}
	}
}

func FuzzMeta(f *testing.F) {
	b, _ := Meta{GPUsTotal: 8, GPUsFree: 3, GRPCAddr: "10.0.0.7:29400", Store: true, Version: "v1"}.MarshalBinary()
	f.Add(b)
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Meta
		if err := m.UnmarshalBinary(b); err != nil {
			return
		}
		// What decodes re-encodes, within bounds, to the same value.
		out, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		var again Meta
		if err := again.UnmarshalBinary(out); err != nil || again != m {
			t.Fatalf("%+v re-decodes as %+v, %v", m, again, err)
		}
	})
}
