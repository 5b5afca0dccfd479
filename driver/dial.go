package driver

import (
	"context"
	"net"
)

// DialAny dials every address (host:port) once over TCP, in parallel, and
// returns nil as soon as one accepts a connection (which it closes), or
// the last error when none does. A backend calls it before its engine's
// client, where that client would retry an ensemble that refuses every
// connection until its own timeout, without a word: a refused connection
// is then reported at once, as the other backends report it.
func DialAny(ctx context.Context, addrs []string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		go func() {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err == nil {
				c.Close()
			}
			errs <- err
		}()
	}
	var err error
	for range addrs {
		if err = <-errs; err == nil {
			return nil
		}
	}
	return err
}
