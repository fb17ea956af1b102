// Package listing prints what the launcher's commands show (nodes, jobs,
// doctor's findings, hosts) as a table, a wide table, or one JSON or YAML
// object of a stable schema: apiVersion muster/v1, a kind, lists under
// items, camelCase field names, times in RFC 3339.
package listing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// APIVersion names the schema of every object this package writes; a
// change that breaks readers gets a new one.
const APIVersion = "muster/v1"

// Format is how a command prints what it shows (-o).
type Format string

const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Formats are the values -o takes, in the order help lists them.
func Formats() []Format { return []Format{Table, Wide, JSON, YAML} }

// FormatNames is Formats as the words help and errors show: "table, wide, json or yaml".
func FormatNames() string {
	var names []string
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ParseFormat reads -o's value; "" is Table. The error names the flag and
// the values it takes.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return Table, nil
	}
	for _, f := range Formats() {
		if Format(s) == f {
			return f, nil
		}
	}
	return "", fmt.Errorf("-o/--output: unknown format %q (want %s)", s, FormatNames())
}

// Structured says whether f is a serialization (JSON or YAML) rather than
// a table for people.
func (f Format) Structured() bool { return f == JSON || f == YAML }

// Write writes v in f, which must be JSON or YAML: indented JSON, or a YAML
// document, each ending in a newline.
func Write(w io.Writer, f Format, v any) error {
	var b bytes.Buffer
	switch f {
	case JSON:
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
	case YAML:
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		if err := enc.Close(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("listing: %s is not a serialization", f)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// WriteStream writes one object of a stream (a watch): in JSON one compact
// object a line, in YAML a document after a "---" line.
func WriteStream(w io.Writer, f Format, v any) error {
	switch f {
	case JSON:
		line, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(append(line, '\n'))
		return err
	case YAML:
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	return Write(w, f, v)
}

// timeLayout is RFC 3339 in UTC with milliseconds, of a fixed width.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Time formats a time the store gives in Unix milliseconds; nil (null) for 0,
// a time not reached.
func Time(unixMs int64) *string {
	if unixMs == 0 {
		return nil
	}
	s := time.UnixMilli(unixMs).UTC().Format(timeLayout)
	return &s
}

// orDash is s, or "-" when empty, for a table cell.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
