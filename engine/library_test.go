package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"go.uber.org/zap/zaptest"

	"github.com/musterhq/muster/engine/uniqueid"
)

func TestLibraryOverrideMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	t.Setenv(EnvNCCLLibrary, missing)
	_, err := LibraryNCCLVersion()
	if err == nil || !strings.Contains(err.Error(), EnvNCCLLibrary) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("LibraryNCCLVersion() = %v, want an error naming %s and %s", err, EnvNCCLLibrary, missing)
	}
	if _, err := Load(context.Background(), zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Load() = %v, want an error naming %s", err, missing)
	}
}

func TestLibraryOverrideNotALibrary(t *testing.T) {
	bogus := filepath.Join(t.TempDir(), "libcudart.so")
	if err := os.WriteFile(bogus, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvCUDARTLibrary, bogus)
	_, _, err := openLibrary(context.Background(), "the CUDA runtime", EnvCUDARTLibrary, cudartNames)
	if err == nil || !strings.Contains(err.Error(), EnvCUDARTLibrary+"="+bogus) {
		t.Fatalf("openLibrary = %v, want an error naming the override", err)
	}
}

func TestLibraryNotFoundListsPlaces(t *testing.T) {
	t.Setenv(EnvNCCLLibrary, "")
	_, _, err := openLibrary(context.Background(), "NCCL", EnvNCCLLibrary, []string{"libmuster-no-such-library.so.9"})
	var nf *LibraryNotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("err = %v, want a LibraryNotFoundError", err)
	}
	for _, want := range []string{"libmuster-no-such-library.so.9 (dynamic loader path)", "/usr/local/cuda/lib64", EnvNCCLLibrary} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
}

// A python wheel's lib folder in a venv on PATH is searched.
func TestLibrarySearchFindsPythonWheels(t *testing.T) {
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin")
	ncclLib := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "nccl", "lib")
	cudaLib := filepath.Join(venv, "lib", "python3.12", "site-packages", "nvidia", "cu13", "lib")
	for _, d := range []string{bin, ncclLib, cudaLib} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(bin, "python3"), filepath.Join(ncclLib, "libnccl.so.2"), filepath.Join(cudaLib, "libcudart.so.13")} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	t.Setenv("VIRTUAL_ENV", "")
	t.Setenv("CONDA_PREFIX", "")
	tests := []struct {
		names []string
		want  string
	}{
		{[]string{"libnccl.so.2"}, filepath.Join(ncclLib, "libnccl.so.2")},
		{cudartNames, filepath.Join(cudaLib, "libcudart.so.13")},
	}
	for _, tt := range tests {
		files := candidateFiles(LibrarySearchPaths(tt.names), tt.names)
		found := false
		for _, f := range files {
			found = found || f == tt.want
		}
		if !found {
			t.Errorf("search for %v found %v, want it to include %s", tt.names, files, tt.want)
		}
	}
}

func TestVersionString(t *testing.T) {
	tests := []struct {
		code int
		want string
	}{{22809, "2.28.9"}, {21903, "2.19.3"}, {2804, "2.8.4"}, {23000, "2.30.0"}}
	for _, tt := range tests {
		if got := VersionString(tt.code); got != tt.want {
			t.Errorf("VersionString(%d) = %q, want %q", tt.code, got, tt.want)
		}
	}
}

// ncclCommInitRank takes ncclUniqueId by value: the argument type must have
// its exact size and no padding, or purego would pass the wrong bytes.
func TestUniqueIDArgLayout(t *testing.T) {
	if got := unsafe.Sizeof(ncclUniqueIDArg{}); got != uniqueid.Bytes {
		t.Fatalf("sizeof(ncclUniqueIDArg) = %d, want %d", got, uniqueid.Bytes)
	}
}
