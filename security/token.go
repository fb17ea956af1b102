package security

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/musterhq/muster/paths"
)

// MinTokenLength is the shortest cluster token accepted, from a file or from
// MUSTER_TOKEN alike.
const MinTokenLength = 16

// EnvToken names the variable that may hold the cluster token.
const EnvToken = "MUSTER_TOKEN"

// SystemTokenFile is where an agent running as root keeps the cluster token
// it created, and where launchers and joining agents look for it.
const SystemTokenFile = "/etc/muster/token"

func checkToken(where, tok string) (string, error) {
	tok = strings.TrimSpace(tok)
	if len(tok) < MinTokenLength {
		return "", fmt.Errorf("%s: token is %d characters, want at least %d", where, len(tok), MinTokenLength)
	}
	return tok, nil
}

// ReadToken reads a cluster token from a file, trimmed.
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %w", err)
	}
	return checkToken("--token-file "+path, string(b))
}

// TokenSource says where ResolveToken looks for the cluster token after
// MUSTER_TOKEN.
type TokenSource struct {
	// File is --token-file.
	File string
	// Create makes File, or DefaultTokenFile without one, with a fresh token
	// when it does not exist: a node hosting the store does.
	Create bool
	// Find reads, without File, the first default token file this user can
	// read (FindTokenFile): launchers and joining nodes do.
	Find bool
}

// ResolveToken returns the cluster token: MUSTER_TOKEN when it is set, else
// the token in src.File (made when missing, with src.Create), else (with
// src.Find) a default token file's; "" when there is none. created says
// whether it made the file.
func ResolveToken(src TokenSource) (tok string, created bool, err error) {
	if v, ok := os.LookupEnv(EnvToken); ok {
		tok, err := checkToken(EnvToken, v)
		return tok, false, err
	}
	file := src.File
	if src.Create {
		if file == "" {
			file = DefaultTokenFile()
		}
		return EnsureTokenFile(file)
	}
	if file == "" && src.Find {
		file = FindTokenFile()
	}
	if file == "" {
		return "", false, nil
	}
	tok, err = ReadToken(file)
	return tok, false, err
}

// DefaultTokenFile is where an agent hosting a store keeps the token it
// creates when none is given: /etc/muster/token for root, else
// $XDG_CONFIG_HOME/muster/token (~/.config/muster/token).
func DefaultTokenFile() string {
	dir := paths.OS().ConfigDir()
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "token")
}

// FindTokenFile returns the first default token file this user can read:
// their own agent's, then the system's. It returns "" when there is none.
func FindTokenFile() string {
	for _, p := range []string{DefaultTokenFile(), SystemTokenFile} {
		if p == "" {
			continue
		}
		if f, err := os.Open(p); err == nil {
			f.Close()
			return p
		}
	}
	return ""
}

// EnsureTokenFile reads the cluster token from path, creating the file
// (mode 0600, with a fresh random token) and its directory first when it
// does not exist. created says whether it did. The directory is 0755: it
// is where the public CA certificate goes too (/etc/muster).
func EnsureTokenFile(path string) (tok string, created bool, err error) {
	if path == "" {
		return "", false, errors.New("no place for the cluster token: pass --token-file")
	}
	if _, err := os.Stat(path); err == nil {
		tok, err := ReadToken(path)
		return tok, false, err
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", false, fmt.Errorf("--token-file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("token directory: %w", err)
	}
	var b [32]byte
	rand.Read(b[:])
	tok = hex.EncodeToString(b[:])
	// Written aside and linked into place, so that a reader never sees half
	// a token and two agents starting at once end up with one token.
	tmp, err := os.CreateTemp(dir, ".token-*")
	if err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("token file: %w", err)
	}
	_, err = tmp.WriteString(tok + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", false, fmt.Errorf("token file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			tok, err := ReadToken(path)
			return tok, false, err
		}
		return "", false, fmt.Errorf("token file: %w", err)
	}
	return tok, true, nil
}
