#!/usr/bin/env bash
# Installs redis-server, which the Redis and Redlock backends' tests start
# on free loopback ports (internal/testenv/redis.go). Debian's service is
# not started: tests run their own servers.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install redis-server
