package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// No image can be pulled where these tests run, so the test image is made
// here from the built binaries, the libraries ldd names and Debian's
// busybox-static, written as a tar and loaded with `docker import`.

// needDocker skips t when no Docker engine answers.
func needDocker(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed")
	}
	if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers: %v: %s", err, bytes.TrimSpace(out))
	}
}

// docker runs the docker command and returns its output, failing t when it fails.
func docker(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// uniqueName is prefix with a random suffix: tests of several checkouts may
// share one Docker engine.
func uniqueName(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// rootfs is an image's files, by their path in the image.
type rootfs struct {
	files map[string]string      // copied from this host path
	data  map[string][]byte      // written as given
	links map[string]string      // symbolic links, to this target
	dirs  map[string]fs.FileMode // directories with other modes than 0755
}

func newRootfs() *rootfs {
	return &rootfs{files: map[string]string{}, data: map[string][]byte{}, links: map[string]string{}, dirs: map[string]fs.FileMode{}}
}

// has says whether p is in the image already.
func (r *rootfs) has(p string) bool {
	_, f := r.files[p]
	_, d := r.data[p]
	_, l := r.links[p]
	return f || d || l
}

// addHost adds the host's file, link or directory tree at p, under the same
// path with its directories' links resolved, as the host has it.
func (r *rootfs) addHost(t testing.TB, p string) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(p))
	fi, err := os.Lstat(dst)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(dst)
		if err != nil {
			t.Fatal(err)
		}
		r.links[dst] = target
	case fi.IsDir():
		err := filepath.WalkDir(dst, func(q string, d fs.DirEntry, err error) error {
			if err != nil || q == dst {
				return err
			}
			if d.Type()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(q)
				r.links[q] = target
				return err
			}
			if d.Type().IsRegular() {
				r.files[q] = q
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	case fi.Mode().IsRegular():
		r.files[dst] = dst
	}
}

// addBusybox adds Debian's busybox-static with a link for each of its
// applets that the image has no file for. With mergedUsr, /bin and /sbin
// are taken to be links into /usr, as on the host.
func (r *rootfs) addBusybox(t testing.TB, mergedUsr bool) {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox is not installed (apt-get install busybox-static)")
	}
	if out, _ := exec.Command("ldd", bb).CombinedOutput(); !bytes.Contains(out, []byte("not a dynamic executable")) {
		t.Skipf("%s is linked dynamically: install busybox-static", bb)
	}
	self := "/bin/busybox"
	if mergedUsr {
		self = "/usr/bin/busybox"
	}
	r.files[self] = bb
	list, err := exec.Command(bb, "--list-full").Output()
	if err != nil {
		t.Fatalf("busybox --list-full: %v", err)
	}
	for _, applet := range strings.Fields(string(list)) {
		p := "/" + applet
		if mergedUsr && !strings.HasPrefix(p, "/usr/") {
			p = "/usr" + p
		}
		if !r.has(p) {
			r.links[p] = self
		}
	}
}

