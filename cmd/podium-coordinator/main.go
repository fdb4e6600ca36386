// Command podium-coordinator is Podium's control plane: a thin server whose
// every piece of state is in Postgres, so any number of replicas can run side
// by side.
//
//	podium-coordinator serve    serve the API and node streams
//	podium-coordinator migrate  apply the schema and exit
//
// Every flag has an environment variable, so a container is configured with
// environment alone.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podiumhq/podium/coordinator/aptrepo"
	"github.com/podiumhq/podium/coordinator/artifacts"
	"github.com/podiumhq/podium/coordinator/logarchive"
	"github.com/podiumhq/podium/coordinator/notify"
	"github.com/podiumhq/podium/coordinator/server"
	"github.com/podiumhq/podium/coordinator/tasks"
	"github.com/podiumhq/podium/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: podium-coordinator <command> [flags]

commands:
  serve     serve the Podium API and node streams
  migrate   apply the database schema and exit
  secrets rotate --new-key-file F   reseal every stored secret under a new key
  apt key   print the apt signing key's fingerprint, for install.sh's FINGERPRINT
  healthcheck  exit 0 if a coordinator's /readyz answers 200 (for container HEALTHCHECKs)
  version   print the version

Run 'podium-coordinator <command> -h' for a command's flags.
`)
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return def
}

func envBool(key string) bool {
	b, _ := strconv.ParseBool(os.Getenv(key))
	return b
}

func envBoolDefault(key string, def bool) (bool, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want true or false", key, v)
	}
	return b, nil
}

func envInt(key string, def int) (int, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a whole number", key, v)
	}
	return n, nil
}

func envDuration(key string, def time.Duration) (time.Duration, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: want a duration such as 15m", key, v)
	}
	return d, nil
}

// secret is a string flag whose value is never printed, so that -h does not
// show a secret taken from the environment as the flag's default.
type secret struct{ p *string }

func (s secret) String() string { return "" }

func (s secret) Set(v string) error {
	*s.p = v
	return nil
}

// hostsFlag is a repeatable flag of host names.
type hostsFlag []string

func (h *hostsFlag) String() string { return strings.Join(*h, ",") }

func (h *hostsFlag) Set(v string) error {
	*h = append(*h, v)
	return nil
}

// sizeFlag is a byte count written as a number with an optional binary unit:
// 1073741824, 1GiB, 512MiB, 64KiB (K, M, G, T alone mean the same units).
type sizeFlag struct{ n int64 }

func (f *sizeFlag) String() string {
	if f == nil {
		return ""
	}
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if f.n > 0 && f.n%(1<<u.shift) == 0 {
			return strconv.FormatInt(f.n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(f.n, 10)
}

func (f *sizeFlag) Set(v string) error {
	num := strings.TrimRight(v, "KMGTiB")
	unit := v[len(num):]
	shift, ok := map[string]uint{"": 0, "B": 0, "K": 10, "KiB": 10, "M": 20, "MiB": 20, "G": 30, "GiB": 30, "T": 40, "TiB": 40}[unit]
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if !ok || err != nil || n <= 0 || n > (1<<62)>>shift {
		return fmt.Errorf("%q: want a positive size such as 1GiB, 200MiB or 1048576", v)
	}
	f.n = n << shift
	return nil
}

func newLogger(format string, w io.Writer) (*slog.Logger, error) {
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stderr)
	case "migrate":
		return migrate(args[1:], stderr)
	case "secrets":
		return secretsCmd(args[1:], stderr)
	case "apt":
		return aptCmd(args[1:], os.Stdout, stderr)
	case "healthcheck":
		return healthcheck(args[1:], stderr)
	case "version", "--version":
		fmt.Println(version.Version)
		return 0
	case "help", "-h", "--help":
		usage(os.Stdout)
		return 0
	}
	fmt.Fprintf(stderr, "podium-coordinator: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func serve(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// The database URL and the token are secrets (the URL may hold a
	// password): their flags show no default, so -h does not print what the
	// environment holds.
	db := env("PODIUM_DATABASE_URL", "")
	fs.Var(secret{&db}, "database", "Postgres URL (PODIUM_DATABASE_URL; prefer the variable: flags show in ps); a direct connection, not through PgBouncer in transaction mode")
	listen := fs.String("listen", env("PODIUM_LISTEN", "127.0.0.1:7070"), "address to serve on (PODIUM_LISTEN)")
	allow := fs.Bool("allow-non-loopback", envBool("PODIUM_ALLOW_NON_LOOPBACK"), "allow a non-loopback --listen, e.g. in a container, with TLS (PODIUM_ALLOW_NON_LOOPBACK)")
	token := env("PODIUM_TOKEN", "")
	fs.Var(secret{&token}, "token", "bearer token API callers must present, at least 32 bytes: `openssl rand -hex 32` (PODIUM_TOKEN; prefer the variable: flags show in ps)")
	tlsCert := fs.String("tls-cert", env("PODIUM_TLS_CERT", ""), "PEM certificate (with its chain) to serve HTTPS with on the local transport; re-read when it changes (PODIUM_TLS_CERT)")
	tlsKey := fs.String("tls-key", env("PODIUM_TLS_KEY", ""), "the certificate's PEM private key (PODIUM_TLS_KEY)")
	insecure := fs.Bool("insecure-plaintext", envBool("PODIUM_INSECURE_PLAINTEXT"), "serve plain HTTP on a non-loopback --listen without TLS, when something else encrypts the traffic (PODIUM_INSECURE_PLAINTEXT)")
	maxConns, err := envInt("PODIUM_MAX_CONNECTIONS", server.DefaultMaxConnections)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.IntVar(&maxConns, "max-connections", maxConns, "connections served at once; more wait to be accepted (each node holds one) (PODIUM_MAX_CONNECTIONS)")
	shed, memoryLimit, err := shedFlags(fs)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	maxNodes, err := envInt("PODIUM_MAX_NODES", 0)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.IntVar(&maxNodes, "max-nodes", maxNodes, "the most nodes this replica holds at once, each an advisory lock in Postgres's lock table; 0: half that table (max_locks_per_transaction × (max_connections + max_prepared_transactions)); -1: no bound (PODIUM_MAX_NODES)")
	bodyTimeout, err := envDuration("PODIUM_BODY_READ_TIMEOUT", server.DefaultBodyReadTimeout)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.DurationVar(&bodyTimeout, "body-read-timeout", bodyTimeout, "how long a request body may take to arrive; node streams and artifact uploads excepted (PODIUM_BODY_READ_TIMEOUT)")
	idleTimeout, err := envDuration("PODIUM_IDLE_TIMEOUT", server.DefaultIdleTimeout)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.DurationVar(&idleTimeout, "idle-timeout", idleTimeout, "close a connection that carried no request for this long (PODIUM_IDLE_TIMEOUT)")
	advertise := fs.String("advertise", env("PODIUM_ADVERTISE", ""), "URL nodes reach this replica at (PODIUM_ADVERTISE); default http://<listen>")
	publicURL := fs.String("public-url", env("PODIUM_PUBLIC_URL", ""), "URL people open the coordinator at when a proxy or load balancer stands in front, e.g. https://podium.example.com (PODIUM_PUBLIC_URL); "+
		"its host is one the API and the console answer for, and an https one makes the console's cookies Secure")
	var allowedHosts hostsFlag
	for _, h := range strings.Split(env("PODIUM_ALLOWED_HOSTS", ""), ",") {
		if h = strings.TrimSpace(h); h != "" {
			allowedHosts = append(allowedHosts, h)
		}
	}
	fs.Var(&allowedHosts, "allowed-host", "another host name the API and the console answer for, such as a proxy's; repeat for more (PODIUM_ALLOWED_HOSTS, comma-separated). "+
		"They always answer for loopback, the --public-url's and --advertise's hosts and the tailnet's names; any other Host gets 421, which keeps web pages that rebind their name to this address out")
	metricsToken := fs.String("metrics-token-file", env("PODIUM_METRICS_TOKEN_FILE", ""), "file holding a token /metrics wants as `Authorization: Bearer` (PODIUM_METRICS_TOKEN_FILE); /metrics answers anyone without it")
	replica := fs.String("replica-id", env("PODIUM_REPLICA_ID", ""), "name of this replica (PODIUM_REPLICA_ID); a fresh id by default")
	logFormat := fs.String("log-format", env("PODIUM_LOG_FORMAT", "text"), "text or json (PODIUM_LOG_FORMAT)")
	debugListen := fs.String("debug-listen", env("PODIUM_DEBUG_LISTEN", ""), "loopback address to serve Go's profiler on, e.g. 127.0.0.1:7071 (PODIUM_DEBUG_LISTEN); off when empty")
	hbDefault := 10 * time.Second
	if v := os.Getenv("PODIUM_HEARTBEAT_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			fmt.Fprintf(stderr, "podium-coordinator: PODIUM_HEARTBEAT_INTERVAL %q: want a positive duration such as 10s\n", v)
			return 2
		}
		hbDefault = d
	}
	hb := fs.Duration("heartbeat-interval", hbDefault, "how often nodes heartbeat (PODIUM_HEARTBEAT_INTERVAL); shorter than --unreachable-after")
	// The thresholds every replica must agree on are stored in Postgres:
	// those given here (by flag or variable) replace the stored ones for
	// every replica; those not given are read from there.
	def := server.DefaultThresholds()
	var th server.Thresholds
	thresholds := []struct {
		flag, env string
		into      *time.Duration
		def       time.Duration
		usage     string
	}{
		{"unreachable-after", "PODIUM_UNREACHABLE_AFTER", &th.UnreachableAfter, def.UnreachableAfter, "a node without a heartbeat this long is unreachable; its tasks keep running"},
		{"offline-after", "PODIUM_OFFLINE_AFTER", &th.OfflineAfter, def.OfflineAfter, "a node without a heartbeat this long is offline and its tasks are requeued or lost; longer than --unreachable-after"},
		{"ack-deadline", "PODIUM_ACK_DEADLINE", &th.AckDeadline, def.AckDeadline, "an assignment a node has not accepted this long after it was made is revoked and requeued"},
		{"write-off-after", "PODIUM_WRITE_OFF_AFTER", &th.WriteOffAfter, def.WriteOffAfter, "a cancelled task whose node is gone is written off after this long"},
	}
	given := map[string]*time.Duration{}
	for _, f := range thresholds {
		v, ok := os.LookupEnv(f.env)
		if ok && v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				fmt.Fprintf(stderr, "podium-coordinator: %s=%q: want a positive duration such as %s\n", f.env, v, f.def)
				return 2
			}
			*f.into = d
		}
		// The flag's own variable shows the default in -h; what was given is
		// copied into th after parsing.
		val := f.def
		if *f.into != 0 {
			val = *f.into
		}
		given[f.flag] = fs.Duration(f.flag, val, f.usage+"; stored for every replica; unset: the stored value, else "+f.def.String()+" ("+f.env+")")
	}
	ts := tailnetFlags(fs)
	aptDir := fs.String("apt-dir", env("PODIUM_APT_DIR", "/usr/share/podium/apt"), "directory of podium-agent .deb files to serve as a signed apt repository at /apt/, with /install.sh (PODIUM_APT_DIR); the image carries this version's; no repository when it has none")
	aptKey := fs.String("apt-signing-key-file", env("PODIUM_APT_SIGNING_KEY_FILE", ""), "armored OpenPGP private key (mode 0600, no passphrase) to sign the apt repository with (PODIUM_APT_SIGNING_KEY_FILE); without it the coordinator makes one once and keeps it in Postgres, sealed under the secrets key")
	secretsKey := fs.String("secrets-key-file", env("PODIUM_SECRETS_KEY_FILE", ""), "file of 32 random bytes (mode 0600) that secrets are sealed under: `head -c 32 /dev/urandom > key` (PODIUM_SECRETS_KEY_FILE); without it secrets cannot be set, and the coordinator refuses to start while any are stored")
	var art artifacts.Config
	fs.StringVar(&art.Endpoint, "s3-endpoint", env("PODIUM_S3_ENDPOINT", ""), "object store for task artifacts, host:port or a URL (PODIUM_S3_ENDPOINT); empty: artifacts are refused")
	fs.StringVar(&art.Bucket, "s3-bucket", env("PODIUM_S3_BUCKET", "podium-artifacts"), "bucket for artifacts, created if missing (PODIUM_S3_BUCKET)")
	fs.StringVar(&art.Region, "s3-region", env("PODIUM_S3_REGION", "us-east-1"), "the bucket's region (PODIUM_S3_REGION)")
	fs.StringVar(&art.AccessKey, "s3-access-key", env("PODIUM_S3_ACCESS_KEY", ""), "S3 access key (PODIUM_S3_ACCESS_KEY)")
	art.SecretKey = env("PODIUM_S3_SECRET_KEY", "")
	fs.Var(secret{&art.SecretKey}, "s3-secret-key", "S3 secret key (PODIUM_S3_SECRET_KEY; prefer the variable: flags show in ps)")
	s3TLS, err := envBoolDefault("PODIUM_S3_TLS", true)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.BoolVar(&art.TLS, "s3-tls", s3TLS, "speak HTTPS to the object store (PODIUM_S3_TLS); a URL endpoint's scheme overrides it")
	maxSize := sizeFlag{n: 1 << 30}
	if v, ok := os.LookupEnv("PODIUM_S3_MAX_ARTIFACT_SIZE"); ok {
		if err := maxSize.Set(v); err != nil {
			fmt.Fprintln(stderr, "podium-coordinator: PODIUM_S3_MAX_ARTIFACT_SIZE:", err)
			return 2
		}
	}
	fs.Var(&maxSize, "s3-max-artifact-size", "largest artifact accepted, e.g. 1GiB or 200MiB (PODIUM_S3_MAX_ARTIFACT_SIZE)")
	urlExpiry, err := envDuration("PODIUM_S3_URL_EXPIRY", 15*time.Minute)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.DurationVar(&art.URLExpiry, "s3-url-expiry", urlExpiry, "how long a presigned artifact URL is valid (PODIUM_S3_URL_EXPIRY)")
	var hooks notify.Config
	fs.BoolVar(&hooks.AllowPrivate, "notify-allow-private", envBool("PODIUM_NOTIFY_ALLOW_PRIVATE"),
		"let tasks' own notify: URLs reach loopback, private and link-local addresses (PODIUM_NOTIFY_ALLOW_PRIVATE); admins' webhooks may target anything regardless")
	for _, f := range []struct {
		into      *time.Duration
		flag, env string
		def       time.Duration
		usage     string
	}{
		{&hooks.BackoffBase, "notify-backoff", "PODIUM_NOTIFY_BACKOFF", notify.DefaultBackoffBase, "wait after a webhook delivery's first failure, doubled after each later one"},
		{&hooks.BackoffCap, "notify-max-backoff", "PODIUM_NOTIFY_MAX_BACKOFF", notify.DefaultBackoffCap, "longest wait between webhook delivery attempts"},
		{&hooks.AbandonAfter, "notify-give-up-after", "PODIUM_NOTIFY_GIVE_UP_AFTER", notify.DefaultAbandonAfter, "how long a webhook event is retried before it is dropped with a warning"},
		{&hooks.Timeout, "notify-timeout", "PODIUM_NOTIFY_TIMEOUT", notify.DefaultTimeout, "how long one webhook POST may take"},
	} {
		d, err := envDuration(f.env, f.def)
		if err != nil {
			fmt.Fprintln(stderr, "podium-coordinator:", err)
			return 2
		}
		fs.DurationVar(f.into, f.flag, d, f.usage+" ("+f.env+")")
	}
	retain, err := retentionFlags(fs)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	var archive logarchive.Config
	logArchive, err := envBoolDefault("PODIUM_LOG_ARCHIVE", true)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.BoolVar(&logArchive, "log-archive", logArchive, "archive a finished task's log as one compressed object (in Postgres without --s3-endpoint) and delete its event rows (PODIUM_LOG_ARCHIVE); "+
		"false keeps every log as rows of podium.task_events, which then grow forever: only to measure the job's cost")
	archiveAfter, err := envDuration("PODIUM_ARCHIVE_AFTER", logarchive.DefaultAfter)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.DurationVar(&archive.After, "archive-after", archiveAfter, "archive a task's log this long after it ended (PODIUM_ARCHIVE_AFTER); the default is the artifact upload grace and a minute, so late artifact notes are in")
	fairShare, err := envBoolDefault("PODIUM_FAIR_SHARE", true)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	consoleOn, err := envBoolDefault("PODIUM_CONSOLE", true)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.BoolVar(&fairShare, "fair-share", fairShare, "among queued tasks of equal priority, share free slots between submitters and groups by weight (PODIUM_FAIR_SHARE); "+
		"false claims by priority then age only. The leader's setting applies: give every replica the same")
	fs.BoolVar(&consoleOn, "console", consoleOn, "serve the web console at /console/ (PODIUM_CONSOLE); false turns it off")
	maxMemberPriority, err := envInt("PODIUM_MAX_MEMBER_PRIORITY", tasks.DefaultMaxMemberPriority)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	fs.IntVar(&maxMemberPriority, "max-member-priority", maxMemberPriority, "the highest priority a member's task or schedule may give (PODIUM_MAX_MEMBER_PRIORITY); "+
		"admins may give any. Priority goes before fair share, so the default 0 keeps every higher priority for admins' urgent work")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if maxMemberPriority < math.MinInt32 || maxMemberPriority > math.MaxInt32 {
		fmt.Fprintf(stderr, "podium-coordinator: --max-member-priority %d: want a 32-bit whole number, as a spec's priority is\n", maxMemberPriority)
		return 2
	}
	archive.Disabled = !logArchive
	if archive.After <= 0 {
		fmt.Fprintf(stderr, "podium-coordinator: --archive-after %v: want a positive duration such as 11m\n", archive.After)
		return 2
	}
	if err := archive.Check(); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	ret, err := retain()
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	var zero string
	fs.Visit(func(f *flag.Flag) {
		for _, t := range thresholds {
			if f.Name == t.flag {
				*t.into = *given[t.flag]
				if *t.into == 0 {
					zero = t.flag
				}
			}
		}
	})
	if zero != "" {
		fmt.Fprintf(stderr, "podium-coordinator: --%s 0: want a positive duration\n", zero)
		return 2
	}
	if err := th.Or(def).Check(*hb); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	if maxConns < 1 || bodyTimeout <= 0 || idleTimeout <= 0 {
		fmt.Fprintln(stderr, "podium-coordinator: --max-connections, --body-read-timeout and --idle-timeout must be positive")
		return 2
	}
	art.MaxSize = maxSize.n
	if art.URLExpiry <= 0 || art.URLExpiry > 7*24*time.Hour {
		fmt.Fprintln(stderr, "podium-coordinator: --s3-url-expiry: want more than 0 and at most 168h (S3's limit for presigned URLs)")
		return 2
	}
	log, err := newLogger(*logFormat, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	if err := shed.memory(*memoryLimit, log); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *debugListen != "" {
		stopDebug, err := serveDebug(*debugListen, log)
		if err != nil {
			fmt.Fprintln(stderr, "podium-coordinator:", err)
			return 2
		}
		defer stopDebug()
	}
	cfg := server.Config{
		DatabaseURL: db, Listen: *listen, AllowNonLoopback: *allow, Token: token,
		TLSCertFile: *tlsCert, TLSKeyFile: *tlsKey, InsecurePlaintext: *insecure,
		MaxConnections: maxConns, Shed: shed.ShedConfig, BodyReadTimeout: bodyTimeout, IdleTimeout: idleTimeout,
		Advertise: *advertise, PublicURL: *publicURL, AllowedHosts: allowedHosts, MetricsTokenFile: *metricsToken, ReplicaID: *replica, Logger: log, Artifacts: art, Archive: archive,
		Transport: *ts.transport, Tailnet: ts.config(), Thresholds: th, SecretsKeyFile: *secretsKey,
		Apt:       aptrepo.Config{Dir: *aptDir, KeyFile: *aptKey},
		Retention: ret, Notify: hooks, NoConsole: !consoleOn, MaxMemberPriority: int32(maxMemberPriority),
	}
	cfg.Dispatch.NoFairShare = !fairShare
	// Only the leader's scheduler claims: a replica that leads later claims
	// with its own setting, so each says at start which one it has.
	log.Info("fair share", "on", fairShare, "applies", "while this replica leads")
	cfg.Nodes.HeartbeatInterval = *hb
	cfg.Nodes.MaxNodes = maxNodes
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

func migrate(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := env("PODIUM_DATABASE_URL", "")
	fs.Var(secret{&db}, "database", "Postgres URL (PODIUM_DATABASE_URL; prefer the variable: flags show in ps)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if db == "" {
		fmt.Fprintln(stderr, "podium-coordinator migrate: set PODIUM_DATABASE_URL (or --database) to a Postgres URL")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := server.Migrate(ctx, db, slog.New(slog.NewTextHandler(stderr, nil))); err != nil {
		fmt.Fprintln(stderr, "podium-coordinator migrate:", err)
		return 1
	}
	fmt.Fprintln(stderr, "schema is up to date")
	return 0
}

// healthcheck is what a container's HEALTHCHECK runs: the image is FROM
// scratch, so there is no curl to do it. It asks /readyz on this machine,
// at the port PODIUM_LISTEN names and over HTTPS when PODIUM_TLS_CERT is set,
// unless --url says otherwise.
func healthcheck(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scheme, port := "http", "7070"
	if os.Getenv("PODIUM_TLS_CERT") != "" {
		scheme = "https"
	}
	if l := os.Getenv("PODIUM_LISTEN"); l != "" {
		if _, p, err := net.SplitHostPort(l); err == nil && p != "" {
			port = p
		}
	}
	url := fs.String("url", scheme+"://127.0.0.1:"+port+"/readyz", "readiness URL to ask")
	timeout := fs.Duration("timeout", 4*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator healthcheck:", err)
		return 2
	}
	client := http.DefaultClient
	if ip := net.ParseIP(req.URL.Hostname()); req.URL.Scheme == "https" && ip != nil && ip.IsLoopback() {
		// The certificate names the coordinator's public host, not
		// 127.0.0.1, and this probe sends nothing secret and reads one
		// word from the process beside it: it does not verify.
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	res, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "podium-coordinator healthcheck: not healthy:", err)
		return 1
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	if res.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "podium-coordinator healthcheck: not healthy: %s: %s\n", res.Status, strings.TrimSpace(string(body)))
		return 1
	}
	return 0
}
