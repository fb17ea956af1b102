package listing

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// ReplicaList is what `launcher stores -o json|yaml` writes.
type ReplicaList struct {
	APIVersion string    `json:"apiVersion" yaml:"apiVersion"`
	Kind       string    `json:"kind" yaml:"kind"` // ReplicaList
	Items      []Replica `json:"items" yaml:"items"`
}

// Replica is one replica of a store, as it accounts for itself.
type Replica struct {
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	Kind       string `json:"kind" yaml:"kind"` // Replica
	// Address is its store address, as the configuration names it.
	Address     string `json:"address" yaml:"address"`
	RaftAddress string `json:"raftAddress" yaml:"raftAddress"`
	Node        string `json:"node" yaml:"node"`
	// Role is leader, follower, candidate, single (a store that is not
	// replicated) or shutdown; unreachable when it did not answer, and
	// Error says why.
	Role         string `json:"role" yaml:"role"`
	Term         uint64 `json:"term" yaml:"term"`
	AppliedIndex uint64 `json:"appliedIndex" yaml:"appliedIndex"`
	CommitIndex  uint64 `json:"commitIndex" yaml:"commitIndex"`
	// LastContactTime is when it last heard from the leader (a leader:
	// when it answered), by its own clock; null when never.
	LastContactTime *string `json:"lastContactTime" yaml:"lastContactTime"`
	// Leader is the leader's store address as it knows it; "" while none.
	Leader string `json:"leader" yaml:"leader"`
	// Replicas are the configuration's store addresses as it knows them.
	Replicas []string `json:"replicas" yaml:"replicas"`
	Error    string   `json:"error" yaml:"error"`

	lastContact time.Time // zero: never
	answered    time.Time // when its answer came, by this machine's clock
}

// The roles `launcher stores` lists besides the replicas' own.
const (
	Leader      = "leader"
	Single      = "single"
	Unreachable = "unreachable"
)

// ReplicaAnswer is what asking one replica for its status gave.
type ReplicaAnswer struct {
	Addr   string
	Status *musterv1.ReplicaStatusResponse // nil when Err is set
	Err    error
	// At is when the answer came: a follower's last contact is shown as
	// how long before it.
	At time.Time
}

// Replicas turns the replicas' answers into the schema, sorted by address.
func Replicas(answers []ReplicaAnswer) ReplicaList {
	l := ReplicaList{APIVersion: APIVersion, Kind: "ReplicaList", Items: []Replica{}}
	for _, a := range answers {
		item := Replica{APIVersion: APIVersion, Kind: "Replica", Address: a.Addr, Replicas: []string{}, answered: a.At}
		if a.Err != nil || a.Status == nil {
			item.Role, item.Error = Unreachable, "no answer"
			if a.Err != nil {
				item.Error = a.Err.Error()
			}
			l.Items = append(l.Items, item)
			continue
		}
		st := a.Status
		item.RaftAddress, item.Node, item.Role = st.GetRaftAddr(), st.GetNode(), RoleName(st.GetRole())
		item.Term, item.AppliedIndex, item.CommitIndex = st.GetTerm(), st.GetAppliedIndex(), st.GetCommitIndex()
		item.LastContactTime, item.Leader = Time(st.GetLastContactUnixMs()), st.GetLeaderAddr()
		item.Replicas = append(item.Replicas, st.GetReplicas()...)
		if ms := st.GetLastContactUnixMs(); ms != 0 {
			item.lastContact = time.UnixMilli(ms)
		}
		l.Items = append(l.Items, item)
	}
	slices.SortStableFunc(l.Items, func(a, b Replica) int { return cmp.Compare(a.Address, b.Address) })
	return l
}

// RoleName is a replica's role as the schema spells it: "leader".
func RoleName(r musterv1.ReplicaRole) string {
	return strings.ToLower(strings.TrimPrefix(r.String(), "REPLICA_ROLE_"))
}

// Leads says whether the replica takes the store's calls: the leader, or
// a store that is not replicated.
func (r Replica) Leads() bool { return r.Role == Leader || r.Role == Single }

// Led says whether some replica of l leads.
func (l ReplicaList) Led() bool {
	return slices.ContainsFunc(l.Items, Replica.Leads)
}

// WhyNoLeader is what each replica said, for a list in which none leads:
// "A unreachable (why), B candidate (term 4), ...".
func (l ReplicaList) WhyNoLeader() string {
	var parts []string
	for _, r := range l.Items {
		switch {
		case r.Role == Unreachable:
			parts = append(parts, fmt.Sprintf("%s unreachable (%s)", r.Address, r.Error))
		case r.Leader != "":
			parts = append(parts, fmt.Sprintf("%s %s (term %d, leader %s)", r.Address, r.Role, r.Term, r.Leader))
		default:
			parts = append(parts, fmt.Sprintf("%s %s (term %d)", r.Address, r.Role, r.Term))
		}
	}
	if len(parts) == 0 {
		return "no replica listed"
	}
	return strings.Join(parts, ", ")
}

// WriteReplicas writes the replicas in f.
func WriteReplicas(w io.Writer, f Format, l ReplicaList) error {
	if f.Structured() {
		return Write(w, f, l)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "ADDRESS\tNODE\tROLE\tTERM\tAPPLIED\tLAST-CONTACT"
	if f == Wide {
		header += "\tRAFT-ADDRESS\tCOMMIT\tLEADER\tERROR"
	}
	fmt.Fprintln(tw, header)
	for _, r := range l.Items {
		term, applied, commit := "-", "-", "-"
		if r.Role != Unreachable {
			term, applied, commit = fmt.Sprint(r.Term), fmt.Sprint(r.AppliedIndex), fmt.Sprint(r.CommitIndex)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", r.Address, orDash(r.Node), r.Role, term, applied, r.lastContactCell())
		if f == Wide {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s", orDash(r.RaftAddress), commit, orDash(r.Leader), orDash(r.Error))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// lastContactCell is "0s" for the leader, how long before its answer a
// follower last heard from the leader ("120ms ago"), "-" when never. The
// replica's clock and this machine's may differ: a follower ahead of this
// machine shows "0s ago".
func (r Replica) lastContactCell() string {
	switch {
	case r.Role == Leader:
		return "0s"
	case r.lastContact.IsZero():
		return "-"
	}
	ago := max(r.answered.Sub(r.lastContact), 0)
	switch {
	case ago < time.Second:
		ago = ago.Round(time.Millisecond)
	case ago < time.Minute:
		ago = ago.Round(100 * time.Millisecond)
	default:
		ago = ago.Round(time.Second)
	}
	return ago.String() + " ago"
}

// DescribeReplicaChange is the line `launcher stores add|remove ADDR`
// prints: what changed, and the replicas after the change (before, when
// nothing did).
func DescribeReplicaChange(addr string, remove bool, before, after []string) string {
	var what string
	switch had := slices.Contains(before, addr); {
	case remove && !had:
		what = fmt.Sprintf("%s was no replica", addr)
	case remove:
		what = fmt.Sprintf("replica %s removed", addr)
	case had:
		what = fmt.Sprintf("%s is a replica already", addr)
	default:
		what = fmt.Sprintf("replica %s added", addr)
	}
	return fmt.Sprintf("%s; the store's replicas: %s", what, orDash(strings.Join(after, ", ")))
}
