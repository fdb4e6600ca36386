package units

import "testing"

func TestCPUAndWall(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{CPU(0.034), "0.03 s"}, {CPU(12.4), "12.40 s"}, {CPU(0), "0.00 s"},
		{Wall(3.14), "3.1 s"}, {Wall(59.9), "59.9 s"}, {Wall(3723.4), "1h2m3s"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
