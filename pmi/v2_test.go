package pmi

import (
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/testwait"
)

// startV2 opens a connection and switches it to PMI-2 as MPICH's client
// does: a v1-framed init asking for version 2.
func startV2(t *testing.T, c *client) {
	t.Helper()
	if got, want := c.call("cmd=init pmi_version=2 pmi_subversion=0"), "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0"; got != want {
		t.Fatalf("init: got %q, want %q", got, want)
	}
}

// TestV2Flow drives every PMI-2 command against Hydra's reply forms.
func TestV2Flow(t *testing.T) {
	j := testJob(t, 4)
	j.Local = 2
	j.Mapping = "(vector,(0,2,2))"
	ctx := testCtx(t)
	c, done := serve(t, ctx, j, -1)
	other, otherDone := serve(t, ctx, j, 3)
	startV2(t, c)
	startV2(t, other)
	long := strings.Repeat("v", 1025)
	steps := []struct {
		send, want string
		prefix     bool
	}{
		{send: "cmd=fullinit;pmirank=2;threaded=FALSE;",
			want: "cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=2;size=4;appnum=3;debugged=FALSE;pmiverbose=FALSE;rc=0;"},
		{send: "cmd=job-getid;", want: "cmd=job-getid-response;jobid=muster-test;rc=0;"},
		{send: "cmd=kvs-put;key=addr-2;value=a b\\c;", want: "cmd=kvs-put-response;rc=0;"},
		{send: "cmd=kvs-put;key=big;value=" + long + ";", want: "cmd=kvs-put-response;rc=-1;errmsg=value of 1025 bytes, more than 1024;"},
		{send: "cmd=kvs-get;jobid=muster-test;srcid=-1;key=addr-2;", want: "cmd=kvs-get-response;found=TRUE;value=a b\\c;rc=0;"},
		{send: "cmd=kvs-get;jobid=muster-test;srcid=-1;key=nope;", want: "cmd=kvs-get-response;found=FALSE;rc=0;"},
		{send: "cmd=kvs-get;jobid=other;srcid=-1;key=addr-2;", want: "cmd=kvs-get-response;rc=-1;errmsg=jobid \"other\" is not this job's;"},
		{send: "cmd=info-getjobattr;key=PMI_process_mapping;", want: "cmd=info-getjobattr-response;found=TRUE;value=(vector,(0,2,2));rc=0;"},
		{send: "cmd=info-getjobattr;key=universeSize;", want: "cmd=info-getjobattr-response;found=TRUE;value=4;rc=0;"},
		{send: "cmd=info-getjobattr;key=PMI_hwloc_xmlfile;", want: "cmd=info-getjobattr-response;found=FALSE;rc=0;"},
		{send: "cmd=info-putnodeattr;key=shm;value=/dev/shm/x;", want: "cmd=info-putnodeattr-response;rc=0;"},
		{send: "cmd=info-getnodeattr;key=shm;wait=FALSE;", want: "cmd=info-getnodeattr-response;found=TRUE;value=/dev/shm/x;rc=0;"},
		{send: "cmd=info-getnodeattr;key=none;wait=FALSE;", want: "cmd=info-getnodeattr-response;found=FALSE;rc=0;"},
		{send: "cmd=kvs-get;key=x;thrid=0x55d0;", want: "cmd=kvs-get-response;found=FALSE;rc=0;thrid=0x55d0;"},
		{send: "cmd=spawn;ncmds=1;subcmd=a;", want: "cmd=spawn-response;rc=-1;errmsg=spawn is not supported by this process manager;"},
		{send: "cmd=name-publish;name=a;port=b;", want: "cmd=name-publish-response;rc=-1;", prefix: true},
		{send: "cmd=name-lookup;name=a;", want: "cmd=name-lookup-response;rc=-1;", prefix: true},
		{send: "cmd=frob;", want: "cmd=frob-response;rc=-1;errmsg=unknown command \"frob\";"},
	}
	for _, s := range steps {
		got := c.call2(s.send)
		if got != s.want && !(s.prefix && strings.HasPrefix(got, s.want)) {
			t.Errorf("%q:\n got %q\nwant %q", s.send, got, s.want)
		}
	}

	// A waiting getnodeattr returns once the other local rank puts the key.
	got := make(chan string, 1)
	go func() { got <- c.call2("cmd=info-getnodeattr;key=later;wait=TRUE;") }()
	testwait.Until(t, 10*time.Second, "getnodeattr to wait", func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.attrSet != nil
	})
	if r := other.call2("cmd=info-putnodeattr;key=later;value=42;"); r != "cmd=info-putnodeattr-response;rc=0;" {
		t.Fatalf("putnodeattr: %q", r)
	}
	if r := <-got; r != "cmd=info-getnodeattr-response;found=TRUE;value=42;rc=0;" {
		t.Errorf("waiting getnodeattr: %q", r)
	}

	// kvs-fence is the node barrier: both local ranks, one upstream barrier.
	fenced := make(chan string, 1)
	go func() { fenced <- other.call2("cmd=kvs-fence;") }()
	if r := c.call2("cmd=kvs-fence;"); r != "cmd=kvs-fence-response;rc=0;" {
		t.Errorf("fence: %q", r)
	}
	if r := <-fenced; r != "cmd=kvs-fence-response;rc=0;" {
		t.Errorf("fence of the other rank: %q", r)
	}
	if n := j.Backend.(*memBackend).counts(); n[0] != 1 || len(n) != 1 {
		t.Errorf("upstream barriers %v, want one", n)
	}

	if r := c.call2("cmd=finalize;"); r != "cmd=finalize-response;rc=0;" {
		t.Errorf("finalize: %q", r)
	}
	c.conn.Close()
	if r := wait(t, done); !r.Finalized || r.Err != nil || r.Rank != 2 {
		t.Errorf("result %+v, want rank 2 finalized", r)
	}
	other.send2("cmd=abort;isworldabort=TRUE;msg=out of memory;")
	if r := wait(t, otherDone); !r.Aborted || r.ExitCode != 1 || r.Message != "rank 3 called abort with exit code 1: out of memory" {
		t.Errorf("abort result %+v", r)
	}
}

