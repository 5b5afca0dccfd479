#!/usr/bin/env bash
# Installs the Temporal CLI, whose "temporal server start-dev" is the
# Temporal server dlock's tests run against (Temporal server 1.29 with a
# SQLite store). Built from the Go module proxy; needs Go on PATH.
# Idempotent; starts nothing.
set -euo pipefail

version=v1.5.1
gobin="$(go env GOBIN)"
[ -n "$gobin" ] || gobin="$(go env GOPATH | cut -d: -f1)/bin"

if command -v temporal >/dev/null 2>&1 || [ -x "$gobin/temporal" ]; then
	echo "temporal CLI already installed: $(command -v temporal || echo "$gobin/temporal")"
	exit 0
fi

# Newer CLI versions cannot be built with "go install" (their go.mod has
# replace directives); v1.5.1 can.
go install "github.com/temporalio/cli/cmd/temporal@$version"
echo "installed $gobin/temporal"
