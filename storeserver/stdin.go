package storeserver

import (
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// WriteStdin relays a launcher's stdin into its job.
func (s *Server) WriteStdin(stream musterv1.Jobs_WriteStdinServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	relay, err := s.store.StdinWriter(first.GetJobId())
	if err != nil {
		return rpcError(err)
	}
	defer relay.CloseWrite()
	for chunk := first; ; {
		if n := len(chunk.GetData()); n > rendezvous.MaxStdinChunk {
			return status.Errorf(codes.InvalidArgument, "stdin chunk of %d bytes, more than %d", n, rendezvous.MaxStdinChunk)
		}
		if len(chunk.GetData()) > 0 {
			if err := relay.Write(stream.Context(), chunk.GetData()); errors.Is(err, rendezvous.ErrStdinClosed) {
				// Nobody reads on: the launcher may stop sending.
				return stream.SendAndClose(&musterv1.WriteStdinResponse{})
			} else if err != nil {
				return rpcError(err)
			}
		}
		if chunk, err = stream.Recv(); err == io.EOF {
			return stream.SendAndClose(&musterv1.WriteStdinResponse{})
		} else if err != nil {
			return err
		}
	}
}

// ReadStdin streams a job's stdin to an agent that runs a stdin rank; the
// stream ends after the last chunk.
func (s *Server) ReadStdin(req *musterv1.ReadStdinRequest, stream musterv1.Agents_ReadStdinServer) error {
	relay, err := s.store.StdinReader(req.GetSession(), req.GetJobId())
	if err != nil {
		return rpcError(err)
	}
	defer relay.Leave(req.GetSession())
	for {
		data, err := relay.Read(stream.Context(), req.GetSession())
		switch {
		case err == io.EOF:
			return nil
		case errors.Is(err, rendezvous.ErrStdinClosed):
			return status.Error(codes.Aborted, err.Error())
		case err != nil:
			return rpcError(err)
		}
		if err := stream.Send(&musterv1.StdinChunk{Data: data}); err != nil {
			return err
		}
	}
}