// addLibraries adds the shared libraries and the dynamic loader that ldd
// names for bin, at the paths it names them.
func (r *rootfs) addLibraries(t testing.TB, bin string) {
	t.Helper()
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return
		}
		t.Fatalf("ldd %s: %v\n%s", bin, err, out)
	}
	lib := regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x`)
	for _, m := range lib.FindAllStringSubmatch(string(out), -1) {
		r.files[m[1]] = m[1]
	}
}

// entries lists every path of the image, its parent directories first.
func (r *rootfs) entries() []string {
	seen := map[string]bool{}
	var all []string
	add := func(p string) {
		for q := p; q != "/" && q != "." && !seen[q]; q = path.Dir(q) {
			seen[q] = true
			all = append(all, q)
		}
	}
	for _, m := range []map[string]string{r.files, r.links} {
		for p := range m {
			add(p)
		}
	}
	for p := range r.data {
		add(p)
	}
	for p := range r.dirs {
		add(p)
	}
	slices.Sort(all) // a directory sorts before what it holds
	return all
}

// digest is a hash of everything the image would hold, so that an image
// already imported under it is used again.
func (r *rootfs) digest(t testing.TB) string {
	t.Helper()
	h := sha256.New()
	for _, p := range r.entries() {
		fmt.Fprintf(h, "%s\x00%o\x00%s\x00", p, r.dirs[p], r.links[p])
		h.Write(r.data[p])
		if src, ok := r.files[p]; ok {
			f, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := f.Stat()
			fmt.Fprintf(h, "%o\x00", fi.Mode().Perm())
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// writeTar writes the image as a tar, every entry owned by root.
func (r *rootfs) writeTar(w io.Writer) error {
	tw := tar.NewWriter(w)
	epoch := time.Unix(0, 0)
	for _, p := range r.entries() {
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), ModTime: epoch, Format: tar.FormatPAX}
		var src *os.File
		switch {
		case r.links[p] != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, r.links[p], 0o777
		case r.data[p] != nil:
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(r.data[p]))
		case r.files[p] != "":
			f, err := os.Open(r.files[p])
			if err != nil {
				return err
			}
			fi, err := f.Stat()
			if err != nil {
				f.Close()
				return err
			}
			hdr.Typeflag, hdr.Mode, hdr.Size, src = tar.TypeReg, int64(fi.Mode().Perm()), fi.Size(), f
		default:
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			if m, ok := r.dirs[p]; ok {
				hdr.Mode = int64(m.Perm())
				if m&fs.ModeSticky != 0 {
					hdr.Mode |= 0o1000
				}
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			if src != nil {
				src.Close()
			}
			return err
		}
		if r.data[p] != nil {
			if _, err := tw.Write(r.data[p]); err != nil {
				return err
			}
		}
		if src != nil {
			_, err := io.CopyN(tw, src, hdr.Size)
			src.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", src.Name(), err)
			}
		}
	}
	return tw.Close()
}

// importImage makes the image repo:DIGEST from r with `docker import`, unless
// it exists already, and returns its name. changes are Dockerfile lines
// (ENV ..., WORKDIR ...) for the image's configuration.
func importImage(t testing.TB, repo string, r *rootfs, changes ...string) string {
	t.Helper()
	image := repo + ":" + r.digest(t)
	if exec.Command("docker", "image", "inspect", image).Run() == nil {
		return image
	}
	args := []string{"import"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append(args, "-", image)...)
	pr, pw := io.Pipe()
	cmd.Stdin = pr
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	werr := r.writeTar(pw)
	pw.CloseWithError(werr)
	if err := cmd.Wait(); err != nil || werr != nil {
		t.Fatalf("docker import %s: %v, writing the tar: %v\n%s", image, err, werr, out.String())
	}
	return image
}

// baseRootfs is a small system: glibc as the built binaries need it,
// busybox for /bin/sh and the usual commands, root's account and /tmp.
func baseRootfs(t testing.TB) *rootfs {
	t.Helper()
	r := newRootfs()
	for _, bin := range []string{agentBin, launcherBin} {
		r.addLibraries(t, bin)
	}
	r.addBusybox(t, false)
	r.addUsers("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", "root:x:0:\nnogroup:x:65534:\n")
	return r
}

// addUsers writes /etc/passwd and /etc/group, and makes root's home and /tmp.
func (r *rootfs) addUsers(passwd, group string) {
	r.data["/etc/passwd"] = []byte(passwd)
	r.data["/etc/group"] = []byte(group)
	r.dirs["/tmp"] = fs.ModeSticky | 0o777
	r.dirs["/root"] = 0o700
}

// testImage is the image the container tests run: the base system with the
// agent and launcher e2e built in /usr/local/bin. It is tagged by its
// content, so a run imports it once, and left for the next run; the tests
// running at once share the one import.
func testImage(t testing.TB) string {
	t.Helper()
	needDocker(t)
	testImageOnce.Do(func() {
		// A skip or failure here ends this test in the middle of Do: the
		// others hear of it through testImageSkipped and the empty name.
		defer func() { testImageSkipped = t.Skipped() }()
		r := baseRootfs(t)
		r.files["/usr/local/bin/agent"] = agentBin
		r.files["/usr/local/bin/launcher"] = launcherBin
		testImageName = importImage(t, "muster-e2e", r,
			"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	})
	if testImageSkipped {
		t.Skip("no test image: the first test that made it was skipped")
	}
	if testImageName == "" {
		t.Fatal("no test image: the first test that made it failed")
	}
	return testImageName
}

var (
	testImageOnce    sync.Once
	testImageName    string
	testImageSkipped bool
)

// newDockerNet makes a private bridge network, removed when the test ends.
func newDockerNet(t testing.TB) string {
	t.Helper()
	needDocker(t)
	name := uniqueName("muster-e2e")
	docker(t, "network", "create", "--driver", "bridge", name)
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "network", "rm", name).CombinedOutput(); err != nil {
			t.Errorf("docker network rm %s: %v\n%s", name, err, out)
		}
	})
	return name
}

// runContainer starts args in a container of the test image on network net,
// detached, with host name and network alias name and the variables env
// (NAME=value); it returns the container's own name. The container is
// removed when the test ends.
func runContainer(t testing.TB, net, name string, env []string, args ...string) string {
	t.Helper()
	return runContainerWith(t, net, name, env, nil, args...)
}

// runContainerWith is runContainer with more flags for docker run, as
// --cpus 0.5.
func runContainerWith(t testing.TB, net, name string, env, flags []string, args ...string) string {
	t.Helper()
	image := testImage(t)
	container := net + "-" + name
	run := append([]string{"run", "--detach", "--name", container, "--hostname", name,
		"--network", net, "--network-alias", name}, flags...)
	for _, e := range env {
		run = append(run, "--env", e)
	}
	t.Cleanup(func() { exec.Command("docker", "rm", "--force", "--volumes", container).Run() })
	docker(t, append(append(run, image), args...)...)
	return container
}

// containerLogs is what the container wrote, stdout and stderr together.
func containerLogs(t testing.TB, container string) string {
	t.Helper()
	out, err := exec.Command("docker", "logs", container).CombinedOutput()
	if err != nil {
		t.Fatalf("docker logs %s: %v\n%s", container, err, out)
	}
	return string(out)
}

// waitExit waits for the container to exit and returns its exit code; a
// container still running after timeout fails the test, showing its logs.
func waitExit(t testing.TB, container string, timeout time.Duration) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "wait", container).Output()
	if ctx.Err() != nil {
		t.Fatalf("%s still runs after %v; its output:\n%s", container, timeout, containerLogs(t, container))
	}
	if err != nil {
		var ee *exec.ExitError
		errors.As(err, &ee)
		t.Fatalf("docker wait %s: %v %s", container, err, ee.Stderr)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("docker wait %s: %q", container, out)
	}
	return code
}

// dockerStop stops the container as `docker stop` does: SIGTERM, then
// SIGKILL after timeoutSec seconds.
func dockerStop(t testing.TB, container string, timeoutSec int) {
	t.Helper()
	docker(t, "stop", "--time", strconv.Itoa(timeoutSec), container)
}

// dockerKill sends the container's main process signal (KILL, TERM, ...).
func dockerKill(t testing.TB, container, signal string) {
	t.Helper()
	docker(t, "kill", "--signal", signal, container)
}

// The test image runs the built binaries and busybox; containers on one
// network reach each other by name; stop and kill end a container.
func TestImageSmoke(t *testing.T) {
	t.Parallel()
	net := newDockerNet(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"agent-help", []string{"agent", "--help"}, "--listen"},
		{"launcher-version", []string{"launcher", "--version"}, "launcher "},
		{"agent-version", []string{"agent", "--version"}, "agent "},
		{"busybox", []string{"busybox", "sh", "-c", "echo ok"}, "ok\n"},
		{"sh", []string{"sh", "-c", "echo ok from $(hostname)"}, "ok from sh\n"},
	} {
		container := runContainer(t, net, c.name, nil, c.args...)
		if code := waitExit(t, container, 30*time.Second); code != 0 {
			t.Errorf("%v: exit code %d\n%s", c.args, code, containerLogs(t, container))
		} else if logs := containerLogs(t, container); !strings.Contains(logs, c.want) {
			t.Errorf("%v printed %q, want %q in it", c.args, logs, c.want)
		}
	}

	// PID 1 ignores SIGTERM it has no handler for: stop takes SIGKILL.
	server := runContainer(t, net, "node-0", nil, "sleep", "60")
	client := runContainer(t, net, "node-1", nil, "sh", "-c", "ping -c 1 -W 5 node-0")
	if code := waitExit(t, client, 30*time.Second); code != 0 {
		t.Errorf("node-1 could not reach node-0 by name: exit code %d\n%s", code, containerLogs(t, client))
	}
	dockerStop(t, server, 1)
	if code := waitExit(t, server, 30*time.Second); code != 137 {
		t.Errorf("stopped sleep exited %d, want 137 (SIGKILL)", code)
	}
	trap := runContainer(t, net, "trap", nil, "sh", "-c", "trap 'exit 3' TERM; echo trap set; while :; do sleep 0.1; done")
	testwait.Until(t, 20*time.Second, "the shell to set its trap", func() bool { return strings.Contains(containerLogs(t, trap), "trap set\n") })
	dockerKill(t, trap, "TERM")
	if code := waitExit(t, trap, 30*time.Second); code != 3 {
		t.Errorf("SIGTERM to a trapping shell: exit code %d, want 3", code)
	}
}

// goImageRootfs stands in for the golang image deploy/docker/Dockerfile
// builds on: this host's Go, and gcc and glibc's headers from its Debian
// packages (cgo needs them), with busybox for the shell.
func goImageRootfs(t testing.TB) *rootfs {
	t.Helper()
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("no dpkg here to find gcc's files for the Go build image")
	}
	deps, err := exec.Command("apt-cache", "depends", "--recurse", "--installed", "--no-recommends", "--no-suggests",
		"--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", "gcc", "libc6-dev").Output()
	if err != nil {
		t.Skipf("apt-cache depends gcc libc6-dev: %v (cgo needs gcc and libc6-dev installed)", err)
	}
	r := newRootfs()
	for _, top := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if target, err := os.Readlink(top); err == nil {
			r.links[top] = target
		}
	}
	var pkgs []string
	for _, l := range strings.Split(string(deps), "\n") {
		if l != "" && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "<") {
			pkgs = append(pkgs, l)
		}
	}
	files, err := exec.Command("dpkg-query", append([]string{"--listfiles"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("dpkg-query --listfiles %v: %v", pkgs, err)
	}
	for _, p := range strings.Split(string(files), "\n") {
		if fi, err := os.Lstat(p); p == "" || err != nil || fi.IsDir() || strings.HasPrefix(p, "/usr/share/") {
			continue
		}
		r.addHost(t, p)
	}
	r.addHost(t, strings.TrimSpace(string(goroot)))
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		r.addHost(t, "/etc/ssl/certs/ca-certificates.crt") // for the module proxy
	}
	r.addBusybox(t, true)
	r.addUsers("root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n")
	return r
}

// removeImageTree removes the images roots and every image built on them,
// children first, and fails t if any is left.
func removeImageTree(t testing.TB, roots ...string) {
	t.Helper()
	parent := map[string]string{}
	if ids := strings.Fields(docker(t, "images", "--all", "--quiet", "--no-trunc")); len(ids) > 0 {
		for _, l := range strings.Split(docker(t, append([]string{"image", "inspect", "--format", "{{.Id}} {{.Parent}}"}, ids...)...), "\n") {
			id, p, _ := strings.Cut(l, " ")
			parent[id] = p
		}
	}
	rootIDs := map[string]bool{}
	for _, r := range roots {
		rootIDs[docker(t, "image", "inspect", "--format", "{{.Id}}", r)] = true
	}
	depth := map[string]int{} // how far below a root
	for id := range parent {
		for d, p := 0, id; p != ""; d, p = d+1, parent[p] {
			if rootIDs[p] {
				depth[id] = d
				break
			}
		}
	}
	tree := slices.Collect(maps.Keys(depth))
	slices.SortFunc(tree, func(a, b string) int { return depth[b] - depth[a] })
	for _, id := range tree {
		exec.Command("docker", "rmi", "--force", id).Run()
	}
	for _, id := range tree {
		if exec.Command("docker", "image", "inspect", id).Run() == nil {
			t.Errorf("image %s is left", id)
		}
	}
}

// deploy/docker/Dockerfile builds: its build stage compiles both binaries
// with cgo, and the final image runs them. Nothing can be pulled here, so
// GO_IMAGE and BASE_IMAGE are images made from this host's files, and the
// build reaches the module proxy through the host's network (--network host,
// GOPROXY as the host has it). The legacy builder is used: it works on any
// engine, with or without buildx. A cold build takes minutes, so it runs
// when MUSTER_E2E_DOCKERFILE=1 asks for it, as CI does in a step of its own.
func TestImageDockerfileBuild(t *testing.T) {
	if os.Getenv("MUSTER_E2E_DOCKERFILE") != "1" {
		t.Skip("a cold image build takes minutes: set MUSTER_E2E_DOCKERFILE=1 (CI runs it in a step of its own)")
	}
	needDocker(t)
	base := importImage(t, uniqueName("muster-e2e-base"), baseRootfs(t))
	goImage := importImage(t, uniqueName("muster-e2e-go"), goImageRootfs(t),
		"ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"ENV GOPATH=/go", "ENV HOME=/root")
	t.Cleanup(func() { removeImageTree(t, base, goImage) })

	image := uniqueName("muster-e2e-dockerfile")
	args := []string{"build", "--network", "host", "--force-rm", "--file", "deploy/docker/Dockerfile", "--tag", image,
		"--build-arg", "GO_IMAGE=" + goImage, "--build-arg", "BASE_IMAGE=" + base, "--build-arg", "VERSION=9.8.7-e2e"}
	for _, v := range []string{"GOPROXY", "GOFLAGS"} {
		if val, _ := exec.Command("go", "env", v).Output(); len(bytes.TrimSpace(val)) > 0 {
			args = append(args, "--build-arg", v+"="+string(bytes.TrimSpace(val)))
		}
	}
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"} {
		if val, ok := os.LookupEnv(v); ok {
			args = append(args, "--build-arg", v+"="+val)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "docker", append(args, ".")...)
	build.Dir = ".."
	build.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	for _, bin := range []string{"agent", "launcher"} {
		out, err := exec.Command("docker", "run", "--rm", image, bin, "--version").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), bin+" 9.8.7-e2e") {
			t.Errorf("%s --version in the built image: %v\n%s", bin, err, out)
		}
	}
	if out, err := exec.Command("docker", "run", "--rm", image, "ls", "/usr/local/bin").CombinedOutput(); err != nil ||
		strings.Join(strings.Fields(string(out)), " ") != "agent launcher" {
		t.Errorf("/usr/local/bin of the built image holds %q (%v), want agent and launcher", out, err)
	}
}

// deploy/compose/docker-compose.yml runs as written, on the test image
// (MUSTER_IMAGE, which the file reads, spares the build): both nodes exit
// 0, and node-0 prints every rank.
func TestComposeRuns(t *testing.T) {
	t.Parallel()
	needDocker(t)
	if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Skip("docker-compose is not installed")
	}
	project := uniqueName("muster-compose")
	compose := func(args ...string) *exec.Cmd {
		cmd := exec.Command("docker-compose", append([]string{"-f", "../deploy/compose/docker-compose.yml", "-p", project}, args...)...)
		cmd.Env = append(os.Environ(), "MUSTER_IMAGE="+testImage(t), "MUSTER_TOKEN="+runToken)
		return cmd
	}
	t.Cleanup(func() { compose("down", "--volumes", "--remove-orphans").Run() })
	up := compose("up", "--no-build", "--no-color")
	done := make(chan error, 1)
	var out bytes.Buffer
	up.Stdout, up.Stderr = &out, &out
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- up.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("docker-compose up: %v\n%s", err, out.String())
		}
	case <-time.After(2 * time.Minute):
		up.Process.Kill()
		t.Fatalf("docker-compose up still runs after 2 minutes:\n%s", out.String())
	}
	for _, name := range []string{"node-0", "node-1"} {
		id, err := compose("ps", "-q", name).Output()
		if err != nil || len(bytes.TrimSpace(id)) == 0 {
			t.Fatalf("no container for %s: %v", name, err)
		}
		code, _ := exec.Command("docker", "inspect", "--format", "{{.State.ExitCode}}", string(bytes.TrimSpace(id))).Output()
		if strings.TrimSpace(string(code)) != "0" {
			t.Errorf("%s exited %s:\n%s", name, code, out.String())
		}
	}
	for rank := 0; rank < 4; rank++ {
		if line := fmt.Sprintf("[%d] rank %d of 4", rank, rank); !strings.Contains(out.String(), line) {
			t.Errorf("no %q in the output:\n%s", line, out.String())
		}
	}
}
