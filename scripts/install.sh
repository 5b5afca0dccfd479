#!/usr/bin/env bash
# Installs everything dlock's tests need on a fresh Debian 12 machine (run as
# root, or with sudo available): each backend's server, from Debian's
# packages or the Go module proxy, and the foreign lock clients that the
# compat-mode tests run beside dlock (install-interop.sh). Idempotent: what
# is there is left alone.
set -euo pipefail
cd "$(dirname "$0")"
for s in install-*.sh; do
	[ -e "$s" ] || continue
	echo "== scripts/$s"
	bash "./$s"
done
