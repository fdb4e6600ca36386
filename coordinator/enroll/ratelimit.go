package enroll

import (
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// enrollLimiter limits failed enrollment attempts per remote address, so a
// token cannot be guessed by trying: each address has a small bucket of
// failures that refills slowly. Successful enrollments cost nothing.
type enrollLimiter struct {
	mu      sync.Mutex
	every   time.Duration
	burst   int
	buckets map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newEnrollLimiter(every time.Duration, burst int) *enrollLimiter {
	return &enrollLimiter{every: every, burst: burst, buckets: map[string]*bucket{}}
}

func host(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func (l *enrollLimiter) get(addr string) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	// Forget addresses whose bucket has long been full again.
	if len(l.buckets) > 1024 {
		for k, b := range l.buckets {
			if now.Sub(b.seen) > time.Duration(l.burst)*l.every {
				delete(l.buckets, k)
			}
		}
	}
	h := host(addr)
	b, ok := l.buckets[h]
	if !ok {
		b = &bucket{lim: rate.NewLimiter(rate.Every(l.every), l.burst)}
		l.buckets[h] = b
	}
	b.seen = now
	return b.lim
}

// allowed reports whether addr may try to enroll now.
func (l *enrollLimiter) allowed(addr string) bool { return l.get(addr).Tokens() >= 1 }

// failed charges a failed attempt to addr.
func (l *enrollLimiter) failed(addr string) { l.get(addr).Allow() }
