package etcdserver

import (
	"context"
	"net"
	"testing"
	"time"
)

// A port Start picked and found taken when etcd binds it (an outgoing
// connection can take a port between the pick and the bind) costs a
// retry on other ports, not the start.
func TestStartPicksOtherPortsWhenAPickedOneIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	picks := 0
	pickAddr = func(addr string) (string, error) {
		if addr != "" {
			return addr, nil
		}
		picks++
		if picks == 1 {
			return taken.Addr().String(), nil
		}
		return addrOrFree("")
	}
	defer func() { pickAddr = addrOrFree }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := Start(ctx, Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start with its first client port taken: %v", err)
	}
	defer srv.Close()
	if srv.cfg.ClientAddr == taken.Addr().String() {
		t.Fatalf("the server reports the taken address %s", srv.cfg.ClientAddr)
	}
	if picks != 4 {
		t.Errorf("Start picked %d addresses, want 4 (client and peer, twice)", picks)
	}

	// Addresses the caller gave are not replaced: a taken one fails.
	if _, err := Start(ctx, Config{Dir: t.TempDir(), ClientAddr: taken.Addr().String()}); err == nil {
		t.Fatal("Start on a taken client address the caller gave succeeded")
	}
}
