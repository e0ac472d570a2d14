package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"sync"
	"time"
)

// Lifetimes of the interception certificates.
const (
	// caLife is the CA's validity; a gateway makes a new CA at each start.
	caLife = 30 * 24 * time.Hour
	// leafLife is a host certificate's validity; leaves are made again
	// when they have less than half of it left.
	leafLife = 24 * time.Hour
	// maxLeaves bounds the cached host certificates.
	maxLeaves = 256
)

// CA is a gateway's certificate authority for TLS interception: with
// Options.CA set, a CONNECT tunnel to a host whose rule carries a
// Credential is terminated by the proxy with a certificate for that host
// signed by the CA, the requests inside are forwarded over the proxy's own
// verified TLS with the credential added, as absolute-form https:// ones
// are. Sandboxes trust the CA through CertPEM (see CAFiles); its private
// key never leaves the gateway's memory. Tunnels to other hosts stay
// opaque. A CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewCA makes a CA with a fresh ECDSA P-256 key, valid for 30 days.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "agentbox egress interception CA", Organization: []string{"agentbox"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA's certificate, PEM-encoded: what a sandbox trusts.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// leaf returns the certificate the proxy presents for host (a DNS name
// or an IP address), made once and cached.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leaves[host]; l != nil && time.Until(l.Leaf.NotAfter) > leafLife/2 {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: host key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("egress: host certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	c.leaves[host] = l
	return l, nil
}

// Where a sandbox finds the CA, relative to its HOME, and the variables
// that make its tools trust it.
const (
	// CACertFile is the CA certificate alone (NODE_EXTRA_CA_CERTS adds it
	// to node's own roots).
	CACertFile = ".agentbox/egress-ca.pem"
	// CABundleFile is the image's system roots followed by the CA: for the
	// tools whose variable replaces their roots.
	CABundleFile = ".agentbox/ca-bundle.pem"
)

// CAEnv is the environment that makes the usual tools in a sandbox whose
// HOME is home trust the CA (node, npm, curl, git, Python's requests and
// pip, OpenSSL).
func CAEnv(home string) []string {
	cert, bundle := home+"/"+CACertFile, home+"/"+CABundleFile
	return []string{
		"NODE_EXTRA_CA_CERTS=" + cert,
		"SSL_CERT_FILE=" + bundle,
		"CURL_CA_BUNDLE=" + bundle,
		"GIT_SSL_CAINFO=" + bundle,
		"REQUESTS_CA_BUNDLE=" + bundle,
		"PIP_CERT=" + bundle,
	}
}

// CAInstallScript writes CACertFile and CABundleFile under $HOME in a
// sandbox: the CA certificate comes on stdin, the system roots from the
// image's usual bundle paths (none is fine: the bundle then holds the CA
// alone).
const CAInstallScript = `set -e
umask 022
mkdir -p "$HOME/.agentbox"
cat > "$HOME/` + CACertFile + `"
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
  if [ -r "$f" ]; then cat "$f"; break; fi
done > "$HOME/` + CABundleFile + `"
cat "$HOME/` + CACertFile + `" >> "$HOME/` + CABundleFile + `"
`
