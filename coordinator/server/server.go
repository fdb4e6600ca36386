// Package server wires a coordinator replica together: the HTTP listener
// (HTTP/1.1 and HTTP/2 cleartext), authentication, the three Connect services,
// health endpoints, the background loops and the leader's workers, and shuts
// them down in the order Run documents.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/errgroup"

	"github.com/podiumhq/podium/coordinator/access"
	"github.com/podiumhq/podium/coordinator/admin"
	"github.com/podiumhq/podium/coordinator/aptrepo"
	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/bus"
	"github.com/podiumhq/podium/coordinator/console"
	"github.com/podiumhq/podium/coordinator/cron"
	"github.com/podiumhq/podium/coordinator/dispatch"
	"github.com/podiumhq/podium/coordinator/downloads"
	"github.com/podiumhq/podium/coordinator/enroll"
	"github.com/podiumhq/podium/coordinator/ingest"
	"github.com/podiumhq/podium/coordinator/leader"
	"github.com/podiumhq/podium/coordinator/lease"
	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/metrics"
	"github.com/podiumhq/podium/coordinator/nodes"
	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/coordinator/secrets"
	"github.com/podiumhq/podium/coordinator/store"
	"github.com/podiumhq/podium/coordinator/tailnet"
	"github.com/podiumhq/podium/coordinator/tailnet/join"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/coordinator/watchdog"
	"github.com/podiumhq/podium/coordinator/webhooks"
	"github.com/podiumhq/podium/internal/ids"
	"github.com/podiumhq/podium/internal/version"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/proto/podium/v1/podiumv1connect"
	"github.com/podiumhq/podium/schema"
)

// Config is a replica's configuration.
type Config struct {
	DatabaseURL string
	// Listen is the address to serve on; loopback unless AllowNonLoopback.
	// On the tailnet transports only its port is used.
	Listen string
	// AllowNonLoopback permits a non-loopback Listen in the local transport
	// (in a container, where the port is published deliberately).
	AllowNonLoopback bool
	// Token is the bearer token API callers must present (local transport);
	// at least MinTokenBytes long.
	Token string
	// TLSCertFile and TLSKeyFile are a PEM certificate (with its chain) and
	// its key; with them the local transport serves HTTPS. They are read
	// again when they change, so a renewed certificate needs no restart.
	TLSCertFile, TLSKeyFile string
	// InsecurePlaintext lets the local transport serve plain HTTP on a
	// non-loopback address, for when something else encrypts the traffic.
	InsecurePlaintext bool
	// MaxConnections bounds the connections served at once, across all
	// listeners; DefaultMaxConnections when 0.
	MaxConnections int
	// Shed bounds the people's API calls served at once and sheds them near
	// the memory limit (shed.go).
	Shed ShedConfig
	// BodyReadTimeout bounds how long a request's body may take to arrive
	// (the node stream and artifact uploads excepted);
	// DefaultBodyReadTimeout when 0.
	BodyReadTimeout time.Duration
	// IdleTimeout closes connections idle for this long; DefaultIdleTimeout
	// when 0.
	IdleTimeout time.Duration
	// PostgresLostAfter is how long this replica's lease connection to
	// Postgres may be down before it ends its node streams and refuses calls, so that nodes and
	// clients go to a replica that reaches it (DefaultPostgresLostAfter).
	PostgresLostAfter time.Duration
	// Transport is TransportLocal (the default), TransportTailnet or
	// TransportHost; see transport.go.
	Transport string
	Tailnet   TailnetConfig
	// Advertise is the URL nodes are told to reach this replica at; defaults to
	// http://<Listen>.
	Advertise string
	// PublicURL is the URL people reach the coordinator at, when that is not
	// Listen's address: a proxy's or a load balancer's. Its host is one the
	// API and the console answer for (hosts.go), and when it is https the
	// console's cookies are Secure though the proxy speaks plain HTTP here.
	PublicURL string
	// AllowedHosts are more host names (or addresses) the API and the
	// console answer for, besides PublicURL's, Advertise's, loopback and the
	// tailnet's names of this replica (hosts.go).
	AllowedHosts []string
	// MetricsTokenFile, when set, is a file whose content /metrics wants as
	// a bearer token (metrics.Handler).
	MetricsTokenFile string
	// ReplicaID names this replica; a fresh id by default.
	ReplicaID string
	// Thresholds are the ones given explicitly (flags); they are stored for
	// every replica, and zero fields are read from what is stored (see
	// Thresholds). Non-zero thresholds in Watchdog and Dispatch count as
	// given too.
	Thresholds Thresholds
	Nodes      nodes.Config
	Enroll     enroll.Config
	Watchdog   watchdog.Config
	Dispatch   dispatch.Config
	Leader     leader.Config
	// Artifacts is the object store task artifacts go to; with no endpoint,
	// uploads are refused as not configured and everything else works.
	Artifacts artifacts.Config
	// Archive is the leader's log archive job (coordinator/logarchive):
	// terminal tasks' logs leave task_events for one compressed archive in
	// the object store, or in Postgres without one.
	Archive logarchive.Config
	// SecretsKeyFile is the file of 32 random bytes stored secrets are
	// sealed under (package coordinator/secrets). Without one secrets cannot
	// be set, and the replica refuses to start while any are stored.
	SecretsKeyFile string
	// Retention is how long tasks, logs, artifacts and audit rows are kept
	// (package coordinator/retention); the leader applies its own.
	Retention retention.Config
	// Schedules is the leader's job that fires periodic tasks' ticks.
	Schedules cron.Config
	// MaxMemberPriority is the highest spec.priority a member may give
	// (tasks.Bounds), at submit, rerun, schedule create and every tick; the
	// zero value is the default, tasks.DefaultMaxMemberPriority. It
	// replaces Schedules.Bounds.
	MaxMemberPriority int32
	// QueueTimeout is how long a task whose spec gives no queue_timeout
	// may wait queued for a node (--queue-timeout), applied by the replica
	// it is submitted to (and, for a schedule's ticks, the leader); 0 for
	// ever. It replaces Schedules.Defaults.
	QueueTimeout time.Duration
	// Notify is the webhook delivery worker every replica runs.
	Notify notify.Config
	// NoConsole turns off the web console (package coordinator/console),
	// which is otherwise served at /console/.
	NoConsole bool
	// Apt is the apt repository of the agent's packages served at /apt/
	// (package coordinator/aptrepo); none when its directory has no .debs.
	Apt aptrepo.Config
	// DownloadDir holds the podium CLI's static binaries (podium-OS-ARCH),
	// served with their SHA-256 at /download/ (package
	// coordinator/downloads); none when it has none.
	DownloadDir string
	Logger      *slog.Logger
}

