package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/failure"
	musterv1 "github.com/musterhq/muster/proto/muster/v1"
	"github.com/musterhq/muster/rendezvous"
)

// Buckets of the store's histograms, in seconds: a round forms in
// milliseconds on idle nodes and in minutes when it waits for them; a loss
// is found within the node timeout (5 s by default, 1 s to 10 min).
var (
	waitBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800}
	lossBuckets = []float64{.1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 30, 60, 120, 600}
)

// StoreRecorder counts the store's events: it is the rendezvous.Recorder
// of a store whose metrics a registry serves. Its labels take fixed sets of
// values: no job ID, no node name.
type StoreRecorder struct {
	finished      *prometheus.CounterVec
	restarts      prometheus.Counter
	nodesLost     *prometheus.CounterVec
	workerExits   *prometheus.CounterVec
	submitToStart prometheus.Histogram
	round         prometheus.Histogram
	lossDetection *prometheus.HistogramVec
}

var _ rendezvous.Recorder = (*StoreRecorder)(nil)

// NewStoreRecorder registers the store's counters and histograms with reg.
func NewStoreRecorder(reg prometheus.Registerer) *StoreRecorder {
	r := &StoreRecorder{
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "jobs_finished_total",
			Help: "Jobs ended, by result: succeeded, worker_failed, node_lost, cancelled, not_run."}, []string{"result"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "job_restarts_total",
			Help: "Rounds stopped for a job's next round (a failure with restarts left, or a restart asked for)."}),
		nodesLost: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "nodes_lost_total",
			Help: "Nodes the store removed, by cause (gossip_dead, agent_gone, silent, session_expired, left, ...)."}, []string{"cause"}),
		workerExits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "worker_exits_total",
			Help: "Worker exits the store heard of, by cause: exited, exit_code, signal, stopped, not_started, node_lost."}, []string{"cause"}),
		submitToStart: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "job_submit_to_start_seconds",
			Help: "Time from a job's submission to its first round running.", Buckets: waitBuckets}),
		round: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "rendezvous_round_seconds",
			Help: "Time a round took from its start (waiting for nodes) to running (ports reserved, assignments sent).", Buckets: waitBuckets}),
		lossDetection: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "node_loss_detection_seconds",
			Help: "How long a lost node had been silent when its loss was decided, by cause.", Buckets: lossBuckets}, []string{"cause"}),
	}
	// Every result and cause reads 0 from the start, so that rate() sees
	// the first one.
	for _, res := range []string{rendezvous.ResultSucceeded, rendezvous.ResultWorkerFailed, rendezvous.ResultNodeLost,
		rendezvous.ResultCancelled, rendezvous.ResultNotRun} {
		r.finished.WithLabelValues(res)
	}
	for _, c := range []string{"exited", "exit_code", "signal", "stopped", "not_started", "node_lost"} {
		r.workerExits.WithLabelValues(c)
	}
	for v := range musterv1.LossSignal_name {
		switch sig := musterv1.LossSignal(v); sig {
		// Never a node's removal: a store's closing, a job's loss of one.
		case musterv1.LossSignal_LOSS_SIGNAL_UNSPECIFIED, musterv1.LossSignal_LOSS_SIGNAL_STORE_CLOSING,
			musterv1.LossSignal_LOSS_SIGNAL_JOB_FORGOTTEN:
		default:
			r.nodesLost.WithLabelValues(failure.LossCause(&musterv1.NodeLoss{Signal: sig}))
		}
	}
	reg.MustRegister(r.finished, r.restarts, r.nodesLost, r.workerExits, r.submitToStart, r.round, r.lossDetection)
	return r
}

func (r *StoreRecorder) JobFinished(result string) { r.finished.WithLabelValues(result).Inc() }

func (r *StoreRecorder) RoundRestarted() { r.restarts.Inc() }

func (r *StoreRecorder) NodeLost(loss *musterv1.NodeLoss) {
	cause := failure.LossCause(loss)
	r.nodesLost.WithLabelValues(cause).Inc()
	if ms := loss.GetSilentMs(); ms > 0 {
		r.lossDetection.WithLabelValues(cause).Observe(float64(ms) / 1000)
	}
}

func (r *StoreRecorder) WorkerExited(ex *musterv1.WorkerExited) {
	r.workerExits.WithLabelValues(failure.ExitCause(ex)).Inc()
}

func (r *StoreRecorder) JobStarted(waited time.Duration) { r.submitToStart.Observe(waited.Seconds()) }

func (r *StoreRecorder) RoundFormed(took time.Duration) { r.round.Observe(took.Seconds()) }

// storeCollector reads the store's state at each scrape: nodes by state,
// each node's GPUs, jobs by state.
type storeCollector struct {
	stats                   func() rendezvous.Stats
	nodes, gpus, free, jobs *prometheus.Desc
}

// NewStoreCollector is a collector of what stats returns at each scrape
// (rendezvous.Store.Stats). The node label takes the registered nodes'
// names: a gauge per node, as the cluster has nodes.
func NewStoreCollector(stats func() rendezvous.Stats) prometheus.Collector {
	return &storeCollector{
		stats: stats,
		nodes: prometheus.NewDesc(Namespace+"_nodes", "Registered nodes, by state: idle, busy, disconnected, suspect, leaving.", []string{"state"}, nil),
		gpus:  prometheus.NewDesc(Namespace+"_node_gpus", "GPUs a registered node offers.", []string{"node"}, nil),
		free:  prometheus.NewDesc(Namespace+"_node_gpus_free", "GPUs of a registered node no job holds.", []string{"node"}, nil),
		jobs: prometheus.NewDesc(Namespace+"_jobs", "Jobs the store holds (the last 1,000 ended among them), by state: "+
			"pending, running, stopping, succeeded, failed, cancelled.", []string{"state"}, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodes
	ch <- c.gpus
	ch <- c.free
	ch <- c.jobs
}

// jobStates are the states muster_jobs reports, each even when no job is in it.
var jobStates = []musterv1.JobState{musterv1.JobState_JOB_STATE_PENDING, musterv1.JobState_JOB_STATE_RUNNING,
	musterv1.JobState_JOB_STATE_STOPPING, musterv1.JobState_JOB_STATE_SUCCEEDED, musterv1.JobState_JOB_STATE_FAILED,
	musterv1.JobState_JOB_STATE_CANCELLED}

// JobStateLabel is a job state as muster_jobs labels it: "running".
func JobStateLabel(st musterv1.JobState) string {
	return strings.ToLower(strings.TrimPrefix(st.String(), "JOB_STATE_"))
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for state, n := range st.Nodes {
		ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(n), state)
	}
	// A name twice (an agent registering again while its old session
	// lingers) would make the scrape fail: the first one counts.
	seen := make(map[string]bool, len(st.GPUs))
	for _, g := range st.GPUs {
		if seen[g.Name] {
			continue
		}
		seen[g.Name] = true
		ch <- prometheus.MustNewConstMetric(c.gpus, prometheus.GaugeValue, float64(g.Total), g.Name)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(g.Free), g.Name)
	}
	for _, state := range jobStates {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(st.Jobs[state]), JobStateLabel(state))
	}
}
