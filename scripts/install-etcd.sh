#!/usr/bin/env bash
# etcd needs nothing installed: dlock's etcd backend and its tests run etcd
# embedded in the Go process (go.etcd.io/etcd/server/v3/embed), fetched by
# the Go toolchain like any other module. For an external cluster (etcdctl,
# a system service), Debian's package is: apt-get install etcd-server etcd-client
set -euo pipefail
go mod download go.etcd.io/etcd/server/v3 go.etcd.io/etcd/client/v3 2>/dev/null || true