// Server is one running coordinator replica.
type Server struct {
	cfg Config
	// optional says which of the replica's optional parts are on, as
	// /readyz lists them.
	optional  string
	log       *slog.Logger
	store     *store.Store
	bus       *bus.Bus
	leases    *lease.Keeper
	pg        *pgLink
	nodes     *nodes.Service
	ingest    *ingest.Ingester
	leader    *leader.Elector
	tasks     *tasks.Service
	artifacts *artifacts.Service
	notify    *notify.Worker
	http      *http.Server
	// listeners are the transport's: one on loopback, or the tailnet's.
	listeners []net.Listener
	conns     *connLimit
	certs     *certFiles // the local transport's TLS certificate, if any
	// downloads are the CLI binaries served at /download/; nil, and
	// downloadsOff why, when there are none.
	downloads    *downloads.Set
	downloadsOff string
	addr         string
	scheme       string         // of URL: http, or https when the local transport serves TLS
	endpoint     *join.Endpoint // nil on the local transport
	// notReady is what /readyz last said was wrong, so that the log says
	// it once when it starts and once when it ends, not on every probe.
	readyMu  sync.Mutex
	notReady string
	// nodeAuth and apiAuth identify the callers of the node API and of the
	// task and admin APIs, as the transport allows.
	nodeAuth, apiAuth connect.HandlerOption
}

// nodeService is podium.v1.NodeService: enrollment is coordinator/enroll's,
// the stream and artifact uploads coordinator/nodes'.
type nodeService struct {
	*nodes.Service
	enrollment *enroll.Service
}

func (n nodeService) Enroll(ctx context.Context, req *connect.Request[podiumv1.EnrollRequest]) (*connect.Response[podiumv1.EnrollResponse], error) {
	return n.enrollment.Enroll(ctx, req)
}

