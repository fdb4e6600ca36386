package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os/signal"
	"syscall"
	"time"

	"github.com/podiumhq/podium/coordinator/aptrepo"
	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/coordinator/retention"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/tasks"
)

// serveOptions are what serve's flags and their variables set.
type serveOptions struct {
	db, token, listen, tlsCert, tlsKey, advertise, publicURL   string
	metricsToken, replica, logFormat, debugListen, memoryLimit string
	aptDir, aptKey, secretsKey, downloadDir                    string
	allow, insecure, logArchive, fairShare, consoleOn          bool
	maxConns, maxNodes, maxMemberPriority                      int
	bodyTimeout, idleTimeout, heartbeat, queueTimeout          time.Duration
	allowedHosts                                               hostsFlag

	shed shedConfig
	ts   tailnetOptions
	// th holds the thresholds given; zeroThreshold names one given as 0.
	th            server.Thresholds
	zeroThreshold string
	art           artifacts.Config
	maxSize       sizeFlag
	hooks         notify.Config
	retain        retention.Config
	archive       logarchive.Config
}

// flags is serve's flag table: every flag with its variable, default, usage
// and destination, declared once. The order is the order variables are
// read in, so the first bad one is the one reported.
func (o *serveOptions) flags() []envFlag {
	def := server.DefaultThresholds()
	o.maxSize = sizeFlag{n: 1 << 30}
	flags := []envFlag{
		// The database URL and the token are secrets (the URL may hold a
		// password): their flags show no default, so -h does not print what
		// the environment holds.
		secretFlag(&o.db, "database", "PODIUM_DATABASE_URL", "Postgres URL (PODIUM_DATABASE_URL; prefer the variable: flags show in ps); a direct connection, not through PgBouncer in transaction mode"),
		stringFlag(&o.listen, "listen", "PODIUM_LISTEN", "127.0.0.1:7070", "address to serve on (PODIUM_LISTEN)"),
		laxBoolFlag(&o.allow, "allow-non-loopback", "PODIUM_ALLOW_NON_LOOPBACK", "allow a non-loopback --listen, e.g. in a container, with TLS (PODIUM_ALLOW_NON_LOOPBACK)"),
		secretFlag(&o.token, "token", "PODIUM_TOKEN", "bearer token API callers must present, at least 32 bytes, e.g. from openssl rand -hex 32 (PODIUM_TOKEN; prefer the variable: flags show in ps)"),
		stringFlag(&o.tlsCert, "tls-cert", "PODIUM_TLS_CERT", "", "PEM certificate (with its chain) to serve HTTPS with on the local transport; re-read when it changes (PODIUM_TLS_CERT)"),
		stringFlag(&o.tlsKey, "tls-key", "PODIUM_TLS_KEY", "", "the certificate's PEM private key (PODIUM_TLS_KEY)"),
		laxBoolFlag(&o.insecure, "insecure-plaintext", "PODIUM_INSECURE_PLAINTEXT", "serve plain HTTP on a non-loopback --listen without TLS, when something else encrypts the traffic (PODIUM_INSECURE_PLAINTEXT)"),
		intFlag(&o.maxConns, "max-connections", "PODIUM_MAX_CONNECTIONS", server.DefaultMaxConnections, "connections served at once; more wait to be accepted (each node holds one) (PODIUM_MAX_CONNECTIONS)"),
	}
	flags = append(flags, o.shed.flags(&o.memoryLimit)...)
	flags = append(flags,
		intFlag(&o.maxNodes, "max-nodes", "PODIUM_MAX_NODES", 0, "the most nodes this replica holds at once, each an advisory lock in Postgres's lock table; 0: half that table (max_locks_per_transaction × (max_connections + max_prepared_transactions)); -1: no bound (PODIUM_MAX_NODES)"),
		durationFlag(&o.bodyTimeout, "body-read-timeout", "PODIUM_BODY_READ_TIMEOUT", server.DefaultBodyReadTimeout, "how long a request body may take to arrive; node streams and artifact uploads excepted (PODIUM_BODY_READ_TIMEOUT)"),
		durationFlag(&o.idleTimeout, "idle-timeout", "PODIUM_IDLE_TIMEOUT", server.DefaultIdleTimeout, "close a connection that carried no request for this long (PODIUM_IDLE_TIMEOUT)"),
		stringFlag(&o.advertise, "advertise", "PODIUM_ADVERTISE", "", "URL nodes reach this replica at (PODIUM_ADVERTISE); default http://<listen>"),
		stringFlag(&o.publicURL, "public-url", "PODIUM_PUBLIC_URL", "", "URL people open the coordinator at when a proxy or load balancer stands in front, e.g. https://podium.example.com (PODIUM_PUBLIC_URL); "+
			"its host is one the API and the console answer for, and an https one makes the console's cookies Secure"),
		hostsListFlag(&o.allowedHosts, "allowed-host", "PODIUM_ALLOWED_HOSTS", "another host name the API and the console answer for, such as a proxy's; repeat for more (PODIUM_ALLOWED_HOSTS, comma-separated). "+
			"They always answer for loopback, the --public-url's and --advertise's hosts and the tailnet's names; any other Host gets 421, which keeps web pages that rebind their name to this address out"),
		stringFlag(&o.metricsToken, "metrics-token-file", "PODIUM_METRICS_TOKEN_FILE", "", "`FILE` holding a token /metrics wants as Authorization: Bearer (PODIUM_METRICS_TOKEN_FILE); /metrics answers anyone without it"),
		stringFlag(&o.replica, "replica-id", "PODIUM_REPLICA_ID", "", "name of this replica (PODIUM_REPLICA_ID); a fresh id by default"),
		stringFlag(&o.logFormat, "log-format", "PODIUM_LOG_FORMAT", "text", "text or json (PODIUM_LOG_FORMAT)"),
		stringFlag(&o.debugListen, "debug-listen", "PODIUM_DEBUG_LISTEN", "", "loopback address to serve Go's profiler on, e.g. 127.0.0.1:7071 (PODIUM_DEBUG_LISTEN); off when empty"),
		positiveDurationFlag(&o.heartbeat, "heartbeat-interval", "PODIUM_HEARTBEAT_INTERVAL", 10*time.Second, "how often nodes heartbeat (PODIUM_HEARTBEAT_INTERVAL); shorter than --unreachable-after"),
	)
	for _, t := range []struct {
		flag, env string
		into      *time.Duration
		def       time.Duration
		usage     string
	}{
		{"unreachable-after", "PODIUM_UNREACHABLE_AFTER", &o.th.UnreachableAfter, def.UnreachableAfter, "a node without a heartbeat this long is unreachable; its tasks keep running"},
		{"offline-after", "PODIUM_OFFLINE_AFTER", &o.th.OfflineAfter, def.OfflineAfter, "a node without a heartbeat this long is offline and its tasks are requeued or lost; longer than --unreachable-after"},
		{"ack-deadline", "PODIUM_ACK_DEADLINE", &o.th.AckDeadline, def.AckDeadline, "an assignment a node has not accepted this long after it was made is revoked and requeued"},
		{"write-off-after", "PODIUM_WRITE_OFF_AFTER", &o.th.WriteOffAfter, def.WriteOffAfter, "a cancelled task whose node is gone is written off after this long"},
	} {
		flags = append(flags, thresholdFlag(t.into, &o.zeroThreshold, t.flag, t.env, t.def,
			t.usage+"; stored for every replica; unset: the stored value, else "+t.def.String()+" ("+t.env+")"))
	}
	flags = append(flags, o.ts.flags()...)
	flags = append(flags,
		stringFlag(&o.aptDir, "apt-dir", "PODIUM_APT_DIR", "/usr/share/podium/apt", "directory of podium-agent and podium .deb files to serve as a signed apt repository at /apt/, with /install.sh (PODIUM_APT_DIR); the image carries this version's; no repository when it has none"),
		stringFlag(&o.downloadDir, "download-dir", "PODIUM_DOWNLOAD_DIR", "/usr/share/podium/download", "directory of the podium CLI's static binaries (podium-linux-amd64, ...) to serve with their SHA-256 at /download/ (PODIUM_DOWNLOAD_DIR); the image carries this version's; none served when it has none"),
		stringFlag(&o.aptKey, "apt-signing-key-file", "PODIUM_APT_SIGNING_KEY_FILE", "", "armored OpenPGP private key (mode 0600, no passphrase) to sign the apt repository with (PODIUM_APT_SIGNING_KEY_FILE); without it the coordinator makes one once and keeps it in Postgres, sealed under the secrets key"),
		stringFlag(&o.secretsKey, "secrets-key-file", "PODIUM_SECRETS_KEY_FILE", "", "`FILE` of 32 random bytes (mode 0600) that secrets are sealed under, e.g. from head -c 32 /dev/urandom (PODIUM_SECRETS_KEY_FILE); without it secrets cannot be set, and the coordinator refuses to start while any are stored"),
		stringFlag(&o.art.Endpoint, "s3-endpoint", "PODIUM_S3_ENDPOINT", "", "object store for task artifacts, host:port or a URL (PODIUM_S3_ENDPOINT); empty: artifacts are refused"),
		stringFlag(&o.art.Bucket, "s3-bucket", "PODIUM_S3_BUCKET", "podium-artifacts", "bucket for artifacts, created if missing (PODIUM_S3_BUCKET)"),
		stringFlag(&o.art.Region, "s3-region", "PODIUM_S3_REGION", "us-east-1", "the bucket's region (PODIUM_S3_REGION)"),
		stringFlag(&o.art.AccessKey, "s3-access-key", "PODIUM_S3_ACCESS_KEY", "", "S3 access key (PODIUM_S3_ACCESS_KEY)"),
		secretFlag(&o.art.SecretKey, "s3-secret-key", "PODIUM_S3_SECRET_KEY", "S3 secret key (PODIUM_S3_SECRET_KEY; prefer the variable: flags show in ps)"),
		boolFlag(&o.art.TLS, "s3-tls", "PODIUM_S3_TLS", true, "speak HTTPS to the object store (PODIUM_S3_TLS); a URL endpoint's scheme overrides it"),
		valueFlag(&o.maxSize, "s3-max-artifact-size", "PODIUM_S3_MAX_ARTIFACT_SIZE", o.maxSize.String(), "largest artifact accepted, e.g. 1GiB or 200MiB (PODIUM_S3_MAX_ARTIFACT_SIZE)", true),
		durationFlag(&o.art.URLExpiry, "s3-url-expiry", "PODIUM_S3_URL_EXPIRY", 15*time.Minute, "how long a presigned artifact URL is valid (PODIUM_S3_URL_EXPIRY)"),
		laxBoolFlag(&o.hooks.AllowPrivate, "notify-allow-private", "PODIUM_NOTIFY_ALLOW_PRIVATE",
			"let tasks' own notify: URLs reach loopback, private and link-local addresses (PODIUM_NOTIFY_ALLOW_PRIVATE); admins' webhooks may target anything regardless"),
	)
	for _, f := range []struct {
		into      *time.Duration
		flag, env string
		def       time.Duration
		usage     string
	}{
		{&o.hooks.BackoffBase, "notify-backoff", "PODIUM_NOTIFY_BACKOFF", notify.DefaultBackoffBase, "wait after a webhook delivery's first failure, doubled after each later one"},
		{&o.hooks.BackoffCap, "notify-max-backoff", "PODIUM_NOTIFY_MAX_BACKOFF", notify.DefaultBackoffCap, "longest wait between webhook delivery attempts"},
		{&o.hooks.AbandonAfter, "notify-give-up-after", "PODIUM_NOTIFY_GIVE_UP_AFTER", notify.DefaultAbandonAfter, "how long a webhook event is retried before it is dropped with a warning"},
		{&o.hooks.Timeout, "notify-timeout", "PODIUM_NOTIFY_TIMEOUT", notify.DefaultTimeout, "how long one webhook POST may take"},
	} {
		flags = append(flags, durationFlag(f.into, f.flag, f.env, f.def, f.usage+" ("+f.env+")"))
	}
	flags = append(flags, retentionFlags(&o.retain)...)
	return append(flags,
		boolFlag(&o.logArchive, "log-archive", "PODIUM_LOG_ARCHIVE", true, "archive a finished task's log as one compressed object (in Postgres without --s3-endpoint) and delete its event rows (PODIUM_LOG_ARCHIVE); "+
			"false keeps every log as rows of podium.task_events, which then grow forever: only to measure the job's cost"),
		durationFlag(&o.archive.After, "archive-after", "PODIUM_ARCHIVE_AFTER", logarchive.DefaultAfter, "archive a task's log this long after it ended (PODIUM_ARCHIVE_AFTER); the default is the artifact upload grace and a minute, so late artifact notes are in"),
		boolFlag(&o.fairShare, "fair-share", "PODIUM_FAIR_SHARE", true, "among queued tasks of equal priority, share free slots between submitters and groups by weight (PODIUM_FAIR_SHARE); "+
			"false claims by priority then age only. The leader's setting applies: give every replica the same"),
		boolFlag(&o.consoleOn, "console", "PODIUM_CONSOLE", true, "serve the web console at /console/ (PODIUM_CONSOLE); false turns it off"),
		intFlag(&o.maxMemberPriority, "max-member-priority", "PODIUM_MAX_MEMBER_PRIORITY", tasks.DefaultMaxMemberPriority, "the highest priority a member's task or schedule may give (PODIUM_MAX_MEMBER_PRIORITY); "+
			"admins may give any. Priority goes before fair share, so the default 0 keeps every higher priority for admins' urgent work"),
		durationFlag(&o.queueTimeout, "queue-timeout", "PODIUM_QUEUE_TIMEOUT", 0, "fail a task still queued this long without a node, e.g. 1h, when its spec gives no queue_timeout (PODIUM_QUEUE_TIMEOUT); "+
			"0: none. Applied as a task is submitted, by the replica it is submitted to: give every replica the same"),
	)
}

