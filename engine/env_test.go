package engine

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/musterhq/muster/engine/uniqueid"
)

func TestWorkerFromEnv(t *testing.T) {
	id, err := uniqueid.NewWithMagic(7, netip.MustParseAddrPort("10.0.0.1:29500"))
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]string{
		"MUSTER_NCCL_UNIQUE_ID": id.Hex(), "RANK": "3", "WORLD_SIZE": "4",
		"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": "4,5",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    Worker
		wantErr string // substring; empty means success
	}{
		{"one gpu a worker: LOCAL_RANK-th of the job's list", base,
			Worker{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, Device: 1, VisibleDevices: []string{"4", "5"}, UniqueID: id}, ""},
		{"several gpus a worker: first local gpu's position",
			with("CUDA_VISIBLE_DEVICES", "0,1,2,3", "MUSTER_LOCAL_GPUS", "2,3"),
			Worker{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, Device: 2, VisibleDevices: []string{"0", "1", "2", "3"}, UniqueID: id}, ""},
		{"uuids in the list", with("CUDA_VISIBLE_DEVICES", "GPU-a, GPU-b", "MUSTER_LOCAL_GPUS", "GPU-b"),
			Worker{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, Device: 1, VisibleDevices: []string{"GPU-a", "GPU-b"}, UniqueID: id}, ""},
		{"no visible devices list", with("CUDA_VISIBLE_DEVICES", "<unset>"),
			Worker{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, Device: 1, UniqueID: id}, ""},
		{"local world size defaults to world size", with("LOCAL_WORLD_SIZE", "<unset>"),
			Worker{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 4, Device: 1, VisibleDevices: []string{"4", "5"}, UniqueID: id}, ""},
		{"outside muster", with("MUSTER_NCCL_UNIQUE_ID", "<unset>"), Worker{}, "not started by muster: MUSTER_NCCL_UNIQUE_ID is not set; run it under `launcher run`"},
		{"short id", with("MUSTER_NCCL_UNIQUE_ID", "abcd"), Worker{}, "MUSTER_NCCL_UNIQUE_ID: nccl unique id: want 256 hex digits, got 4"},
		{"id not hex", with("MUSTER_NCCL_UNIQUE_ID", strings.Repeat("zz", 128)), Worker{}, "MUSTER_NCCL_UNIQUE_ID: nccl unique id"},
		{"rank missing", with("RANK", "<unset>"), Worker{}, "RANK is not set"},
		{"rank not a number", with("RANK", "three"), Worker{}, `RANK="three": not an integer`},
		{"rank negative", with("RANK", "-1"), Worker{}, "RANK=-1: must be at least 0"},
		{"rank too large", with("RANK", "4"), Worker{}, "RANK=4: must be below WORLD_SIZE=4"},
		{"world size zero", with("WORLD_SIZE", "0"), Worker{}, "WORLD_SIZE=0: must be at least 1"},
		{"local rank missing", with("LOCAL_RANK", "<unset>"), Worker{}, "LOCAL_RANK is not set"},
		{"local rank too large", with("LOCAL_RANK", "2"), Worker{}, "LOCAL_RANK=2: must be below LOCAL_WORLD_SIZE=2"},
		{"list shorter than local ranks", with("CUDA_VISIBLE_DEVICES", "4"), Worker{}, `LOCAL_RANK=1: CUDA_VISIBLE_DEVICES="4" lists only 1 devices`},
		{"local gpu not in the list", with("MUSTER_LOCAL_GPUS", "7"), Worker{}, `MUSTER_LOCAL_GPUS="7": "7" is not in CUDA_VISIBLE_DEVICES="4,5"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := WorkerFromLookup(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Rank != tt.want.Rank || got.WorldSize != tt.want.WorldSize || got.LocalRank != tt.want.LocalRank ||
				got.LocalWorldSize != tt.want.LocalWorldSize || got.Device != tt.want.Device ||
				strings.Join(got.VisibleDevices, ",") != strings.Join(tt.want.VisibleDevices, ",") || got.UniqueID != tt.want.UniqueID {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestFromEnvOutsideMuster(t *testing.T) {
	t.Setenv("MUSTER_NCCL_UNIQUE_ID", "")
	if _, err := FromEnv(); !errors.Is(err, ErrNotUnderMuster) {
		t.Fatalf("FromEnv() = %v, want ErrNotUnderMuster", err)
	}
}