// compressLarge leaves small messages uncompressed. Most of what crosses a
// node stream or the API is a few dozen bytes (an ack, a status change, an
// assignment) that gzip cannot shrink, and setting up a compressor for each was
// a tenth of a busy replica's CPU; log chunks and listings still compress.
var compressLarge = connect.WithCompressMinBytes(1024)

// New connects to Postgres, applies migrations and builds the replica. Nothing
// is served until Run.
func New(ctx context.Context, cfg Config) (*Server, error) {
	pre, err := checkConfig(&cfg)
	if err != nil {
		return nil, err
	}
	log := pre.log
	if err := Migrate(ctx, cfg.DatabaseURL, log); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	s, err := build(ctx, cfg, pre, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return s, nil
}

// prepared is what New reads and checks before it touches Postgres: a
// mistake in the configuration (a file that does not load, a bad host, a
// retention that cannot work) is found before anything is changed.
type prepared struct {
	log          *slog.Logger
	metricsToken string
	certs        *certFiles
	secretsKey   *secrets.Key
}

// checkConfig checks cfg, fills in the defaults that need nothing but cfg,
// and loads the files it names.
func checkConfig(cfg *Config) (prepared, error) {
	var pre prepared
	if cfg.DatabaseURL == "" {
		return pre, errors.New("no database: set PODIUM_DATABASE_URL (or --database) to a Postgres URL")
	}
	if err := checkTransport(cfg); err != nil {
		return pre, err
	}
	if err := cfg.Retention.Check(); err != nil {
		return pre, err
	}
	if err := cfg.Notify.Check(); err != nil {
		return pre, err
	}
	if err := checkHosts(cfg.PublicURL, cfg.AllowedHosts); err != nil {
		return pre, err
	}
	if err := cfg.Archive.Check(); err != nil {
		return pre, err
	}
	if err := (tasks.Defaults{QueueTimeout: cfg.QueueTimeout}).Check(); err != nil {
		return pre, err
	}
	var err error
	if cfg.MetricsTokenFile != "" {
		if pre.metricsToken, err = loadMetricsToken(cfg.MetricsTokenFile); err != nil {
			return pre, err
		}
	}
	pre.log = cfg.Logger
	if pre.log == nil {
		pre.log = slog.Default()
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = ids.New("replica")
	}
	pre.log = pre.log.With("replica", cfg.ReplicaID)
	if cfg.TLSCertFile != "" {
		if pre.certs, err = loadCertFiles(cfg.TLSCertFile, cfg.TLSKeyFile, pre.log); err != nil {
			return pre, err
		}
	}
	if cfg.SecretsKeyFile != "" {
		if pre.secretsKey, err = secrets.LoadKeyFile(cfg.SecretsKeyFile); err != nil {
			return pre, err
		}
	}
	if cfg.Nodes.HeartbeatInterval == 0 {
		cfg.Nodes.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.BodyReadTimeout <= 0 {
		cfg.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	return pre, nil
}

// build makes the replica on an open, migrated store: what every replica
// must agree on is settled with the others first, then the parts are made,
// then the routes that serve them.
func build(ctx context.Context, cfg Config, pre prepared, st *store.Store) (*Server, error) {
	log := pre.log
	if err := secrets.CheckStartup(ctx, pre.secretsKey, st); err != nil {
		return nil, err
	}
	vault := secrets.NewVault(pre.secretsKey, st)
	apt, aptOff, err := aptrepo.Load(ctx, cfg.Apt, st, vault, log)
	if err != nil {
		return nil, err
	}
	dl, dlOff, err := downloads.Load(cfg.DownloadDir, log)
	if err != nil {
		return nil, err
	}
	if err := settle(ctx, &cfg, st, log); err != nil {
		return nil, err
	}
	arts, err := artifacts.New(cfg.Artifacts, st, log)
	if err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	s := &Server{cfg: cfg, log: log, store: st, artifacts: arts, conns: newConnLimit(cfg.MaxConnections), certs: pre.certs,
		optional: optionalParts(cfg, pre, apt != nil, aptOff, dl != nil, dlOff), downloads: dl, downloadsOff: dlOff}
	if err := s.openTransport(ctx); err != nil {
		return nil, err
	}
	p := s.makeParts(pre.metricsToken, vault)
	handler := s.routes(p, apt, aptOff)
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP2(true) // the TLS listeners
	// No ReadTimeout or WriteTimeout: they would end node streams, which
	// last for hours. bodyLimits bounds a body's arrival instead, and the
	// streams' heartbeats their silence.
	s.http = &http.Server{Handler: handler, Protocols: &protocols,
		ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: s.cfg.IdleTimeout, ConnState: s.conns.connState,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	if p.console != nil {
		s.http.RegisterOnShutdown(p.console.Shutdown)
	}
	return s, nil
}

// settle fixes what every replica must agree on (the health and delivery
// thresholds, stored in Postgres) and what depends on Postgres itself (how
// many nodes this replica may hold: each is an advisory lock).
func settle(ctx context.Context, cfg *Config, st *store.Store, log *slog.Logger) error {
	given := cfg.Thresholds.Or(Thresholds{UnreachableAfter: cfg.Watchdog.UnreachableAfter, OfflineAfter: cfg.Watchdog.OfflineAfter,
		AckDeadline: cfg.Dispatch.AckDeadline, WriteOffAfter: cfg.Dispatch.WriteOffAfter})
	th, err := settleThresholds(ctx, st, cfg.ReplicaID, given, cfg.Nodes.HeartbeatInterval, log)
	if err != nil {
		return err
	}
	cfg.Thresholds = th
	cfg.Watchdog.UnreachableAfter, cfg.Watchdog.OfflineAfter = th.UnreachableAfter, th.OfflineAfter
	cfg.Dispatch.AckDeadline, cfg.Dispatch.WriteOffAfter = th.AckDeadline, th.WriteOffAfter
	cfg.Dispatch.UnreachableAfter = th.UnreachableAfter
	if cfg.Nodes.MaxNodes == 0 {
		locks, err := st.LockTableSize(ctx)
		if err != nil {
			return fmt.Errorf("read the size of Postgres's lock table (max_locks_per_transaction): %w", err)
		}
		cfg.Nodes.MaxNodes = max(locks/2, 1)
		log.Info("nodes: this replica holds at most half of Postgres's lock table in nodes (PODIUM_MAX_NODES to set it)",
			"max_nodes", cfg.Nodes.MaxNodes, "lock_table", locks)
	}
	cfg.Nodes.Replica = cfg.ReplicaID
	cfg.Schedules.Bounds = tasks.Bounds{MaxMemberPriority: cfg.MaxMemberPriority}
	cfg.Schedules.Defaults = tasks.Defaults{QueueTimeout: cfg.QueueTimeout}
	return nil
}

// parts are the services the routes serve, made by makeParts.
type parts struct {
	metrics    *metrics.Metrics
	vault      *secrets.Vault
	enrollment *enroll.Service
	admin      *admin.Service
	schedules  *cron.Service
	webhooks   *webhooks.Service
	console    *console.Console // nil with --console=false
}

// makeParts makes the replica's parts, each given everything it works with
// when it is made, in the order they depend on each other; only the
// sessions' registry comes first, because the metrics count its sessions and
// the node service records into the metrics.
func (s *Server) makeParts(metricsToken string, vault *secrets.Vault) parts {
	cfg, st, arts, log := s.cfg, s.store, s.artifacts, s.log
	sessions := nodes.NewRegistry()
	// The lease keeper is made below; the link asks it once it runs.
	s.pg = newPGLink(func() error { return s.leases.Ready() }, sessions, cfg.PostgresLostAfter, log)
	m := metrics.NewWith(metrics.Config{Token: metricsToken}, st, sessions.Len, log)
	s.bus = bus.New(bus.Config{DatabaseURL: cfg.DatabaseURL, Channels: []string{
		store.ChannelNodeCommands, store.ChannelTaskEvents, store.ChannelSubmit, store.ChannelTakeover, store.ChannelReplicas, leader.Channel}},
		bus.Deps{Metrics: m, Log: log})
	s.leases = lease.NewKeeper(cfg.DatabaseURL, log)
	s.ingest = ingest.New(ingest.Deps{Store: st, Metrics: m, Log: log})
	s.nodes = nodes.NewService(cfg.Nodes, nodes.Deps{Store: st, Bus: s.bus, Leases: s.leases, Registry: sessions,
		Ingester: s.ingest, Metrics: m, Artifacts: arts, Secrets: vault, Log: log})
	// The leader-only workers. The retention job and its object sweeper
	// always run: they are what keeps the database and the bucket from
	// growing forever.
	workers := []leader.Worker{
		dispatch.New(cfg.Dispatch, dispatch.Deps{Store: st, Bus: s.bus, Metrics: m, Log: log}),
		watchdog.New(cfg.Watchdog, watchdog.Deps{Store: st, Log: log}),
		retention.NewJob(cfg.Retention, retention.Deps{Store: st, Log: log}),
		retention.NewSweeper(cfg.Retention, retention.Deps{Store: st, Objects: arts, Log: log}),
		cron.NewTicker(cfg.Schedules, cron.Deps{Store: st, Log: log})}
	if !cfg.Archive.Disabled {
		workers = append(workers, logarchive.New(cfg.Archive, logarchive.Deps{Store: st, Objects: arts, Metrics: m, Log: log}))
	}
	s.leader = leader.New(cfg.Leader, leader.Deps{Leases: s.leases, Bus: s.bus, Store: st, Log: log}, workers...)
	s.tasks = tasks.NewService(tasks.Deps{Store: st, Bus: s.bus, Artifacts: arts, Archive: logarchive.NewReader(st, arts), Log: log,
		Bounds: cfg.Schedules.Bounds, Defaults: cfg.Schedules.Defaults})
	s.notify = notify.New(cfg.Notify, notify.Deps{Store: st, Secrets: vault, Log: log})
	p := parts{metrics: m, vault: vault,
		enrollment: enroll.New(cfg.Enroll, enroll.Deps{Store: st, Log: log}),
		admin:      admin.NewService(admin.Config{Transport: cfg.Transport}, admin.Deps{Store: st, Secrets: vault, Log: log}),
		schedules:  cron.NewService(cfg.Schedules, cron.Deps{Store: st, Log: log}),
		webhooks:   webhooks.NewService(webhooks.Deps{Store: st, Vault: vault, Log: log})}
	if !cfg.NoConsole {
		p.console = console.New(s.consoleConfig(), console.Deps{Store: st, Tasks: s.tasks, Admin: p.admin, Schedules: p.schedules,
			Webhooks: p.webhooks, Artifacts: arts, Bus: s.bus, Log: log})
	}
	return p
}

// routes is the replica's HTTP handler: the Connect services, health, the
// metrics, the console and the apt repository, behind the guards every
// request passes (token, Postgres link, host, body limits, shedding).
func (s *Server) routes(p parts, apt *aptrepo.Repo, aptOff string) http.Handler {
	cfg, st, log := s.cfg, s.store, s.log
	mux := http.NewServeMux()
	people := connect.WithHandlerOptions(s.apiAuth, compressLarge, readLimits(PeopleReadMaxBytes), tasks.StrictJSON())
	mux.Handle(podiumv1connect.NewNodeServiceHandler(nodeService{Service: s.nodes, enrollment: p.enrollment},
		connect.WithHandlerOptions(s.nodeAuth, compressLarge, readLimits(NodeReadMaxBytes))))
	mux.Handle(podiumv1connect.NewTaskServiceHandler(s.tasks, people))
	mux.Handle(podiumv1connect.NewAdminServiceHandler(p.admin, people))
	mux.Handle(podiumv1connect.NewScheduleServiceHandler(p.schedules, people))
	mux.Handle(podiumv1connect.NewWebhookServiceHandler(p.webhooks, people))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.readyz)
	// /metrics is unauthenticated like /healthz unless --metrics-token-file
	// is set: it says how busy the fleet is, never what any task is. Its
	// SQL-read gauges are cached (metrics.DefaultCacheFor), so scraping it
	// costs the API's pool at most one read per interval.
	mux.Handle("GET /metrics", p.metrics.Handler())
	if p.console != nil {
		mux.Handle("/console/", p.console)
		mux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusSeeOther))
	}
	// The apt repository and its install script need no token, on any
	// transport: packages and the public key are public, and apt has no
	// way to present one. The token gate and the API's handler options
	// only guard the API's paths.
	if apt != nil {
		mux.Handle("GET "+aptrepo.Prefix, apt)
		mux.Handle("GET "+aptrepo.InstallPath, apt.InstallHandler())
	} else {
		off := aptrepo.Unserved(aptOff)
		mux.Handle("GET "+aptrepo.Prefix, off)
		mux.Handle("GET "+aptrepo.InstallPath, off)
	}
	// The CLI's binaries are public too: they are what a person installs
	// before they have anything to present.
	if s.downloads != nil {
		mux.Handle("GET "+downloads.Prefix, s.downloads)
	} else {
		mux.Handle("GET "+downloads.Prefix, downloads.Unserved(s.downloadsOff))
	}
	var handler http.Handler = mux
	if cfg.Transport == TransportLocal {
		handler = newTokenGate(cfg.Token, st, handler)
	}
	// Outside the token gate, which may ask Postgres who a token is.
	handler = s.pg.guard(handler)
	guard := newHostGuard(s.ownHosts(), handler, log)
	log.Info("the API and the console answer for these hosts only (--public-url, --allowed-host to add one)", "hosts", guard.Names())
	handler = guard
	handler = bodyLimits(handler, cfg.BodyReadTimeout)
	return newShedder(cfg.Shed, handler, log)
}

// ownHosts are the names this replica answers people for besides loopback:
// the public URL's, the advertised URL's, the address it listens on when
// that is one address, the tailnet's names, and those allowed explicitly.
func (s *Server) ownHosts() []string {
	hosts := append([]string{s.cfg.PublicURL, s.cfg.Advertise}, s.cfg.AllowedHosts...)
	if h, _, err := net.SplitHostPort(s.addr); err == nil {
		if ip := net.ParseIP(h); ip == nil || !ip.IsUnspecified() {
			hosts = append(hosts, h)
		}
	}
	if s.endpoint != nil {
		hosts = append(hosts, s.endpoint.URL)
		hosts = append(hosts, s.endpoint.Names...)
	}
	return hosts
}

// consoleConfig identifies the console's callers as the API's are: on the
// tailnet with the same policy and role resolver (transport.go), on the local
// transport by the token, which the console's sign-in takes.
func (s *Server) consoleConfig() console.Config {
	cc := console.Config{Transport: s.cfg.Transport, Token: s.cfg.Token, PublicURL: s.cfg.PublicURL, CLIDownloads: s.downloads != nil,
		Optional: s.optional}
	if s.endpoint != nil {
		t := s.cfg.Tailnet
		cc.Token = ""
		cc.Policy = &tailnet.Policy{WhoIs: s.endpoint.WhoIs, NodeTag: t.NodeTag, AllowUntaggedNodes: t.AllowUntaggedNodes, Log: s.log}
		cc.Resolver = &access.Resolver{Users: s.store, DefaultRole: access.Role(t.DefaultRole), AllowUntaggedNodes: t.AllowUntaggedNodes}
	}
	return cc
}

// Migrate applies the schema on a direct connection.
func Migrate(ctx context.Context, url string, log *slog.Logger) error {
	conn, err := store.ConnectDirect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to Postgres to migrate: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		log.Info("schema migrated", "applied", applied)
	}
	unknown, err := schema.Unknown(ctx, conn)
	if err != nil {
		return err
	}
	if len(unknown) > 0 {
		log.Warn("the database holds migrations this build does not know: a newer release migrated it. "+
			"This build runs beside the next release's replicas while a rolling upgrade goes on; finish the upgrade "+
			"(docs/operations.md, \"Upgrades\"), and do not run a build older than the release before the newest one here",
			"unknown", unknown, "version", version.Version)
	}
	return nil
}

