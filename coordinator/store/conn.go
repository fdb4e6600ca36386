package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// How soon a connection to Postgres whose peer went silent (a cut cable, a
// dropping firewall, a host that died without closing anything) is found
// dead. Without these a socket waits for TCP's own keepalive, two hours by
// default, and a lock held on a dead connection is held as long.
const (
	// keepaliveIdle, keepaliveInterval and keepaliveCount: a silent
	// connection is probed after 5 s, every 2 s, and dropped after 3
	// unanswered probes (11 s), by either end.
	keepaliveIdle     = 5 * time.Second
	keepaliveInterval = 2 * time.Second
	keepaliveCount    = 3
	// userTimeout drops a connection whose sent data has gone unacknowledged
	// this long (TCP_USER_TIMEOUT), which keepalives do not cover while data
	// is in flight.
	userTimeout = 10 * time.Second
	// connectTimeout bounds opening a connection, where the URL does not
	// (connect_timeout).
	connectTimeout = 10 * time.Second
	// idleInTransaction ends, on the server, a transaction whose client has
	// said nothing for this long: a replica cut off mid-transaction would
	// otherwise hold its row locks, and the other replicas' writes to those
	// rows would wait on them, until its connection is found dead. No
	// transaction of the store waits on anything but Postgres between two
	// statements.
	idleInTransaction = 15 * time.Second
)

// tuneConn makes cfg find a dead peer in seconds from both ends: keepalives
// and a user timeout on the socket it dials, and the server told to do the
// same on its end of the connection (tcp_keepalives_*, tcp_user_timeout:
// settings of the session, ignored on a Unix socket). Settings the URL gives
// are kept.
func tuneConn(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeout
	}
	d := &net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepaliveIdle, Interval: keepaliveInterval, Count: keepaliveCount},
		Control:         setUserTimeout(userTimeout),
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	setDefault(cfg, "tcp_keepalives_idle", strconv.Itoa(int(keepaliveIdle/time.Second)))
	setDefault(cfg, "tcp_keepalives_interval", strconv.Itoa(int(keepaliveInterval/time.Second)))
	setDefault(cfg, "tcp_keepalives_count", strconv.Itoa(keepaliveCount))
	setDefault(cfg, "tcp_user_timeout", strconv.Itoa(int(userTimeout/time.Millisecond)))
}

// setDefault sets a session setting the URL did not.
func setDefault(cfg *pgconn.Config, name, value string) {
	if _, set := cfg.RuntimeParams[name]; !set {
		cfg.RuntimeParams[name] = value
	}
}

// TooManyConnections says whether err is Postgres refusing a connection
// because max_connections are all in use.
func TooManyConnections(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// Explain says in words what a refusal of Postgres's that an operator must act
// on means, keeping err for errors.Is and errors.As; other errors are
// returned as they are. A replica's warnings and its /readyz reason go
// through it.
func Explain(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "53300": // too_many_connections
		return fmt.Errorf("no new connection to Postgres: every connection its max_connections allows is in use "+
			"(each coordinator replica takes its pool, pool_max_conns in the database URL, and two more); "+
			"close other clients' connections or raise max_connections on the server: %w", err)
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return fmt.Errorf("the Postgres server is shutting down, restarting or recovering: %w", err)
	}
	return err
}
