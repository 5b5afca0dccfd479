#!/usr/bin/env bash
# ZooKeeper for backend/zklock's tests: Debian's server (its jars under
# /usr/share/java, run by the tests with java directly) and a Java runtime.
# Does not start the service: tests start their own servers.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install zookeeper default-jre-headless
