#!/bin/sh
# Installs the MariaDB server that the mysqllock tests start in a temporary
# data directory (Debian 12: MariaDB 10.11). Idempotent; starts no service.
set -eu
export DEBIAN_FRONTEND=noninteractive
pkgs="mariadb-server mariadb-client"
if dpkg-query -W -f='${Status}\n' $pkgs 2>/dev/null | grep -vq "install ok installed"; then
	: # some package is missing: install below
elif dpkg-query -W $pkgs >/dev/null 2>&1; then
	exit 0
fi
# Keep the package's service from being started during installation.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' >"$policy"
	chmod +x "$policy"
	own_policy=1
fi
trap '[ "$own_policy" = 1 ] && rm -f "$policy"' EXIT
if ! apt-get install -y --no-install-recommends $pkgs; then
	apt-get update
	apt-get install -y --no-install-recommends $pkgs
fi
