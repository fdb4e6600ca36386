package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/podiumhq/podium/bench/benchkit"
	podiumv1 "github.com/podiumhq/podium/proto/podium/v1"
	"github.com/podiumhq/podium/test/testenv/s3test"
)

// payload is size pseudo-random bytes, the same every time: both ways upload
// identical bytes without either holding them, and the digest the coordinator
// answers with can be checked against one computed beforehand.
type payload struct {
	r    *rand.ChaCha8
	left int64
}

func newPayload(size int64) *payload {
	return &payload{r: rand.NewChaCha8([32]byte{'p', 'o', 'd', 'i', 'u', 'm'}), left: size}
}

func (p *payload) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, _ := p.r.Read(b)
	p.left -= int64(n)
	return n, nil
}

func digestOf(size int64) string {
	h := sha256.New()
	_, _ = io.Copy(h, newPayload(size))
	return hex.EncodeToString(h.Sum(nil))
}

// result is one measured upload.
type result struct {
	bytes   int64
	elapsed time.Duration
	// rssBefore and rssPeak are the coordinator's, for uploads through it.
	rssBefore, rssPeak int64
}

func (r result) mbps() float64 { return float64(r.bytes) / 1e6 / r.elapsed.Seconds() }

func uploadThroughCoordinator(ctx context.Context, cfg config, c *benchkit.Coordinator, n *node, name, want string) (result, error) {
	if err := resetPeak(c.PID); err != nil {
		return result{}, fmt.Errorf("reset the coordinator's peak RSS: %w", err)
	}
	before, err := benchkit.ProcMem(c.PID)
	if err != nil {
		return result{}, err
	}
	// Sample as well as reading VmHWM at the end: the two should agree, and
	// the samples do not depend on clear_refs.
	var (
		mu   sync.Mutex
		peak = before.RSSKiB << 10
		wg   sync.WaitGroup
	)
	sctx, stop := context.WithCancel(ctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if m, err := benchkit.ProcMem(c.PID); err == nil {
					mu.Lock()
					peak = max(peak, m.RSSKiB<<10)
					mu.Unlock()
				}
			}
		}
	}()
	start := time.Now()
	res, err := sendArtifact(ctx, cfg, n, name)
	elapsed := time.Since(start)
	stop()
	wg.Wait()
	if err != nil {
		return result{}, err
	}
	if res.GetSize() != cfg.size || res.GetSha256() != want {
		return result{}, fmt.Errorf("the coordinator stored %d bytes with sha256 %s, want %d with %s", res.GetSize(), res.GetSha256(), cfg.size, want)
	}
	after, err := benchkit.ProcMem(c.PID)
	if err != nil {
		return result{}, err
	}
	return result{bytes: cfg.size, elapsed: elapsed, rssBefore: before.RSSKiB << 10, rssPeak: max(peak, after.HWMKiB<<10)}, nil
}

// sendArtifact uploads the payload as an agent does: meta, then chunks.
func sendArtifact(ctx context.Context, cfg config, n *node, name string) (*podiumv1.UploadArtifactResponse, error) {
	st := n.nodes.UploadArtifact(ctx)
	if err := st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Meta{Meta: &podiumv1.ArtifactMeta{
		NodeId: n.id, NodeKey: n.key, TaskId: n.taskID, Attempt: n.attempt, Name: name}}}); err == nil {
		p := newPayload(cfg.size)
		buf := make([]byte, cfg.chunk)
		for {
			k, rerr := io.ReadFull(p, buf)
			if k > 0 {
				if err := st.Send(&podiumv1.UploadArtifactRequest{Msg: &podiumv1.UploadArtifactRequest_Chunk{Chunk: buf[:k]}}); err != nil {
					break // the answer says why
				}
			}
			if rerr != nil {
				break
			}
		}
	}
	res, err := st.CloseAndReceive()
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// uploadDirect is the reference: minio-go writing the same bytes to the same
// server with the options the coordinator uses, then removing the object.
func uploadDirect(ctx context.Context, cfg config, s *s3test.Server, key string) (result, error) {
	client, err := s.Client()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	info, err := client.PutObject(ctx, bucket, key, newPayload(cfg.size), -1, minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: uint64(cfg.partSize),
		NumThreads: uint(cfg.parts), ConcurrentStreamParts: cfg.parts > 1,
	})
	elapsed := time.Since(start)
	if err != nil {
		return result{}, err
	}
	if info.Size != cfg.size {
		return result{}, fmt.Errorf("stored %d bytes, want %d", info.Size, cfg.size)
	}
	_ = client.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{})
	return result{bytes: cfg.size, elapsed: elapsed}, nil
}

func report(w io.Writer, cfg config, through, direct []result) {
	best := func(rs []result) result {
		return slices.MaxFunc(rs, func(a, b result) int { return int(a.mbps()*1000 - b.mbps()*1000) })
	}
	fmt.Fprintf(w, "\nartifact upload, %s in %s chunks; parts of %s, %d in flight (the coordinator's defaults, used by both)\n\n",
		humanBytes(cfg.size), humanBytes(int64(cfg.chunk)), humanBytes(cfg.partSize), cfg.parts)
	fmt.Fprintf(w, "%-28s %10s %10s %12s %12s %12s\n", "", "seconds", "MB/s", "RSS before", "RSS peak", "RSS growth")
	for i := range through {
		t, d := through[i], direct[i]
		fmt.Fprintf(w, "%-28s %10.2f %10.1f %12s %12s %12s\n", fmt.Sprintf("through the coordinator #%d", i+1),
			t.elapsed.Seconds(), t.mbps(), humanBytes(t.rssBefore), humanBytes(t.rssPeak), humanBytes(t.rssPeak-t.rssBefore))
		fmt.Fprintf(w, "%-28s %10.2f %10.1f\n", fmt.Sprintf("minio-go straight to S3 #%d", i+1), d.elapsed.Seconds(), d.mbps())
	}
	bt, bd := best(through), best(direct)
	ratio := bt.mbps() / bd.mbps()
	var growth int64
	for _, t := range through {
		growth = max(growth, t.rssPeak-t.rssBefore)
	}
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	fmt.Fprintf(w, "\nthroughput, best of %d: %.1f MB/s through the coordinator, %.1f MB/s straight: %.0f%% (target ≥ 80%%: %s)\n",
		len(through), bt.mbps(), bd.mbps(), ratio*100, verdict(ratio >= 0.8))
	fmt.Fprintf(w, "coordinator peak RSS growth, worst of %d: %s (target < 64 MiB: %s)\n", len(through), humanBytes(growth), verdict(growth < 64<<20))
}
