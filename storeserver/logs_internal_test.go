package storeserver

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/ranklog"
)

// Only a node that was asked answers a logs request, and only once.
func TestLogRelayAttach(t *testing.T) {
	var l logRelays
	l.open("req", []string{"a", "b"})
	tests := []struct {
		id, node string
		want     codes.Code
	}{
		{"req", "a", codes.OK},
		{"req", "a", codes.AlreadyExists},
		{"req", "c", codes.PermissionDenied},
		{"other", "a", codes.NotFound},
		{"req", "b", codes.OK},
	}
	for _, tt := range tests {
		if _, err := l.attach(tt.id, tt.node); status.Code(err) != tt.want {
			t.Errorf("attach(%s, %s): %v, want %v", tt.id, tt.node, err, tt.want)
		}
	}
	l.close("req")
	if _, err := l.attach("req", "b"); status.Code(err) != codes.NotFound {
		t.Errorf("after close: %v", err)
	}
}

func FuzzCheckPushLogs(f *testing.F) {
	ok, _ := proto.Marshal(&musterv1.PushLogsRequest{Session: "s", RequestId: "r", Records: []*musterv1.LogRecord{
		{Rank: 1, Stream: musterv1.Stream_STREAM_STDERR, Seq: 1, Data: []byte("x\n")}}})
	big, _ := proto.Marshal(&musterv1.PushLogsRequest{Records: []*musterv1.LogRecord{
		{Stream: musterv1.Stream_STREAM_STDOUT, Data: bytes.Repeat([]byte("y"), ranklog.MaxData+1)}}})
	f.Add(ok)
	f.Add(big)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m musterv1.PushLogsRequest
		if proto.Unmarshal(b, &m) != nil || checkPushLogs(&m) != nil {
			return
		}
		if len(m.GetRecords()) > MaxLogRecords {
			t.Fatalf("%d records accepted", len(m.GetRecords()))
		}
		for _, r := range m.GetRecords() {
			if len(r.GetData()) > ranklog.MaxData || r.GetRank() < 0 ||
				(r.GetStream() != musterv1.Stream_STREAM_STDOUT && r.GetStream() != musterv1.Stream_STREAM_STDERR) {
				t.Fatalf("record accepted out of bounds: rank %d, stream %v, %d bytes", r.GetRank(), r.GetStream(), len(r.GetData()))
			}
		}
	})
}
