package listing

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/musterhq/muster/hostfile"
)

// HostList is what `launcher hostfile -o json|yaml` and `launcher hostlist
// expand -o json|yaml` write.
type HostList struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // HostList
	Items      []Host `json:"items" yaml:"items"`
}

// Host is a host of a hostfile or hostlist.
type Host struct {
	Name string `json:"name" yaml:"name"`
	// Slots is how many workers it takes, MaxSlots their bound; null when
	// not given.
	Slots    *int `json:"slots" yaml:"slots"`
	MaxSlots *int `json:"maxSlots" yaml:"maxSlots"`
	// User is the login name of user@host, "" for the caller's.
	User string `json:"user" yaml:"user"`
}

// Hostlist is what `launcher hostlist compress -o json|yaml` writes.
type Hostlist struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // Hostlist
	// Hostlist is the names as one Slurm hostlist, Count how many it names.
	Hostlist string `json:"hostlist" yaml:"hostlist"`
	Count    int    `json:"count" yaml:"count"`
}

// Hosts turns hosts into the schema.
func Hosts(hosts []hostfile.Host) HostList {
	l := HostList{APIVersion: APIVersion, Kind: "HostList", Items: []Host{}}
	for _, h := range hosts {
		item := Host{Name: h.Name, User: h.User}
		if h.Slots > 0 {
			n := h.Slots
			item.Slots = &n
		}
		if h.MaxSlots > 0 {
			n := h.MaxSlots
			item.MaxSlots = &n
		}
		l.Items = append(l.Items, item)
	}
	return l
}

// HostNames is a list of names alone (hostlist expand).
func HostNames(names []string) HostList {
	l := HostList{APIVersion: APIVersion, Kind: "HostList", Items: []Host{}}
	for _, n := range names {
		l.Items = append(l.Items, Host{Name: n})
	}
	return l
}

// WriteHosts writes hosts in f: a HOST SLOTS table (wide adds MAX-SLOTS
// and USER), or the HostList.
func WriteHosts(w io.Writer, f Format, l HostList) error {
	if f.Structured() {
		return Write(w, f, l)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "HOST\tSLOTS"
	if f == Wide {
		header += "\tMAX-SLOTS\tUSER"
	}
	fmt.Fprintln(tw, header)
	cell := func(n *int) string {
		if n == nil {
			return "-"
		}
		return fmt.Sprint(*n)
	}
	for _, h := range l.Items {
		fmt.Fprintf(tw, "%s\t%s", h.Name, cell(h.Slots))
		if f == Wide {
			fmt.Fprintf(tw, "\t%s\t%s", cell(h.MaxSlots), orDash(h.User))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// WriteHostlist writes a compressed hostlist in f: a HOSTLIST COUNT table,
// or the Hostlist.
func WriteHostlist(w io.Writer, f Format, h Hostlist) error {
	if f.Structured() {
		return Write(w, f, h)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "HOSTLIST\tCOUNT\n%s\t%d\n", h.Hostlist, h.Count)
	return tw.Flush()
}
