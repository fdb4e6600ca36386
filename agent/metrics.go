package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsServer serves the agent's Prometheus metrics at /metrics on the
// address listenMetrics took.
type metricsServer struct {
	srv *http.Server
	ln  net.Listener
	log *slog.Logger
}

// listenMetrics takes addr for the agent's Prometheus metrics, which Run
// then serves. Every figure is read when scraped, from the executor and the
// session, so there is nothing to keep in step: what the scrape shows is
// what the agent knows at that moment.
func (a *Agent) listenMetrics(addr string) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		gauge("podium_agent_running_tasks", "Task attempts this agent is running.",
			func() float64 { return float64(a.exec.Running()) }),
		gauge("podium_agent_free_slots", "Tasks this node would still accept (0 while draining or low on disk).",
			func() float64 { return float64(a.sess.Stats().FreeSlots) }),
		gauge("podium_agent_stream_connected", "1 while the stream to the coordinator is up.",
			func() float64 {
				if a.connected.Load() {
					return 1
				}
				return 0
			}),
		gauge("podium_agent_events_spooled", "Task events kept on disk until the coordinator acknowledges them.",
			func() float64 { return float64(a.sess.Stats().EventsSpooled) }),
		gauge("podium_agent_unacked_bytes", "Task events sent or waiting but not yet acknowledged, in bytes as --pending-memory counts them.",
			func() float64 { return float64(a.sess.Stats().UnackedBytes) }),
		counter("podium_agent_images_removed_total", "Images the agent removed because no task used them and the disk was short of space.",
			func() float64 { return float64(a.gc.Stats().Removed) }),
		counter("podium_agent_image_removed_bytes_total", "The sizes of the images the agent removed, as the engine reported them (layers shared with other images are not freed).",
			func() float64 { return float64(a.gc.Stats().Bytes) }),
		gauge("podium_agent_spool_bytes", "The spool's size on disk, which --pending-disk bounds.",
			func() float64 { return float64(a.sess.Stats().SpoolBytes) }),
	)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w (set --metrics-listen to a free address, or empty to turn metrics off)", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return &metricsServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:  ln,
		log: a.log,
	}, nil
}

// Run serves the metrics until ctx ends, then closes the server. A server
// that stops on its own is logged and Run returns nil: metrics are for
// watching the node, and losing them must not stop its tasks.
func (m *metricsServer) Run(ctx context.Context) error {
	m.log.Info("serving metrics", "addr", m.ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- m.srv.Serve(m.ln) }()
	var err error
	select {
	case <-ctx.Done():
		_ = m.srv.Close()
		err = <-served // http.ErrServerClosed: Close stopped it
	case err = <-served:
	}
	if !errors.Is(err, http.ErrServerClosed) {
		m.log.Warn("metrics server stopped", "err", err)
	}
	return nil
}
