package intercept

import (
	"crypto/x509"
	"errors"
	"testing"
	"time"
)

func verify(ca *CA, host string) error {
	leaf, err := ca.Leaf(host)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots, CurrentTime: time.Now()})
	return err
}

// TestCANameConstraints: the run's CA vouches for the hosts it intercepts
// (and their subdomains, as RFC 5280 name constraints do) and for nothing
// else, even a certificate it signed itself.
func TestCANameConstraints(t *testing.T) {
	ca, err := NewCA([]string{"chatgpt.com", "api.anthropic.com", "10.0.0.7"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host string
		ok   bool
	}{
		{"chatgpt.com", true},
		{"api.anthropic.com", true},
		{"ab.chatgpt.com", true}, // a DNS constraint admits subdomains
		{"10.0.0.7", true},
		{"github.com", false},
		{"anthropic.com", false},
		{"evilchatgpt.com", false},
		{"10.0.0.8", false},
	}
	for _, tt := range tests {
		err := verify(ca, tt.host)
		if tt.ok && err != nil {
			t.Errorf("verify(%s) = %v; want it trusted", tt.host, err)
		}
		if !tt.ok {
			var ce x509.CertificateInvalidError
			if !errors.As(err, &ce) || ce.Reason != x509.CANotAuthorizedForThisName {
				t.Errorf("verify(%s) = %v; want refused by the name constraints", tt.host, err)
			}
		}
	}
}

// TestCANoIPUnlessIntercepted: a CA for host names only vouches for no IP
// address.
func TestCANoIPUnlessIntercepted(t *testing.T) {
	ca, err := NewCA([]string{"chatgpt.com"})
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(ca, "127.0.0.1"); err == nil {
		t.Fatal("a certificate for 127.0.0.1 verified; want it refused")
	}
}

// TestCALeafCached: one leaf per host for the run.
func TestCALeafCached(t *testing.T) {
	ca, err := NewCA([]string{"chatgpt.com"})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := ca.Leaf("chatgpt.com")
	b, _ := ca.Leaf("chatgpt.com")
	if a != b {
		t.Error("two leaves for one host")
	}
	if len(a.Certificate) != 2 {
		t.Errorf("the leaf's chain has %d certificates; want the leaf and the CA", len(a.Certificate))
	}
	if _, err := NewCA(nil); err == nil {
		t.Error("NewCA(nil) made a CA that would vouch for every name")
	}
}

func BenchmarkCALeaf(b *testing.B) {
	ca, err := NewCA([]string{"chatgpt.com"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ca.Leaf("chatgpt.com"); err != nil {
			b.Fatal(err)
		}
	}
}
