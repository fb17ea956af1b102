package engine

// NCCL and the CUDA runtime are loaded at run time with purego (dlopen and
// dlsym from Go) rather than linked through cgo: muster's binaries must build
// with no CUDA headers and start on machines with no GPU, where only the
// commands that use a GPU fail, each with a clear error.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ebitengine/purego"
	"go.uber.org/zap"
)

// Environment variables that name a library file and skip the search.
const (
	EnvNCCLLibrary   = "MUSTER_NCCL_LIBRARY"
	EnvCUDARTLibrary = "MUSTER_CUDART_LIBRARY"
)

// Library is NCCL and the CUDA runtime, loaded into this process. The
// libraries stay loaded for the life of the process: NCCL keeps threads
// running that would crash if its code were unmapped.
type Library struct {
	NCCLPath   string // the file NCCL was loaded from
	CUDARTPath string // the file the CUDA runtime was loaded from
	nccl       ncclFuncs
	cuda       cudaFuncs
}

// Load finds and loads NCCL and the CUDA runtime (search order in
// LibrarySearchPaths; MUSTER_NCCL_LIBRARY and MUSTER_CUDART_LIBRARY override).
func Load(ctx context.Context, log *zap.Logger) (*Library, error) {
	ncclHandle, ncclPath, err := openLibrary(ctx, "NCCL", EnvNCCLLibrary, []string{"libnccl.so.2", "libnccl.so"})
	if err != nil {
		return nil, err
	}
	cudaHandle, cudaPath, err := openLibrary(ctx, "the CUDA runtime", EnvCUDARTLibrary, cudartNames)
	if err != nil {
		return nil, err
	}
	lib := &Library{NCCLPath: ncclPath, CUDARTPath: cudaPath}
	if err := lib.nccl.register(ncclHandle); err != nil {
		return nil, fmt.Errorf("%s: %w", ncclPath, err)
	}
	if err := lib.cuda.register(cudaHandle); err != nil {
		return nil, fmt.Errorf("%s: %w", cudaPath, err)
	}
	log.Debug("loaded gpu libraries", zap.String("nccl", ncclPath), zap.String("cudart", cudaPath))
	return lib, nil
}

