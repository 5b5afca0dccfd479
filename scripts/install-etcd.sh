#!/usr/bin/env bash
# etcd needs nothing installed: the CLI runs etcd's server inside its process
# (internal/etcdserver, go.etcd.io/etcd/server/v3/embed), and the etcd
# backend's tests run internal/etcdserver/cmd/etcdserver, which they build
# with the Go toolchain; both fetch etcd like any other module. This fetches
# those modules ahead of time. For an external cluster (etcdctl, a system
# service), Debian's package is: apt-get install etcd-server etcd-client
set -euo pipefail
cd "$(dirname "$0")/.."
go -C internal/etcdserver mod download go.etcd.io/etcd/server/v3 go.etcd.io/etcd/client/v3 2>/dev/null || true
