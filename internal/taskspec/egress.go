package taskspec

import (
	"fmt"
	"net/netip"
	"strings"
)

// MaxAllowEgress bounds the allow_egress field. Each range is a rule the
// node installs for the task's network; a task that needs more than this
// wants a wider range, or the node's own --allow-egress.
const MaxAllowEgress = 64

// AllowEgress parses a spec's allow_egress field, whose name (as the API
// names it, "spec.allow_egress") the errors carry: a *FieldError for the
// first range ParseCIDR refuses, or for too many of them. The agent calls it
// too, so that it opens exactly the ranges the coordinator checked.
func AllowEgress(field string, ranges []string) ([]netip.Prefix, error) {
	if len(ranges) > MaxAllowEgress {
		return nil, fieldErr(field, "has %d ranges, more than %d: give wider ranges, or ask the node's operator to open them for every task (podium-agent --allow-egress)",
			len(ranges), MaxAllowEgress)
	}
	out := make([]netip.Prefix, 0, len(ranges))
	for i, r := range ranges {
		p, err := ParseCIDR(r)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseCIDR reads one network range, as allow_egress and the agent's
// --allow-egress and --permit-egress take it: a CIDR such as 10.0.0.0/8 or
// fd00::/8, or a bare address, which means that one host (/32, /128).
// Bits set past the prefix length ("10.0.0.1/8") are refused rather than
// masked away, since the writer probably meant a host or a different
// length; so is an IPv4 address written as IPv6 (::ffff:10.0.0.1), which
// would match no IPv4 packet.
func ParseCIDR(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, fmt.Errorf("empty: give a range such as 10.0.0.0/8, or one address such as 192.0.2.10")
	}
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR range: write e.g. 10.0.0.0/8, 192.0.2.10/32 or fd00::/8", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or a CIDR range: write e.g. 10.0.0.0/8, 192.0.2.10 or fd00::/8", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q is an IPv4 range written as IPv6: write it as IPv4, e.g. %s", s, ipv4Form(p))
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%q has bits set past its /%d: write %s for the range, or %s/%d for the one address",
			s, p.Bits(), m, p.Addr(), p.Addr().BitLen())
	}
	return p, nil
}

func ipv4Form(p netip.Prefix) string {
	bits := max(p.Bits()-96, 0)
	return netip.PrefixFrom(p.Addr().Unmap(), bits).Masked().String()
}
