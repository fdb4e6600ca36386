// Package metrics is the coordinator's Prometheus instrumentation. Counters and
// histograms are updated where the work happens (ingest, heartbeat flushes,
// the bus, dispatch); the fleet's shape — tasks by state, nodes by status — is
// read from Postgres at scrape time, so every replica reports the same truth
// and nothing is double-counted across replicas.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/podiumhq/podium/coordinator/store"
)

// Metrics holds the coordinator's instruments. A nil *Metrics is valid and
// records nothing, so packages can be used without it (in tests, for one).
type Metrics struct {
	reg *prometheus.Registry

	dispatchLatency prometheus.Histogram
	eventsIngested  prometheus.Counter
	bytesIngested   prometheus.Counter
	flushSeconds    prometheus.Histogram
	beatsWritten    prometheus.Counter
	busDeliveries   *prometheus.CounterVec
	logsArchived    prometheus.Counter
	archiveBytes    prometheus.Counter
}

// New registers the instruments and the SQL-backed collector. sessions reports
// how many node streams this replica holds.
func New(st *store.Store, sessions func() int, log *slog.Logger) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.dispatchLatency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "podium_dispatch_latency_seconds",
		Help:    "Time from a task's submission to its assignment to a node (first attempts).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})
	m.eventsIngested = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "podium_events_ingested_total", Help: "Task events from nodes stored by this replica."})
	m.bytesIngested = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "podium_log_bytes_ingested_total", Help: "Bytes of task output stored by this replica."})
	m.flushSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "podium_heartbeat_flush_seconds",
		Help:    "Time to write one flush of buffered heartbeats (one statement for all of this replica's nodes).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	m.beatsWritten = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "podium_heartbeats_written_total", Help: "Node heartbeats written by this replica's flushes."})
	m.busDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "podium_bus_deliveries_total", Help: "NOTIFY doorbells received by this replica, by channel."},
		[]string{"channel"})
	m.logsArchived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "podium_log_archives_total", Help: "Task logs archived (or re-archived) by this replica's log archive job."})
	m.archiveBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "podium_log_archive_bytes_total", Help: "Compressed bytes of the log archives this replica's job wrote."})
	m.reg.MustRegister(m.logsArchived, m.archiveBytes, &archiveBacklog{store: st, log: log})
	m.reg.MustRegister(m.dispatchLatency, m.eventsIngested, m.bytesIngested, m.flushSeconds, m.beatsWritten,
		m.busDeliveries, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "podium_node_sessions", Help: "Node streams held by this replica."},
			func() float64 { return float64(sessions()) }),
		&fleet{store: st, log: log})
	return m
}

// Handler serves the metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Dispatched records a task's submit→assign latency.
func (m *Metrics) Dispatched(d time.Duration) {
	if m != nil {
		m.dispatchLatency.Observe(d.Seconds())
	}
}

// Ingested records stored events and the output bytes among them.
func (m *Metrics) Ingested(events, bytes int) {
	if m != nil {
		m.eventsIngested.Add(float64(events))
		m.bytesIngested.Add(float64(bytes))
	}
}

// Flushed records one heartbeat flush.
func (m *Metrics) Flushed(d time.Duration, written int64) {
	if m != nil {
		m.flushSeconds.Observe(d.Seconds())
		m.beatsWritten.Add(float64(written))
	}
}

// Archived records one task log archived, of size compressed bytes.
func (m *Metrics) Archived(size int64) {
	if m != nil {
		m.logsArchived.Inc()
		m.archiveBytes.Add(float64(size))
	}
}

// Delivered records a doorbell received on channel.
func (m *Metrics) Delivered(channel string) {
	if m != nil {
		m.busDeliveries.WithLabelValues(channel).Inc()
	}
}

var (
	tasksDesc = prometheus.NewDesc("podium_tasks", "Tasks by state, from Postgres.", []string{"state"}, nil)
	nodesDesc = prometheus.NewDesc("podium_nodes", "Enrolled nodes by status, from Postgres.", []string{"status"}, nil)
)

// fleet reads the tables at scrape time.
type fleet struct {
	store *store.Store
	log   *slog.Logger
}

func (f *fleet) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- nodesDesc
}

func (f *fleet) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tasks, nodes, err := f.store.FleetCounts(ctx)
	if err != nil {
		f.log.Warn("metrics: read the fleet from Postgres", "err", err)
		return
	}
	for _, s := range []string{store.Queued, store.Scheduled, store.Provisioning, store.Running,
		store.Succeeded, store.Failed, store.Cancelled, store.Lost} {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(tasks[s]), s)
	}
	for _, s := range []string{"online", "unreachable", "offline"} {
		ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(nodes[s]), s)
	}
}

var backlogDesc = prometheus.NewDesc("podium_log_archive_backlog",
	"Terminal tasks whose log is not (or no longer wholly) archived, from Postgres (its partial index).", nil, nil)

// archiveBacklog reads the log archive job's queue at scrape time.
type archiveBacklog struct {
	store *store.Store
	log   *slog.Logger
}

func (a *archiveBacklog) Describe(ch chan<- *prometheus.Desc) { ch <- backlogDesc }

func (a *archiveBacklog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := a.store.ArchiveBacklog(ctx)
	if err != nil {
		a.log.Warn("metrics: read the log archive backlog from Postgres", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(n))
}
