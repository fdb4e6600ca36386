// Package e2e holds Podium's end-to-end tests: the real podium and
// podium-agent binaries, a real coordinator replica, a real Postgres and the
// real Docker engine, asserting what a user at a terminal would see.
package e2e
