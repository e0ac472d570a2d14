// Package egress is the host side of a sandbox's network egress: an HTTP
// forward proxy (absolute-form http:// and https:// requests, and CONNECT
// tunnels for https:// and anything else over TCP) served on the per-sandbox unix socket
// {hostDir}/egress.sock, which the in-container helper relays the agent's
// loopback connections to (HTTP_PROXY=http://127.0.0.1:<EgressPort>). The
// container itself keeps network "none": this proxy is its only way out.
//
// The agent is an attacker, so everything is default deny. A Policy lists
// the allowed destinations by host name (optionally one port, else 80 and
// 443; "*.example.com" covers names under example.com on a label boundary,
// never example.com itself nor evil-example.com). The proxy resolves names
// on the host with its own Resolver, keeps only public unicast addresses
// (see Public: private, loopback, link-local such as the cloud metadata
// address 169.254.169.254, multicast, reserved and IPv4-embedding IPv6
// ranges are refused) unless the rule names the host exactly with Private,
// and dials exactly the addresses it checked, so a name that changes its
// answer between check and use (DNS rebinding) gets nowhere. An IP literal
// is refused unless that address itself is listed. Refusals answer 403
// with a plain-text body naming the host and the key to change
// (sandbox.egress); caps answer 503. Every attempt is logged on one line
// with host, port, address, bytes up and down, status and outcome; the
// caller adds the assistant, sandbox, request id, user and chat to the
// Logger. Each refused attempt also has a Reason from a fixed set, on its
// line and passed to Options.OnRefuse (the gateway's metric). That holds
// for what net/http turns down before the proxy's handler runs too (a
// head that does not parse, "host@evil" or "#" or "%2e" in the target, a
// head past 64 KiB, an unknown transfer coding or expectation, a head not
// complete within HeaderTimeout): each client connection is watched
// between requests (watch.go), and one that closes there after bytes came
// in gets its line, with net/http's status, its reason in words and the
// request line quoted and bounded. OPTIONS * reaches the handler (and is
// refused) rather than net/http's own answer. Per proxy (one per request)
// a byte cap (up plus down, all connections), a cap on connections open
// at once, one on connections in all, and one on client connections open
// at once outside tunnels (4×MaxConcurrent, refused with 503: an agent
// that opens connections and never finishes a head holds at most that
// many, each for HeaderTimeout) bound what the agent can move and hold.
// Absolute-form requests are forwarded by httputil.ReverseProxy, which
// strips hop-by-hop headers (Proxy-Authorization among them) and adds no
// forwarding headers; each uses its own upstream connection so its bytes
// are counted to it. An https:// URL sent that way (busybox wget does, where
// curl, git, npm and pip use CONNECT) is fetched over the proxy's own TLS,
// verified against the gateway's roots (Options.UpstreamTLS).
//
// Credentials: a Rule may name a Credential, an environment variable of
// the gateway (never its value) and a header; the proxy sets that header
// on the https:// requests it forwards to the rule's hosts over its own
// TLS, which verifies the server (absolute-form from clients that send
// it so), replacing whatever the agent sent, so the secret never enters
// the sandbox and never crosses a network in clear. Plain http:// to such
// a host, on any port and in any form of its name, is refused
// (ReasonPlainCredential): the agent could otherwise make the gateway
// send the secret unencrypted. New refuses an UpstreamTLS that skips
// verification when a rule has a credential. CONNECT tunnels are opaque
// TLS and cannot carry it, unless the proxy has a CA (Options.CA, NewCA):
// then a tunnel to a host whose rule has a Credential is terminated by the
// proxy with a certificate for that host signed by the CA, and each
// request inside is forwarded as an absolute-form https:// one, to the
// tunnel's host only (whatever its target, Host or the TLS server name
// say), over the proxy's own verified TLS, with the credential set;
// CONNECT and HTTP/2's PRI inside are refused. The sandbox trusts the CA
// through CAInstallScript's files and CAEnv; the CA's key stays in the
// gateway. Tunnels to hosts without a credential stay opaque.
//
// What it cannot stop: anything the agent sends to an allowed host (a
// workspace uploaded to an allowed git host or a paste site on the list is
// gone), traffic inside an allowed TLS tunnel, any protocol spoken to an
// allowed host:port through CONNECT, and a credential an allowed host
// echoes back in its answers. DNS tunnelling is not possible: the
// sandbox has no network and no resolver, and names reach the host's
// resolver only as the host part of an allowed request, which the policy
// checked first. The byte cap bounds volume, not content.
//
// Concurrency: a Proxy is safe for concurrent use; Stats may be read while
// connections are open. Close cuts every connection, tunnels included, and
// may be called more than once. A Policy is immutable.
package egress
