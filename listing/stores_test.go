package listing

import (
	"bytes"
	"errors"
	"testing"
	"time"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// answeredAt is when the test replicas answered.
var answeredAt = time.UnixMilli(1_700_000_000_000)

// testReplicas are three replicas' answers, out of address order: a
// follower, the leader, and one that did not answer.
func testReplicas() []ReplicaAnswer {
	replicas := []string{"10.0.0.1:29400", "10.0.0.2:29400", "10.0.0.3:29400"}
	return []ReplicaAnswer{
		{Addr: "10.0.0.2:29400", At: answeredAt, Status: &musterv1.ReplicaStatusResponse{Addr: "10.0.0.2:29400", RaftAddr: "10.0.0.2:29401",
			Node: "b", Role: musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER, Term: 3, AppliedIndex: 41, CommitIndex: 42,
			LastContactUnixMs: answeredAt.UnixMilli() - 120, LeaderAddr: "10.0.0.1:29400", Replicas: replicas}},
		{Addr: "10.0.0.3:29400", At: answeredAt, Err: errors.New("cannot reach the store at 10.0.0.3:29400: connection refused")},
		{Addr: "10.0.0.1:29400", At: answeredAt, Status: &musterv1.ReplicaStatusResponse{Addr: "10.0.0.1:29400", RaftAddr: "10.0.0.1:29401",
			Node: "a", Role: musterv1.ReplicaRole_REPLICA_ROLE_LEADER, Term: 3, AppliedIndex: 42, CommitIndex: 42,
			LastContactUnixMs: answeredAt.UnixMilli(), LeaderAddr: "10.0.0.1:29400", Replicas: replicas}},
	}
}

func TestReplicasTable(t *testing.T) {
	single := []ReplicaAnswer{{Addr: "127.0.0.1:29400", At: answeredAt, Status: &musterv1.ReplicaStatusResponse{Addr: "127.0.0.1:29400",
		Node: "solo", Role: musterv1.ReplicaRole_REPLICA_ROLE_SINGLE, LeaderAddr: "127.0.0.1:29400", Replicas: []string{"127.0.0.1:29400"}}}}
	for _, tt := range []struct {
		name    string
		answers []ReplicaAnswer
		f       Format
		want    string
	}{
		{"table", testReplicas(), Table, `ADDRESS         NODE  ROLE         TERM  APPLIED  LAST-CONTACT
10.0.0.1:29400  a     leader       3     42       0s
10.0.0.2:29400  b     follower     3     41       120ms ago
10.0.0.3:29400  -     unreachable  -     -        -
`},
		{"wide", testReplicas(), Wide, `ADDRESS         NODE  ROLE         TERM  APPLIED  LAST-CONTACT  RAFT-ADDRESS    COMMIT  LEADER          ERROR
10.0.0.1:29400  a     leader       3     42       0s            10.0.0.1:29401  42      10.0.0.1:29400  -
10.0.0.2:29400  b     follower     3     41       120ms ago     10.0.0.2:29401  42      10.0.0.1:29400  -
10.0.0.3:29400  -     unreachable  -     -        -             -               -       -               cannot reach the store at 10.0.0.3:29400: connection refused
`},
		{"single", single, Table, `ADDRESS          NODE  ROLE    TERM  APPLIED  LAST-CONTACT
127.0.0.1:29400  solo  single  0     0        -
`},
		{"none", nil, Table, "ADDRESS  NODE  ROLE  TERM  APPLIED  LAST-CONTACT\n"},
	} {
		var b bytes.Buffer
		if err := WriteReplicas(&b, tt.f, Replicas(tt.answers)); err != nil {
			t.Fatal(err)
		}
		if b.String() != tt.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tt.name, b.String(), tt.want)
		}
	}
}

func TestReplicasSerialized(t *testing.T) {
	for _, f := range []Format{JSON, YAML} {
		t.Run(string(f), func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteReplicas(&b, f, Replicas(testReplicas())); err != nil {
				t.Fatal(err)
			}
			v := decode(t, f, b.Bytes())
			items, _ := v["items"].([]any)
			if v["apiVersion"] != "muster/v1" || v["kind"] != "ReplicaList" || len(items) != 3 {
				t.Fatalf("%v", v)
			}
			for i, want := range []map[string]string{
				{"kind": "Replica", "address": "10.0.0.1:29400", "raftAddress": "10.0.0.1:29401", "node": "a", "role": "leader",
					"term": "3", "appliedIndex": "42", "commitIndex": "42", "lastContactTime": "2023-11-14T22:13:20.000Z",
					"leader": "10.0.0.1:29400", "replicas": "[10.0.0.1:29400 10.0.0.2:29400 10.0.0.3:29400]", "error": ""},
				{"address": "10.0.0.2:29400", "role": "follower", "appliedIndex": "41", "lastContactTime": "2023-11-14T22:13:19.880Z"},
				{"address": "10.0.0.3:29400", "node": "", "role": "unreachable", "term": "0", "lastContactTime": "<nil>",
					"leader": "", "replicas": "[]", "error": "cannot reach the store at 10.0.0.3:29400: connection refused"},
			} {
				item := items[i].(map[string]any)
				for k, w := range want {
					if got := fmtAny(item[k]); got != w {
						t.Errorf("%s: item %d's %s = %s, want %s", f, i, k, got, w)
					}
				}
			}
		})
	}
}

