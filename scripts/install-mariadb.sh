#!/usr/bin/env bash
# Installs the MariaDB server that the mysqllock tests start in temporary
# data directories (Debian 12: MariaDB 10.11, with mariadb-install-db).
# Idempotent; starts no service.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install mariadb-server mariadb-client
