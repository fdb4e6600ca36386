package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/podiumhq/podium/bench/benchkit"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

const (
	dbName = "bench"
	token  = benchkit.APIToken
	bucket = "podium-artifacts"
)

// startCoordinator runs the coordinator as a subprocess pointed at the S3
// server, with no cap an artifact could hit; its /readyz includes the store
// answering and the bucket existing.
func startCoordinator(ctx context.Context, bin, dbURL string, s3 *s3test.Server, dir string) (*benchkit.Coordinator, error) {
	return benchkit.StartCoordinator(ctx, bin, dbURL, filepath.Join(dir, "coordinator.log"),
		[]string{"PODIUM_S3_SECRET_KEY=" + s3.SecretKey},
		"--s3-endpoint", s3.Endpoint, "--s3-tls=false", "--s3-bucket", bucket,
		"--s3-access-key", s3.AccessKey, "--s3-max-artifact-size", "64GiB")
}

// resetPeak makes the kernel's VmHWM start again from the current RSS
// (writing 5 to /proc/<pid>/clear_refs), so each round's peak is its own.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}
