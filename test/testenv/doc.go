// Package testenv is the parent of the test rigs: the real parts that tests
// and benchmarks start for themselves (a throwaway Postgres, an S3 server, a
// Docker engine's test images, an in-process tailnet, a whole coordinator).
// Production code never imports anything under it; `make lint` (depguard in
// .golangci.yml) enforces that.
package testenv
