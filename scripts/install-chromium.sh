#!/usr/bin/env bash
# Installs Debian's chromium, which cmd/dlock's browser test drives headless
# (through the DevTools protocol, with chromedp) to check what "dlock ui"
# shows. The test looks for "chromium" on PATH.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
apt_install chromium
