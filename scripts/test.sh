#!/usr/bin/env bash
# Install everything the test suite needs (Python extras, Debian's Chromium for the browser
# test) and run the whole suite. Used by the README's Quickstart and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "warning: could not install chromium; browser tests will be skipped" >&2
    fi
fi
python3 -m pip install -q -e '.[all,dev]'
export SPECSCOPE_PAPER_DIR="${SPECSCOPE_PAPER_DIR:-$(cd .. && pwd)/shared/paper}"
python3 -m pytest -q "$@"
