package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// routeInterface names the network interface the kernel would send a packet
// to ip out of, asking it as `ip route get` does (RTM_GETROUTE over
// netlink, policy rules included, so tailscaled's table 52 counts). It is
// how the agent tells a peer behind tailscale0 from a host on a
// carrier-grade NAT network that shares the tailnet's 100.64.0.0/10.
func routeInterface(ip netip.Addr) (string, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return "", fmt.Errorf("open a netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// The kernel answers at once; the bound is for a kernel that does not.
	tv := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return "", err
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", fmt.Errorf("bind a netlink socket: %w", err)
	}
	family, addr := byte(unix.AF_INET), ip.AsSlice()
	if ip.Is6() {
		family = unix.AF_INET6
	}
	const seq = 1
	attrLen := unix.SizeofRtAttr + len(addr)
	msg := make([]byte, unix.SizeofNlMsghdr+unix.SizeofRtMsg+attrLen)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], unix.RTM_GETROUTE)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], seq)
	rt := msg[unix.SizeofNlMsghdr:]
	rt[0] = family              // rtm_family
	rt[1] = byte(len(addr)) * 8 // rtm_dst_len
	attr := rt[unix.SizeofRtMsg:]
	ne.PutUint16(attr[0:], uint16(attrLen))
	ne.PutUint16(attr[2:], unix.RTA_DST)
	copy(attr[unix.SizeofRtAttr:], addr)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", fmt.Errorf("ask the kernel for the route: %w", err)
	}
	buf := make([]byte, 1<<16)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return "", fmt.Errorf("read the kernel's route: %w", err)
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return "", fmt.Errorf("read the kernel's route: %w", err)
	}
	for _, m := range msgs {
		if m.Header.Seq != seq {
			continue
		}
		switch m.Header.Type {
		case unix.NLMSG_ERROR:
			if len(m.Data) < 4 {
				return "", errors.New("read the kernel's route: a short error message")
			}
			if errno := -int32(ne.Uint32(m.Data)); errno != 0 {
				if errno == int32(unix.ENETUNREACH) || errno == int32(unix.EHOSTUNREACH) {
					return "", errNoRoute
				}
				return "", fmt.Errorf("ask the kernel for the route: %w", syscall.Errno(errno))
			}
		case unix.RTM_NEWROUTE:
			attrs, err := syscall.ParseNetlinkRouteAttr(&m)
			if err != nil {
				return "", fmt.Errorf("read the kernel's route: %w", err)
			}
			for _, a := range attrs {
				if a.Attr.Type == unix.RTA_OIF && len(a.Value) >= 4 {
					iface, err := net.InterfaceByIndex(int(ne.Uint32(a.Value)))
					if err != nil {
						return "", fmt.Errorf("name the route's interface: %w", err)
					}
					return iface.Name, nil
				}
			}
			return "", errors.New("the kernel's route names no interface")
		}
	}
	return "", errors.New("the kernel did not answer the route lookup")
}
