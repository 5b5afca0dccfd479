package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/dlock/dlock/internal/etcdserver"
)

func main() {
	var cfg etcdserver.Config
	var cluster string
	flag.StringVar(&cfg.Dir, "dir", "", "the server's data directory (required)")
	flag.StringVar(&cfg.Name, "name", "", `the member's name (default "default")`)
	flag.StringVar(&cfg.ClientAddr, "client", "", "host:port clients connect to (default: a free loopback port)")
	flag.StringVar(&cfg.PeerAddr, "peer", "", "host:port other members connect to, advertised (default: a free loopback port)")
	flag.StringVar(&cfg.PeerListenAddr, "peer-listen", "", "host:port to listen on for members, when a proxy stands in front of -peer")
	flag.StringVar(&cluster, "cluster", "", "name=host:port,… every member's name and -peer address; empty for a single node")
	flag.StringVar(&cfg.ClusterToken, "cluster-token", "", "the initial cluster token (default "+etcdserver.ClusterToken+")")
	flag.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "raft heartbeat interval (default 100ms)")
	flag.DurationVar(&cfg.ElectionTimeout, "election-timeout", 0, "raft election timeout (default 1s)")
	flag.Parse()
	if err := run(cfg, cluster); err != nil {
		fmt.Fprintln(os.Stderr, "etcdserver:", err)
		os.Exit(1)
	}
}

func run(cfg etcdserver.Config, cluster string) error {
	if cluster != "" {
		cfg.Cluster = map[string]string{}
		for _, m := range strings.Split(cluster, ",") {
			name, addr, ok := strings.Cut(m, "=")
			if !ok {
				return fmt.Errorf("-cluster: %q is not name=host:port", m)
			}
			cfg.Cluster[name] = addr
		}
	}
	lg, err := zap.NewProduction(zap.IncreaseLevel(zap.WarnLevel))
	if err != nil {
		return err
	}
	cfg.Logger = lg
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	// A member waits for a quorum of its cluster to start.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := etcdserver.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Printf("ready member-id=%x\n", srv.MemberID())
	<-stop
	return nil
}
