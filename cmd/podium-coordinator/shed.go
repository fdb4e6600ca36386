package main

import (
	"errors"
	"log/slog"

	"github.com/podiumhq/podium/coordinator/server"
)

// shedConfig is server.ShedConfig as the flags give it; memory fills in its
// memory limit once the logger exists.
type shedConfig struct{ server.ShedConfig }

// flags are the rows of serve's flag table for --max-requests,
// --max-streams and --memory-limit, whose value memory reads.
func (c *shedConfig) flags(limit *string) []envFlag {
	return []envFlag{
		intFlag(&c.MaxRequests, "max-requests", "PODIUM_MAX_REQUESTS", server.DefaultMaxRequests,
			"people's API calls (not streams) served at once; more are answered 503 with Retry-After at once (PODIUM_MAX_REQUESTS); -1: no bound"),
		intFlag(&c.MaxStreams, "max-streams", "PODIUM_MAX_STREAMS", server.DefaultMaxStreams,
			"people's streaming API calls (followers, downloads) served at once; more are answered 503 with Retry-After (PODIUM_MAX_STREAMS); -1: no bound"),
		stringFlag(limit, "memory-limit", "PODIUM_MEMORY_LIMIT", "auto",
			"the process's memory limit: people's API calls are answered 503 with Retry-After while the replica holds more than 85% of it, "+
				"and Go's GOMEMLIMIT is set to 90% of it unless given (PODIUM_MEMORY_LIMIT); auto: the control group's limit (a container's or a unit's MemoryMax), off, or a size such as 2GiB"),
	}
}

// memory checks the bounds and works out the memory limit, saying where it
// came from.
func (c *shedConfig) memory(value string, log *slog.Logger) error {
	if c.MaxRequests == 0 || c.MaxRequests < -1 || c.MaxStreams == 0 || c.MaxStreams < -1 {
		return errors.New("--max-requests and --max-streams: want a positive number, or -1 for no bound")
	}
	limit, from, err := server.MemoryLimitFor(value)
	if err != nil {
		return err
	}
	c.MemoryLimit = limit
	log.Info("load shedding", "max_requests", c.MaxRequests, "max_streams", c.MaxStreams, "memory_limit_bytes", limit, "memory_limit_from", from)
	return nil
}