// checkListen refuses a non-loopback address unless allow, and says whether
// the address is loopback.
func checkListen(addr string, allow bool) (loopback bool, err error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w (want host:port, e.g. 127.0.0.1:7070)", addr, err)
	}
	ip := net.ParseIP(host)
	loopback = host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && !allow {
		return false, fmt.Errorf("listen address %q is not loopback: the local transport answers anyone who presents the token, "+
			"so it stays on this machine unless you pass --allow-non-loopback (for example inside a container, with TLS)", addr)
	}
	return loopback, nil
}

// Addr is the address the replica listens on (on the tailnet, its cleartext
// listener's).
func (s *Server) Addr() string { return s.addr }

// URL is the replica's base URL: https:// when the local transport serves
// TLS.
func (s *Server) URL() string { return s.scheme + "://" + s.Addr() }

// Advertise is the URL nodes are told to reach this replica at: on the
// tailnet, its HTTPS name when it has a certificate.
func (s *Server) Advertise() string { return s.cfg.Advertise }

// ReplicaID is this replica's id.
func (s *Server) ReplicaID() string { return s.cfg.ReplicaID }

// Store is the replica's store (for tests and tools in this module).
func (s *Server) Store() *store.Store { return s.store }

// Nodes is the replica's node service.
func (s *Server) Nodes() *nodes.Service { return s.nodes }

