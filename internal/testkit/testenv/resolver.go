package testenv

import (
	"context"
	"net"
	"net/netip"
)

// Hosts is a resolver (egress.Resolver) that maps test names to the
// addresses given, loopback in practice; every other name fails as not
// found, so a test never resolves or sends anything beyond this host.
type Hosts map[string]string

// LookupNetIP answers host from the map.
func (h Hosts) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := h[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}
