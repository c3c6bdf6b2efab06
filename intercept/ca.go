package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"sync"
	"time"
)

// A CA is the certificate authority of one run: it signs a leaf certificate
// for each host the run intercepts. Its key is made by NewCA and never
// leaves the process; the agent trusts the CA through the certificate
// alone (PEM).
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	// leaves are the leaf certificates made so far, by host.
	leaves sync.Map // string -> *tls.Certificate
	// mu serialises the making of leaves, so that concurrent handshakes
	// for one host make one.
	mu sync.Mutex
}

// caValidity is how long the run's certificates are valid: long enough
// for any run, short enough that a copy of the CA certificate left
// behind (the run removes its file) soon vouches for nothing.
const caValidity = 30 * 24 * time.Hour

// NewCA makes a CA whose certificates are valid for hosts only (name
// constraints, RFC 5280 section 4.2.1.10): host names, and IP addresses
// for hosts that are one. A name constraint on a DNS name also admits its
// subdomains.
func NewCA(hosts []string) (*CA, error) {
	if len(hosts) == 0 {
		// Without a permitted name the constraints would permit every one.
		return nil, errors.New("intercept: a CA for no host")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "loopguard run CA " + now.UTC().Format("2006-01-02 15:04:05"), Organization: []string{"loopguard"}},
		NotBefore:             now.Add(-time.Hour), // clocks a little behind still accept it
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		// Critical, as RFC 5280 requires of name constraints: a client
		// that cannot read them must refuse the CA rather than trust it
		// for every name.
		PermittedDNSDomainsCritical: true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, hostNet(ip))
		} else {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, h)
		}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		// No IP address is intercepted: the CA vouches for none.
		tmpl.ExcludedIPRanges = []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)},
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("intercept: make the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

func hostNet(ip net.IP) *net.IPNet {
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1)) // positive, never 0
}

// PEM is the CA's certificate, PEM-encoded: what the agent is told to trust.
func (ca *CA) PEM() []byte { return ca.pem }

// Certificate is the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns the certificate for host (a name or an IP address, without
// port), made on first use and kept for the run.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	if c, ok := ca.leaves.Load(host); ok {
		return c.(*tls.Certificate), nil
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves.Load(host); ok {
		return c.(*tls.Certificate), nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    ca.cert.NotBefore,
		NotAfter:     ca.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("intercept: certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	ca.leaves.Store(host, c)
	return c, nil
}
