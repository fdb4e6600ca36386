// Package metrics is the coordinator's Prometheus instrumentation. Counters and
// histograms are updated where the work happens (ingest, heartbeat flushes,
// the bus, dispatch); the fleet's shape — tasks by state, nodes by status — is
// read from Postgres at scrape time, so every replica reports the same truth
// and nothing is double-counted across replicas.
package metrics

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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
	sqlReads        prometheus.Counter
	fleet           *fleet
	// token is what /metrics wants as a bearer token; "" for none.
	token string
}

// Config tunes the metrics.
type Config struct {
	// CacheFor is how long the gauges read from Postgres are served from the
	// last reading; DefaultCacheFor when 0.
	CacheFor time.Duration
	// Token, when set, is the bearer token /metrics wants
	// (Authorization: Bearer TOKEN); without it /metrics answers anyone.
	Token string
	// Now is the clock the cache goes by; time.Now when nil.
	Now func() time.Time
}

// New registers the instruments and the SQL-backed collector with the
// default Config. sessions reports how many node streams this replica holds.
func New(st *store.Store, sessions func() int, log *slog.Logger) *Metrics {
	return NewWith(Config{}, st, sessions, log)
}

// NewWith is New with a Config.
func NewWith(cfg Config, st *store.Store, sessions func() int, log *slog.Logger) *Metrics {
	if cfg.CacheFor <= 0 {
		cfg.CacheFor = DefaultCacheFor
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Metrics{reg: prometheus.NewRegistry(), token: cfg.Token}
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
	m.sqlReads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "podium_metrics_sql_reads_total",
		Help: "Times this replica read the fleet's gauges from Postgres; at most one per cache interval, however often /metrics is scraped."})
	m.fleet = &fleet{store: st, log: log, cacheFor: cfg.CacheFor, now: cfg.Now, reads: m.sqlReads}
	m.reg.MustRegister(m.logsArchived, m.archiveBytes, m.sqlReads)
	m.reg.MustRegister(m.dispatchLatency, m.eventsIngested, m.bytesIngested, m.flushSeconds, m.beatsWritten,
		m.busDeliveries, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "podium_node_sessions", Help: "Node streams held by this replica."},
			func() float64 { return float64(sessions()) }),
		m.fleet)
	return m
}

// Handler serves the metrics; with a token (Config.Token), only to requests
// that carry it.
func (m *Metrics) Handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	if m.token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(m.token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="podium metrics"`)
			http.Error(w, "/metrics wants the metrics token: send Authorization: Bearer followed by the content of the coordinator's "+
				"--metrics-token-file (PODIUM_METRICS_TOKEN_FILE); in Prometheus, authorization: {credentials_file: …} in the scrape config",
				http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// SQLReads is how many times the gauges were read from Postgres (the
// podium_metrics_sql_reads_total counter).
func (m *Metrics) SQLReads() int64 { return m.fleet.readCount.Load() }

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
	tasksDesc   = prometheus.NewDesc("podium_tasks", "Tasks by state, from Postgres.", []string{"state"}, nil)
	nodesDesc   = prometheus.NewDesc("podium_nodes", "Enrolled nodes by status, from Postgres.", []string{"status"}, nil)
	backlogDesc = prometheus.NewDesc("podium_log_archive_backlog",
		"Terminal tasks whose log is not (or no longer wholly) archived, from Postgres (its partial index).", nil, nil)
)

// DefaultCacheFor is how long the gauges read from Postgres are served from
// what was last read (Config.CacheFor).
const DefaultCacheFor = 5 * time.Second

// fleet reads the fleet's shape from Postgres for the gauges, at most once
// per cacheFor however often and however many at once scrape: /metrics
// answers anyone who reaches the port, and its queries run on the same small
// pool as the API, so a scraper in a tight loop (or many replicas' worth of
// them) must not become load on it. Concurrent scrapes of a stale reading
// wait for the one refresh under way and share it.
type fleet struct {
	store    *store.Store
	log      *slog.Logger
	cacheFor time.Duration
	now      func() time.Time
	reads    prometheus.Counter
	// readCount counts the reads as reads does, for SQLReads.
	readCount atomic.Int64

	mu      sync.Mutex
	readAt  time.Time
	read    bool // a reading was taken (readAt is its time)
	tasks   map[string]int64
	nodes   map[string]int64
	backlog int64
	fleetOK bool
	logOK   bool
}

// reading returns the cached reading, reading Postgres first when it is
// older than cacheFor.
func (f *fleet) reading() (tasks, nodes map[string]int64, backlog int64, fleetOK, logOK bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.read || f.now().Sub(f.readAt) >= f.cacheFor {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		f.reads.Inc()
		f.readCount.Add(1)
		var err error
		f.tasks, f.nodes, err = f.store.FleetCounts(ctx)
		if f.fleetOK = err == nil; err != nil {
			f.log.Warn("metrics: read the fleet from Postgres", "err", err)
		}
		f.backlog, err = f.store.ArchiveBacklog(ctx)
		if f.logOK = err == nil; err != nil {
			f.log.Warn("metrics: read the log archive backlog from Postgres", "err", err)
		}
		f.read, f.readAt = true, f.now()
	}
	return f.tasks, f.nodes, f.backlog, f.fleetOK, f.logOK
}

func (f *fleet) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- nodesDesc
	ch <- backlogDesc
}

func (f *fleet) Collect(ch chan<- prometheus.Metric) {
	tasks, nodes, backlog, fleetOK, logOK := f.reading()
	if fleetOK {
		for _, s := range []string{store.Queued, store.Scheduled, store.Provisioning, store.Running,
			store.Succeeded, store.Failed, store.Cancelled, store.Lost} {
			ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(tasks[s]), s)
		}
		for _, s := range []string{"online", "unreachable", "offline"} {
			ch <- prometheus.MustNewConstMetric(nodesDesc, prometheus.GaugeValue, float64(nodes[s]), s)
		}
	}
	if logOK {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(backlog))
	}
}