// serve is `podium-coordinator serve`, in its phases: parse the flags and
// their variables, check them into the server's Config, start logging and
// load shedding, run the server until SIGINT or SIGTERM.
func serve(args []string, stderr io.Writer) int {
	var o serveOptions
	if code := o.parse(args, stderr); code >= 0 {
		return code
	}
	cfg, err := o.config()
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	log, err := newLogger(o.logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	if err := o.shed.memory(o.memoryLimit, log); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.debugListen != "" {
		stopDebug, err := serveDebug(o.debugListen, log)
		if err != nil {
			fmt.Fprintln(stderr, "podium-coordinator:", err)
			return 2
		}
		defer stopDebug()
	}
	cfg.Logger = log
	cfg.Shed = o.shed.ShedConfig
	// Only the leader's scheduler claims: a replica that leads later claims
	// with its own setting, so each says at start which one it has.
	log.Info("fair share", "on", o.fairShare, "applies", "while this replica leads")
	srv, err := server.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 1
	}
	if err := srv.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 1
	}
	return 0
}

// parse reads the variables and parses the flags into o. It returns the
// exit code to stop with, or -1 to go on; the flag package has printed
// what was wrong with a flag, and -h's usage.
func (o *serveOptions) parse(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	flags := o.flags()
	if err := bindFlags(fs, flags); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	o.ts.readAuthKey()
	if code := parseFlags(fs, args, "[flags]", stderr); code >= 0 {
		return code
	}
	flagsGiven(fs, flags)
	return -1
}

