package rendezvous

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	musterv1 "github.com/musterhq/muster/proto/muster/v1"
)

// The replicated log holds commands as musterv1.StoreCommand: a command's
// fields, each as a field, and its time.

// MarshalCommand encodes c for the replicated log.
func MarshalCommand(c Command) ([]byte, error) {
	m := &musterv1.StoreCommand{AtUnixNs: unixNs(*c.stamp())}
	switch c := c.(type) {
	case *SubmitJob:
		m.Command = &musterv1.StoreCommand_SubmitJob{SubmitJob: &musterv1.SubmitJobCommand{
			JobId: c.JobID, Token: c.Token, Spec: c.Spec, Owner: c.Owner}}
	case *PublishEvents:
		m.Command = &musterv1.StoreCommand_PublishEvents{PublishEvents: &musterv1.PublishEventsCommand{
			Session: c.Session, FirstSeq: c.FirstSeq, Events: c.Events}}
	case *CancelJob:
		m.Command = &musterv1.StoreCommand_CancelJob{CancelJob: &musterv1.CancelJobCommand{
			JobId: c.JobID, Force: c.Force, Reason: c.Reason, Code: c.Code}}
	case *RestartJob:
		m.Command = &musterv1.StoreCommand_RestartJob{RestartJob: &musterv1.RestartJobCommand{JobId: c.JobID, Reason: c.Reason}}
	case *CompleteRound:
		m.Command = &musterv1.StoreCommand_CompleteRound{CompleteRound: &musterv1.CompleteRoundCommand{
			Session: c.Session, RoundId: c.RoundID, Ports: c.Ports, Error: c.Error, Magic: c.Magic}}
	case *RecordHealth:
		m.Command = &musterv1.StoreCommand_RecordHealth{RecordHealth: &musterv1.RecordHealthCommand{
			Session: c.Session, JobId: c.JobID, RoundId: c.RoundID, Health: c.Health}}
	case *SignalJob:
		m.Command = &musterv1.StoreCommand_SignalJob{SignalJob: &musterv1.SignalJobCommand{
			JobId: c.JobID, Signal: c.Signal, CoalesceNs: int64(c.Coalesce)}}
	case *RegisterNode:
		m.Command = &musterv1.StoreCommand_RegisterNode{RegisterNode: &musterv1.RegisterNodeCommand{
			Session: c.Session, Info: c.Info, Key: c.Key, Jobs: c.Jobs, TorchStores: c.TorchStores, Forgotten: c.Forgotten}}
	case *LeaveNode:
		m.Command = &musterv1.StoreCommand_LeaveNode{LeaveNode: &musterv1.LeaveNodeCommand{Session: c.Session, Reason: c.Reason}}
	case *RemoveNode:
		m.Command = &musterv1.StoreCommand_RemoveNode{RemoveNode: &musterv1.RemoveNodeCommand{
			Session: c.Session, Loss: c.Loss, RenewedUnixNs: unixNs(c.Renewed)}}
	case *FireTimer:
		m.Command = &musterv1.StoreCommand_FireTimer{FireTimer: &musterv1.FireTimerCommand{
			JobId: c.JobID, RoundId: c.RoundID, Timer: int32(c.Timer), DeadlineUnixNs: unixNs(c.Deadline), Followed: c.Followed}}
	case *SetNodeSchedule:
		m.Command = &musterv1.StoreCommand_SetNodeSchedule{SetNodeSchedule: &musterv1.SetNodeScheduleCommand{
			Name: c.Name, Schedule: c.Schedule}}
	default:
		return nil, fmt.Errorf("command %T: not one the store knows", c)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

// UnmarshalCommand decodes a command from the replicated log.
func UnmarshalCommand(b []byte) (Command, error) {
	m := &musterv1.StoreCommand{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("store command: %w", err)
	}
	at := fromUnixNs(m.GetAtUnixNs())
	if at.IsZero() {
		return nil, fmt.Errorf("store command without its time")
	}
	var c Command
	switch x := m.GetCommand().(type) {
	case *musterv1.StoreCommand_SubmitJob:
		v := x.SubmitJob
		c = &SubmitJob{JobID: v.GetJobId(), Token: v.GetToken(), Spec: v.GetSpec(), Owner: v.GetOwner()}
	case *musterv1.StoreCommand_PublishEvents:
		v := x.PublishEvents
		c = &PublishEvents{Session: v.GetSession(), FirstSeq: v.GetFirstSeq(), Events: v.GetEvents()}
	case *musterv1.StoreCommand_CancelJob:
		v := x.CancelJob
		c = &CancelJob{JobID: v.GetJobId(), Force: v.GetForce(), Reason: v.GetReason(), Code: v.GetCode()}
	case *musterv1.StoreCommand_RestartJob:
		c = &RestartJob{JobID: x.RestartJob.GetJobId(), Reason: x.RestartJob.GetReason()}
	case *musterv1.StoreCommand_CompleteRound:
		v := x.CompleteRound
		c = &CompleteRound{Session: v.GetSession(), RoundID: v.GetRoundId(), Ports: v.GetPorts(), Error: v.GetError(), Magic: v.GetMagic()}
	case *musterv1.StoreCommand_RecordHealth:
		v := x.RecordHealth
		c = &RecordHealth{Session: v.GetSession(), JobID: v.GetJobId(), RoundID: v.GetRoundId(), Health: v.GetHealth()}
	case *musterv1.StoreCommand_SignalJob:
		v := x.SignalJob
		c = &SignalJob{JobID: v.GetJobId(), Signal: v.GetSignal(), Coalesce: time.Duration(v.GetCoalesceNs())}
	case *musterv1.StoreCommand_RegisterNode:
		v := x.RegisterNode
		if v.GetInfo() == nil {
			return nil, fmt.Errorf("store command: a registration without its node")
		}
		c = &RegisterNode{Session: v.GetSession(), Info: v.GetInfo(), Key: v.GetKey(), Jobs: v.GetJobs(),
			TorchStores: v.GetTorchStores(), Forgotten: v.GetForgotten()}
	case *musterv1.StoreCommand_LeaveNode:
		c = &LeaveNode{Session: x.LeaveNode.GetSession(), Reason: x.LeaveNode.GetReason()}
	case *musterv1.StoreCommand_RemoveNode:
		v := x.RemoveNode
		c = &RemoveNode{Session: v.GetSession(), Loss: v.GetLoss(), Renewed: fromUnixNs(v.GetRenewedUnixNs())}
	case *musterv1.StoreCommand_FireTimer:
		v := x.FireTimer
		c = &FireTimer{JobID: v.GetJobId(), RoundID: v.GetRoundId(), Timer: JobTimer(v.GetTimer()),
			Deadline: fromUnixNs(v.GetDeadlineUnixNs()), Followed: v.GetFollowed()}
	case *musterv1.StoreCommand_SetNodeSchedule:
		c = &SetNodeSchedule{Name: x.SetNodeSchedule.GetName(), Schedule: x.SetNodeSchedule.GetSchedule()}
	default:
		return nil, fmt.Errorf("store command of no kind the store knows")
	}
	*c.stamp() = at
	return c, nil
}

func unixNs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNs(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
