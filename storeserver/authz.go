package storeserver

import (
	"context"
	"crypto/subtle"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/security"
)

// caller is who made a call, as the store established it: from the Unix
// socket's peer credentials, the cluster token, or a job credential.
type caller struct {
	// operator is the cluster operator: the cluster token over TCP, or the
	// store's own user or root on the socket. Its jobs run as the agents'
	// own users.
	operator bool
	// user is another local user on the socket of a store that lets them
	// in; its jobs run as that user and it sees only its own jobs.
	user *musterv1.Identity
	// job is the job whose credential came with the call: the only job
	// whose KV and barriers the call may use.
	job string
}

type callerKey struct{}

func callerFrom(ctx context.Context) caller {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c
}

// What each kind of caller may call. Everything else needs only an
// authenticated caller, but for the health service, which needs none: it
// tells only whether the store serves, and probes (Kubernetes' gRPC
// probe, grpc_health_probe) carry no token.
var (
	agentMethods = map[string]bool{
		musterv1.Agents_Register_FullMethodName:          true,
		musterv1.Agents_Watch_FullMethodName:             true,
		musterv1.Agents_PortsReserved_FullMethodName:     true,
		musterv1.Agents_ReportLoss_FullMethodName:        true,
		musterv1.Agents_Renew_FullMethodName:             true,
		musterv1.Agents_Leave_FullMethodName:             true,
		musterv1.Agents_ReportHealth_FullMethodName:      true,
		musterv1.Agents_Publish_FullMethodName:           true,
		musterv1.Agents_PushLogs_FullMethodName:          true,
		musterv1.Agents_CheckTorchConns_FullMethodName:   true,
		musterv1.Agents_TorchConnsChecked_FullMethodName: true,
	}
	launcherMethods = map[string]bool{
		musterv1.Jobs_Submit_FullMethodName:            true,
		musterv1.Jobs_WatchJob_FullMethodName:          true,
		musterv1.Jobs_Cancel_FullMethodName:            true,
		musterv1.Jobs_Signal_FullMethodName:            true,
		musterv1.Jobs_ListNodes_FullMethodName:         true,
		musterv1.Jobs_ListJobs_FullMethodName:          true,
		musterv1.Jobs_WatchJobs_FullMethodName:         true,
		musterv1.Jobs_Logs_FullMethodName:              true,
		musterv1.Jobs_GetJob_FullMethodName:            true,
		musterv1.Replicas_ReplicaStatus_FullMethodName: true,
	}
	// operatorMethods change what the cluster does for everyone: the cluster
	// operator's alone, never another local user's.
	operatorMethods = map[string]bool{
		musterv1.Jobs_SetNodeSchedule_FullMethodName:    true,
		musterv1.Replicas_ChangeReplicas_FullMethodName: true,
	}
	workerMethods = map[string]bool{
		musterv1.KV_KVSet_FullMethodName:   true,
		musterv1.KV_KVGet_FullMethodName:   true,
		musterv1.KV_Barrier_FullMethodName: true,
	}
)

// authenticate establishes the caller of every call, loopback included.
func (s *Server) authenticate(ctx context.Context) (caller, error) {
	var c caller
	md, _ := metadata.FromIncomingContext(ctx)
	if toks := md.Get(security.JobTokenHeader); len(toks) > 0 {
		job, err := s.store.JobForToken(toks[0])
		if err != nil {
			return c, status.Error(codes.Unauthenticated, err.Error())
		}
		c.job = job
	}
	p, _ := peer.FromContext(ctx)
	if pc, ok := p.AuthInfo.(security.PeerCred); ok {
		switch {
		case pc.UID == s.uid || pc.UID == 0:
			c.operator = true
		case s.cfg.SocketUsers:
			c.user = pc.Identity()
		case c.job == "":
			return c, status.Errorf(codes.PermissionDenied, "uid %d may not use this store: it serves uid %d only", pc.UID, s.uid)
		}
		return c, nil
	}
	if s.token != nil {
		for _, got := range md.Get(security.TokenHeader) {
			if subtle.ConstantTimeCompare([]byte(got), s.token) == 1 {
				c.operator = true
			}
		}
	}
	if !c.operator && c.job == "" {
		return c, status.Error(codes.Unauthenticated, "missing or wrong cluster token")
	}
	return c, nil
}

// authorize says whether c may call method.
func authorize(method string, c caller) error {
	switch {
	case workerMethods[method] && c.job == "":
		return status.Error(codes.PermissionDenied, "the job's KV and barriers need its job credential (MUSTER_JOB_TOKEN, which every worker gets)")
	case agentMethods[method] && !c.operator:
		return status.Error(codes.PermissionDenied, "only the cluster operator's agents may register and take jobs")
	case operatorMethods[method] && !c.operator:
		return status.Error(codes.PermissionDenied, "only the cluster operator may cordon, drain or uncordon a node")
	case launcherMethods[method] && !c.operator && c.user == nil:
		return status.Error(codes.PermissionDenied, "a job credential reaches only its job's KV and barriers")
	}
	return nil
}

// healthService is the prefix of the standard health service's methods.
const healthService = "/grpc.health.v1.Health/"

func (s *Server) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if strings.HasPrefix(info.FullMethod, healthService) {
		return h(ctx, req)
	}
	c, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	if err := authorize(info.FullMethod, c); err != nil {
		return nil, err
	}
	if err := s.mayServe(info.FullMethod); err != nil {
		return nil, err
	}
	return h(context.WithValue(ctx, callerKey{}, c), req)
}

func (s *Server) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if strings.HasPrefix(info.FullMethod, healthService) {
		return h(srv, ss)
	}
	c, err := s.authenticate(ss.Context())
	if err != nil {
		return err
	}
	if err := authorize(info.FullMethod, c); err != nil {
		return err
	}
	if err := s.mayServe(info.FullMethod); err != nil {
		return err
	}
	ctx, cancel := s.whileLeading(ss.Context())
	defer cancel()
	return h(srv, callerStream{ServerStream: ss, ctx: context.WithValue(ctx, callerKey{}, c)})
}

type callerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s callerStream) Context() context.Context { return s.ctx }

// mayUseJob lets the operator use every job and a local user only their own.
func (s *Server) mayUseJob(c caller, jobID string) error {
	if c.operator {
		return nil
	}
	owner, err := s.store.JobOwner(jobID)
	if err != nil {
		return rpcError(err)
	}
	if c.user == nil || owner == nil || owner.GetUid() != c.user.GetUid() {
		return status.Errorf(codes.PermissionDenied, "job %s belongs to another user", jobID)
	}
	return nil
}

// jobScope is the KV scope of a worker's call: its job, named by its
// credential. A request may name that scope, or none, but never another.
func jobScope(ctx context.Context, requested string) (string, error) {
	c := callerFrom(ctx)
	if c.job == "" {
		return "", status.Error(codes.PermissionDenied, "no job credential")
	}
	if requested != "" && requested != c.job {
		return "", status.Error(codes.PermissionDenied,
			fmt.Sprintf("scope %q is not this job's: a job credential reaches only its own job's keys", requested))
	}
	return c.job, nil
}
