package main

import (
	"errors"
	"flag"
	"log/slog"

	"github.com/podiumhq/podium/coordinator/server"
)

// shedConfig is server.ShedConfig as the flags give it; memory fills in its
// memory limit once the logger exists.
type shedConfig struct{ server.ShedConfig }

// shedFlags defines --max-requests, --max-streams and --memory-limit.
func shedFlags(fs *flag.FlagSet) (*shedConfig, *string, error) {
	c := &shedConfig{}
	maxReq, err := envInt("PODIUM_MAX_REQUESTS", server.DefaultMaxRequests)
	if err != nil {
		return nil, nil, err
	}
	maxStreams, err := envInt("PODIUM_MAX_STREAMS", server.DefaultMaxStreams)
	if err != nil {
		return nil, nil, err
	}
	fs.IntVar(&c.MaxRequests, "max-requests", maxReq, "people's API calls (not streams) served at once; more are answered 503 with Retry-After at once (PODIUM_MAX_REQUESTS); -1: no bound")
	fs.IntVar(&c.MaxStreams, "max-streams", maxStreams, "people's streaming API calls (followers, downloads) served at once; more are answered 503 with Retry-After (PODIUM_MAX_STREAMS); -1: no bound")
	limit := fs.String("memory-limit", env("PODIUM_MEMORY_LIMIT", "auto"), "the process's memory limit: people's API calls are answered 503 with Retry-After while the replica holds more than 85% of it, "+
		"and Go's GOMEMLIMIT is set to 90% of it unless given (PODIUM_MEMORY_LIMIT); auto: the control group's limit (a container's or a unit's MemoryMax), off, or a size such as 2GiB")
	return c, limit, nil
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