// Leading reports whether this replica is the scheduling and watchdog leader.
func (s *Server) Leading() bool { return s.leader.Leading() }

// Artifacts is the replica's artifact store.
func (s *Server) Artifacts() *artifacts.Service { return s.artifacts }

// Thresholds are the thresholds the replica read from Postgres when it
// started; the leader reads them again on every sweep.
func (s *Server) Thresholds() Thresholds { return s.cfg.Thresholds }

// Leases is the replica's lease keeper.
func (s *Server) Leases() *lease.Keeper { return s.leases }

// readyz says whether the replica can do its work, and if not which of its
// dependencies is down. Not why: the driver's error names hosts, socket paths
// and users, and /readyz answers anyone who can reach the port; the reason
// goes to the log.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	what, reason := "", ""
	if err := s.store.Ping(ctx); err != nil {
		what, reason = "Postgres does not answer", store.Explain(err).Error()
		if store.TooManyConnections(err) {
			what = "Postgres refuses new connections (all of max_connections are in use)"
		}
	} else if err := s.leases.Ready(); err != nil {
		// Without its lease connection the replica can hold no node's
		// stream and cannot lead: nodes sent here would be refused.
		what, reason = "the lease connection to Postgres is down", err.Error()
	} else if err := s.bus.Ready(); err != nil {
		what, reason = "the doorbell listener on Postgres is down", err.Error()
	} else if err := s.artifacts.Ready(); err != nil && !errors.Is(err, artifacts.ErrNotConfigured) {
		// A configured object store that does not answer makes the replica
		// not ready: it would refuse every artifact upload. One that was
		// never configured is a choice, not a fault.
		what, reason = "the object store for artifacts ("+s.cfg.Artifacts.Endpoint+") is unavailable", err.Error()
	}
	s.readyMu.Lock()
	if reason != s.notReady {
		if reason != "" {
			s.log.Warn("not ready: "+what, "err", reason)
		} else {
			s.log.Info("ready again")
		}
		s.notReady = reason
	}
	s.readyMu.Unlock()
	if what != "" {
		http.Error(w, "not ready: "+what+"; the coordinator's log says why", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n" + s.optional))
}

// optionalParts lists, for /readyz, the parts a coordinator may run without
// and whether this one has each, with the setting that turns one on: a
// coordinator missing one works, and nothing else would tell its operator
// why secrets, artifacts or /install.sh are refused. Settings only, never a
// host, path or key: /readyz answers anyone who can reach the port.
func optionalParts(cfg Config, pre prepared, apt bool, aptOff string, dl bool, dlOff string) string {
	var b strings.Builder
	b.WriteString("optional parts:\n")
	part := func(name string, on bool, off string) {
		if on {
			fmt.Fprintf(&b, "  %s: on\n", name)
		} else {
			fmt.Fprintf(&b, "  %s: off (%s)\n", name, off)
		}
	}
	part("secrets", pre.secretsKey != nil, "set --secrets-key-file, PODIUM_SECRETS_KEY_FILE")
	part("object store for artifacts and log archives", cfg.Artifacts.Endpoint != "", "set --s3-endpoint, PODIUM_S3_ENDPOINT; logs are archived in Postgres")
	part("apt repository and /install.sh", apt, aptOff)
	part("podium CLI downloads at /download/", dl, dlOff)
	part("tailnet", cfg.Transport == TransportTailnet, "the local transport: set --transport tailnet, PODIUM_TRANSPORT, to serve on a tailnet")
	part("TLS", pre.certs != nil || cfg.Transport == TransportTailnet, "set --tls-cert and --tls-key, or serve on a tailnet")
	return b.String()
}

// Run serves until ctx ends or one of the replica's parts fails, then stops
// them in this order:
//
//  1. Sessions. Every node stream ends, so its handler returns before the HTTP
//     server waits on it (a stream never ends by itself), and its node starts
//     reconnecting to another replica at once.
//  2. HTTP. The listeners close and the requests in flight finish, for up to
//     10 s, while the loops that store what they send (submits, node events)
//     still run, so none is cut short.
//  3. The background loops, together: the bus, the node service (its last
//     heartbeats flushed), the event ingest, the task submitter, the artifact
//     probe and the leader. The leader hands over here: its workers stop and it releases its
//     lock while the lease connection still stands, so a standby takes over
//     at once rather than at its next try.
//  4. The lease. Closing the lease connection releases whatever lock is left.
//     It comes last because the sessions and the leader let go of their locks
//     on it.
//  5. The tailnet, if any, and the store's connection pool.
//
// Every long-lived part has the same Run(ctx) error and is started in one
// errgroup: a part that returns an error before ctx ends stops the replica the
// same way, and Run returns that error, because a replica missing one of its
// loops would look alive while, say, storing no events.
func (s *Server) Run(ctx context.Context) error {
	// Registration is not cut short by ctx: a stop that landed between the
	// row and the return would leave a replica that is gone listed to every
	// node for the whole replicasWindow. Once registered, a stop goes the
	// usual way below, which retires the row.
	rctx, cancelRegister := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := s.store.RegisterReplica(rctx, s.cfg.ReplicaID, s.cfg.Advertise)
	cancelRegister()
	if err != nil {
		return fmt.Errorf("register this replica in podium.replicas: %w", err)
	}
	g, failed := errgroup.WithContext(context.Background())
	// The lease has a context of its own: it must outlive the loops even when
	// the failure of one of them is what stops the replica.
	leaseCtx, releaseLease := context.WithCancel(context.Background())
	defer releaseLease()
	g.Go(func() error { return named("lease keeper", s.leases.Run(leaseCtx)) })
	loopsCtx, stopLoops := context.WithCancel(failed)
	defer stopLoops()
	var loops sync.WaitGroup
	for _, part := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"bus", s.bus.Run},
		{"node service", s.nodes.Run},
		{"event ingest", s.ingest.Run},
		{"task service", s.tasks.Run},
		{"artifact store", s.artifacts.Run},
		{"leader", s.leader.Run},
		{"webhook delivery", s.notify.Run},
		{"Postgres link", s.pg.Run},
	} {
		loops.Add(1)
		g.Go(func() error {
			defer loops.Done()
			return named(part.name, part.run(loopsCtx))
		})
	}

	errc := make(chan error, len(s.listeners))
	for _, ln := range s.listeners {
		go func() { errc <- s.http.Serve(ln) }()
	}
	s.log.Info("coordinator serving", "transport", s.cfg.Transport, "addr", s.Addr(), "advertise", s.cfg.Advertise)
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-failed.Done():
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	s.log.Info("coordinator shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Out of the list first, so the other replicas stop naming this one to
	// their nodes; the nodes this one held reconnect elsewhere.
	if rerr := s.store.RetireReplica(sctx, s.cfg.ReplicaID); rerr != nil {
		s.log.Warn("take this replica out of the list nodes are given", "err", rerr)
	}
	s.nodes.Registry().CloseAll()
	if serr := s.http.Shutdown(sctx); serr != nil {
		s.log.Warn("http shutdown", "err", serr)
		_ = s.http.Close()
	}
	stopLoops()
	loops.Wait()
	releaseLease()
	if gerr := g.Wait(); gerr != nil {
		s.log.Error("coordinator part failed", "err", gerr)
		err = errors.Join(err, gerr)
	}
	if s.endpoint != nil {
		if cerr := s.endpoint.Close(); cerr != nil {
			s.log.Warn("leave the tailnet", "err", cerr)
		}
	}
	s.store.Close()
	return err
}

// named says which part of the replica an error came from.
func named(part string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", part, err)
}
