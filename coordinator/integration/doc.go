// Package integration holds the tests that drive whole coordinator replicas
// over HTTP — one or several on a shared Postgres, with simulated nodes that
// speak the real protocol — to check what only the parts together do: a task
// submitted on one replica reaching a node on another, leadership moving when
// a lease dies, the watchdog's node-loss policy, artifacts through a real S3
// server, /metrics and /readyz of a running replica.
//
// It has no code of its own; each package's own behaviour is tested beside
// it (coordinator/store, lease, bus, admin, metrics, nodes, server).
package integration