// cudartNames are tried newest first; NCCL needs a driver, not a matching
// runtime, so any of them works with the NCCL found.
var cudartNames = []string{"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}

// LibraryNCCLVersion loads NCCL alone and returns its version code, e.g.
// 22809 for 2.28.9.
func LibraryNCCLVersion() (int, error) {
	h, path, err := openLibrary(context.Background(), "NCCL", EnvNCCLLibrary, []string{"libnccl.so.2", "libnccl.so"})
	if err != nil {
		return 0, err
	}
	var getVersion func(*int32) int32
	if err := register(h, &getVersion, "ncclGetVersion"); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	var v int32
	if rc := getVersion(&v); rc != ncclSuccess {
		return 0, fmt.Errorf("ncclGetVersion: nccl error %d", rc)
	}
	return int(v), nil
}

// VersionString turns NCCL's version code into "2.28.9".
func VersionString(code int) string {
	if code >= 10000 { // NCCL >= 2.9 encodes major*10000 + minor*100 + patch
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

// openLibrary dlopens the first of names found, or the file the override
// variable names. The error lists every place looked at.
func openLibrary(ctx context.Context, what, envVar string, names []string) (uintptr, string, error) {
	if p := os.Getenv(envVar); p != "" {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return 0, "", fmt.Errorf("load %s from %s=%s: %v", what, envVar, p, err)
		}
		return h, p, nil
	}
	var tried []string
	// The dynamic loader's own search first (LD_LIBRARY_PATH, ld.so.cache).
	for _, name := range names {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, name, nil
		}
		tried = append(tried, name+" (dynamic loader path)")
	}
	dirs := LibrarySearchPaths(names)
	for _, p := range candidateFiles(dirs, names) {
		h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err == nil {
			return h, p, nil
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
	}
	tried = append(tried, dirs...)
	// Last resort: ask Python where its nvidia wheels live.
	if pyDirs := pythonNvidiaDirs(ctx); len(pyDirs) > 0 {
		for _, p := range candidateFiles(pyDirs, names) {
			h, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				return h, p, nil
			}
			tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
		}
		tried = append(tried, pyDirs...)
	}
	return 0, "", &LibraryNotFoundError{What: what, Names: names, Tried: tried, EnvVar: envVar}
}

// LibraryNotFoundError says which library is missing and where muster looked.
type LibraryNotFoundError struct {
	What   string
	Names  []string
	Tried  []string
	EnvVar string
}

func (e *LibraryNotFoundError) Error() string {
	return fmt.Sprintf("%s not found (%s); looked in:\n  %s\nset %s to the library's path",
		e.What, strings.Join(e.Names, ", "), strings.Join(e.Tried, "\n  "), e.EnvVar)
}

// ErrLibraryNotFound matches a LibraryNotFoundError with errors.Is.
var ErrLibraryNotFound = errors.New("library not found")

// Is makes errors.Is(err, ErrLibraryNotFound) true.
func (e *LibraryNotFoundError) Is(target error) bool { return target == ErrLibraryNotFound }

// candidateFiles lists the existing files dir/name, in order, once each.
func candidateFiles(dirs, names []string) []string {
	var out []string
	for _, d := range dirs {
		for _, n := range names {
			matches, _ := filepath.Glob(filepath.Join(d, n))
			for _, m := range matches {
				if st, err := os.Stat(m); err == nil && !st.IsDir() && !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// LibrarySearchPaths lists the folders searched after the dynamic loader's
// path: the CUDA toolkit, the distribution's library folders, and the lib
// folders of Python's nvidia wheels (nvidia/nccl/lib, nvidia/cuda_runtime/lib,
// nvidia/cu13/lib) in every site-packages found.
func LibrarySearchPaths(names []string) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	dirs := []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/" + map[string]string{"amd64": "x86_64-linux", "arm64": "sbsa-linux"}[runtime.GOARCH] + "/lib"}
	if triplet != "" {
		dirs = append(dirs, "/usr/lib/"+triplet, "/lib/"+triplet)
	}
	dirs = append(dirs, "/usr/lib64", "/usr/local/lib", "/usr/lib")
	for _, sp := range sitePackages() {
		matches, _ := filepath.Glob(filepath.Join(sp, "nvidia", "*", "lib"))
		dirs = append(dirs, matches...)
	}
	var out []string
	for _, d := range dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// sitePackages globs the site-packages folders of every python3 on PATH (the
// venv's own prefix and the interpreter it links to), the active venv or
// conda env, and common venv places.
func sitePackages() []string {
	var prefixes []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := os.Getenv(env); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		for _, exe := range []string{"python3", "python"} {
			p := filepath.Join(dir, exe)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			prefixes = append(prefixes, filepath.Dir(filepath.Dir(p)))
			if real, err := filepath.EvalSymlinks(p); err == nil {
				prefixes = append(prefixes, filepath.Dir(filepath.Dir(real)))
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		prefixes = append(prefixes, filepath.Join(home, ".local"), filepath.Join(home, ".venv"), filepath.Join(home, "venv"))
	}
	if wd, err := os.Getwd(); err == nil {
		prefixes = append(prefixes, filepath.Join(wd, ".venv"), filepath.Join(wd, "venv"))
	}
	prefixes = append(prefixes, "/usr", "/usr/local", "/opt/conda")
	var out []string
	for _, pre := range prefixes {
		for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages", "lib64/python3*/site-packages"} {
			matches, _ := filepath.Glob(filepath.Join(pre, pat))
			for _, m := range matches {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	return out
}

// pythonNvidiaDirs asks python3 for the nvidia namespace package's folders and
// returns their */lib subfolders; a bounded wait keeps a broken Python from
// hanging the caller.
func pythonNvidiaDirs(ctx context.Context) []string {
	if _, err := exec.LookPath("python3"); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "python3", "-c", "import nvidia,sys;sys.stdout.write('\\n'.join(nvidia.__path__))").Output()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, root := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		matches, _ := filepath.Glob(filepath.Join(root, "*", "lib"))
		dirs = append(dirs, matches...)
	}
	return dirs
}

// register binds fnPtr (a pointer to a Go func value) to the first of the
// symbols present in the library; CUDA renames some entry points (_v2).
func register(handle uintptr, fnPtr any, symbols ...string) error {
	for _, s := range symbols {
		if _, err := purego.Dlsym(handle, s); err == nil {
			purego.RegisterLibFunc(fnPtr, handle, s)
			return nil
		}
	}
	return fmt.Errorf("symbol %s not found", strings.Join(symbols, " or "))
}