// config checks what the flags gave, in order, and turns it into the
// server's Config, less what is made after it (the logger, load shedding's
// memory limit).
func (o *serveOptions) config() (server.Config, error) {
	if o.maxMemberPriority < math.MinInt32 || o.maxMemberPriority > math.MaxInt32 {
		return server.Config{}, fmt.Errorf("--max-member-priority %d: want a 32-bit whole number, as a spec's priority is", o.maxMemberPriority)
	}
	o.archive.Disabled = !o.logArchive
	if o.archive.After <= 0 {
		return server.Config{}, fmt.Errorf("--archive-after %v: want a positive duration such as 11m", o.archive.After)
	}
	if err := o.archive.Check(); err != nil {
		return server.Config{}, err
	}
	if err := o.retain.Check(); err != nil {
		return server.Config{}, err
	}
	if err := (tasks.Defaults{QueueTimeout: o.queueTimeout}).Check(); err != nil {
		return server.Config{}, err
	}
	if o.zeroThreshold != "" {
		return server.Config{}, fmt.Errorf("--%s 0: want a positive duration", o.zeroThreshold)
	}
	if err := o.th.Or(server.DefaultThresholds()).Check(o.heartbeat); err != nil {
		return server.Config{}, err
	}
	if o.maxConns < 1 || o.bodyTimeout <= 0 || o.idleTimeout <= 0 {
		return server.Config{}, errors.New("--max-connections, --body-read-timeout and --idle-timeout must be positive")
	}
	o.art.MaxSize = o.maxSize.n
	if o.art.URLExpiry <= 0 || o.art.URLExpiry > 7*24*time.Hour {
		return server.Config{}, errors.New("--s3-url-expiry: want more than 0 and at most 168h (S3's limit for presigned URLs)")
	}
	cfg := server.Config{
		DatabaseURL: o.db, Listen: o.listen, AllowNonLoopback: o.allow, Token: o.token,
		TLSCertFile: o.tlsCert, TLSKeyFile: o.tlsKey, InsecurePlaintext: o.insecure,
		MaxConnections: o.maxConns, BodyReadTimeout: o.bodyTimeout, IdleTimeout: o.idleTimeout,
		Advertise: o.advertise, PublicURL: o.publicURL, AllowedHosts: o.allowedHosts, MetricsTokenFile: o.metricsToken, ReplicaID: o.replica,
		Artifacts: o.art, Archive: o.archive,
		Transport: o.ts.transport, Tailnet: o.ts.config(), Thresholds: o.th, SecretsKeyFile: o.secretsKey,
		Apt:         aptrepo.Config{Dir: o.aptDir, KeyFile: o.aptKey},
		DownloadDir: o.downloadDir,
		Retention:   o.retain, Notify: o.hooks, NoConsole: !o.consoleOn, MaxMemberPriority: int32(o.maxMemberPriority),
		QueueTimeout: o.queueTimeout,
	}
	cfg.Dispatch.NoFairShare = !o.fairShare
	cfg.Nodes.HeartbeatInterval = o.heartbeat
	cfg.Nodes.MaxNodes = o.maxNodes
	return cfg, nil
}
