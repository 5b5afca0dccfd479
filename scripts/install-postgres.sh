#!/usr/bin/env bash
# Installs the PostgreSQL server for backend/pglock's tests: Debian's
# postgresql package (initdb and postgres under /usr/lib/postgresql/*/bin).
# The tests run their own cluster in a temporary directory, as the
# unprivileged system user "dlocktest" when run as root (PostgreSQL refuses
# to run as root); that user is made here too, so that tests need not.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install postgresql
if [ "$(id -u)" -eq 0 ] && ! id dlocktest >/dev/null 2>&1; then
	useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin dlocktest
fi
ls /usr/lib/postgresql/*/bin/initdb >/dev/null