// TestV2Abort reads the exitcode and message of a PMI-2 abort.
func TestV2Abort(t *testing.T) {
	j := testJob(t, 2)
	c, done := serve(t, testCtx(t), j, 0)
	startV2(t, c)
	c.call2("cmd=fullinit;pmirank=0;")
	c.send("    34cmd=abort;exitcode=9;message=oops;")
	if r := wait(t, done); !r.Aborted || r.ExitCode != 9 || r.Message != "rank 0 called abort with exit code 9: oops" {
		t.Fatalf("result %+v", r)
	}
}

func TestV2BadInput(t *testing.T) {
	for _, tc := range []struct{ name, send, err string }{
		{"bad length", "abcdefcmd=x;", "bad frame length"},
		{"too long", "999999cmd=x;", "more than 16384"},
		{"short body", "    20cmd=x;", "unexpected EOF"},
		{"no cmd", "     6key=v;", "does not start with cmd="},
		{"bad key", "    11cmd=x;k y=;", "unexpected ' ' in key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := testJob(t, 2)
			c, done := serve(t, testCtx(t), j, 0)
			startV2(t, c)
			go func() {
				_, _ = c.conn.Write([]byte(tc.send))
				c.conn.Close()
			}()
			if r := wait(t, done); r.Err == nil || !strings.Contains(r.Err.Error(), tc.err) {
				t.Fatalf("result %+v, want an error with %q", r, tc.err)
			}
		})
	}
}

// TestV1AndV2Share: a PMI-1 rank and a PMI-2 rank of one job see each
// other's keys and meet at one node barrier.
func TestV1AndV2Share(t *testing.T) {
	j := testJob(t, 2)
	ctx := testCtx(t)
	one, oneDone := serve(t, ctx, j, 0)
	two, twoDone := serve(t, ctx, j, 1)
	one.call("cmd=init pmi_version=1 pmi_subversion=1")
	startV2(t, two)
	two.call2("cmd=fullinit;pmirank=1;")
	one.call("cmd=put kvsname=muster-test key=from-1 value=a\\ b")
	two.call2("cmd=kvs-put;key=from-2;value=c;")
	out := make(chan string, 1)
	go func() { out <- one.call("cmd=barrier_in") }()
	two.call2("cmd=kvs-fence;")
	if r := <-out; r != "cmd=barrier_out" {
		t.Fatalf("barrier: %q", r)
	}
	if r := two.call2("cmd=kvs-get;key=from-1;"); r != "cmd=kvs-get-response;found=TRUE;value=a b;rc=0;" {
		t.Errorf("v2 get of a v1 put: %q", r)
	}
	if r := one.call("cmd=get kvsname=muster-test key=from-2"); r != "cmd=get_result rc=0 msg=success value=c" {
		t.Errorf("v1 get of a v2 put: %q", r)
	}
	two.call2("cmd=kvs-put;key=nl;value=x\ny;")
	if r := one.call("cmd=get kvsname=muster-test key=nl"); !strings.HasPrefix(r, "cmd=get_result rc=-1 ") {
		t.Errorf("v1 get of a value with a newline: %q", r)
	}
	one.call("cmd=finalize")
	two.call2("cmd=finalize;")
	one.conn.Close()
	two.conn.Close()
	for _, d := range []<-chan Result{oneDone, twoDone} {
		if r := wait(t, d); !r.Finalized || r.Err != nil {
			t.Errorf("result %+v", r)
		}
	}
}