// LAST-CONTACT says how long before its answer a follower heard from the
// leader, at a precision that fits how long ago that was.
func TestReplicaLastContactCell(t *testing.T) {
	for _, tt := range []struct {
		role musterv1.ReplicaRole
		ago  time.Duration // 0: never
		want string
	}{
		{musterv1.ReplicaRole_REPLICA_ROLE_LEADER, time.Millisecond, "0s"},
		{musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER, 0, "-"},
		{musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER, 120 * time.Millisecond, "120ms ago"},
		{musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER, -30 * time.Millisecond, "0s ago"}, // its clock is ahead
		{musterv1.ReplicaRole_REPLICA_ROLE_CANDIDATE, 2345 * time.Millisecond, "2.3s ago"},
		{musterv1.ReplicaRole_REPLICA_ROLE_CANDIDATE, 2*time.Minute + 5400*time.Millisecond, "2m5s ago"},
		{musterv1.ReplicaRole_REPLICA_ROLE_SINGLE, 0, "-"},
	} {
		st := &musterv1.ReplicaStatusResponse{Role: tt.role}
		if tt.ago != 0 {
			st.LastContactUnixMs = answeredAt.Add(-tt.ago).UnixMilli()
		}
		r := Replicas([]ReplicaAnswer{{Addr: "a:1", At: answeredAt, Status: st}}).Items[0]
		if got := r.lastContactCell(); got != tt.want {
			t.Errorf("%s %s ago: %q, want %q", tt.role, tt.ago, got, tt.want)
		}
	}
}

func TestReplicasLed(t *testing.T) {
	follower := func(addr string, term uint64, leader string) ReplicaAnswer {
		return ReplicaAnswer{Addr: addr, Status: &musterv1.ReplicaStatusResponse{Role: musterv1.ReplicaRole_REPLICA_ROLE_FOLLOWER, Term: term, LeaderAddr: leader}}
	}
	for _, tt := range []struct {
		name    string
		answers []ReplicaAnswer
		led     bool
		why     string
	}{
		{"leader", testReplicas(), true, ""},
		{"single", []ReplicaAnswer{{Addr: "a:1", Status: &musterv1.ReplicaStatusResponse{Role: musterv1.ReplicaRole_REPLICA_ROLE_SINGLE}}}, true, ""},
		{"none", []ReplicaAnswer{
			{Addr: "c:1", Status: &musterv1.ReplicaStatusResponse{Role: musterv1.ReplicaRole_REPLICA_ROLE_CANDIDATE, Term: 5}},
			{Addr: "a:1", Err: errors.New("no answer within 2s")},
			follower("b:1", 4, "a:1"),
		}, false, "a:1 unreachable (no answer within 2s), b:1 follower (term 4, leader a:1), c:1 candidate (term 5)"},
		{"empty", nil, false, "no replica listed"},
	} {
		l := Replicas(tt.answers)
		if l.Led() != tt.led || (!tt.led && l.WhyNoLeader() != tt.why) {
			t.Errorf("%s: led %v, %q; want %v, %q", tt.name, l.Led(), l.WhyNoLeader(), tt.led, tt.why)
		}
	}
}

func TestDescribeReplicaChange(t *testing.T) {
	two := []string{"a:1", "b:1"}
	three := []string{"a:1", "b:1", "c:1"}
	for _, tt := range []struct {
		addr          string
		remove        bool
		before, after []string
		want          string
	}{
		{"c:1", false, two, three, "replica c:1 added; the store's replicas: a:1, b:1, c:1"},
		{"c:1", false, three, three, "c:1 is a replica already; the store's replicas: a:1, b:1, c:1"},
		{"c:1", true, three, two, "replica c:1 removed; the store's replicas: a:1, b:1"},
		{"d:1", true, two, two, "d:1 was no replica; the store's replicas: a:1, b:1"},
		{"a:1", true, []string{"a:1"}, nil, "replica a:1 removed; the store's replicas: -"},
	} {
		if got := DescribeReplicaChange(tt.addr, tt.remove, tt.before, tt.after); got != tt.want {
			t.Errorf("%s remove=%v: %q, want %q", tt.addr, tt.remove, got, tt.want)
		}
	}
}
