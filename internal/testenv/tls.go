package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSFiles are the PEM files of a server certificate and the CA that
// signed it.
type TLSFiles struct {
	CA   string // the CA's certificate: what a client trusts
	Cert string // the server's certificate
	Key  string // the server's private key
}

// GenerateCert writes to dir a throwaway CA and a server certificate it
// signed for 127.0.0.1, ::1 and localhost, valid for a day.
func GenerateCert(t testing.TB, dir string) TLSFiles {
	t.Helper()
	return GenerateCertFor(t, dir, "127.0.0.1", "::1", "localhost")
}

// GenerateCertFor is GenerateCert for a server certificate that names
// exactly hosts: each an IP address (an IP SAN) or a DNS name (a DNS SAN).
// A certificate for "localhost" alone fails verification against
// 127.0.0.1, which tells a client that verifies the host it dialled from
// one that verifies some other name.
func GenerateCertFor(t testing.TB, dir string, hosts ...string) TLSFiles {
	t.Helper()
	var (
		dnsNames []string
		ips      []net.IP
	)
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, h)
		}
	}
	commonName := "dlock test server"
	if len(dnsNames) > 0 {
		commonName = dnsNames[0]
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		return k
	}
	serial := func() *big.Int {
		n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		return n
	}
	now := time.Now()
	caKey, srvKey := newKey(), newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: commonName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    dnsNames,
		IPAddresses: ips,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testenv: server certificate: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server.key")}
	for path, block := range map[string]*pem.Block{
		f.CA:   {Type: "CERTIFICATE", Bytes: caDER},
		f.Cert: {Type: "CERTIFICATE", Bytes: srvDER},
		f.Key:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
		}
	}
	return f
}
