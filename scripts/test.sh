#!/usr/bin/env bash
# Install everything the test suite needs (Python extras, Debian's Chromium for the browser
# test) and run the whole suite. Used by the README's Quickstart and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
            || echo "warning: could not install chromium; the browser test will be skipped" >&2
    else
        echo "warning: no chromium, and no apt-get as root to install it: install it yourself, or the browser test" \
             "will be skipped" >&2
    fi
fi
python3 -m pip install -q -e '.[all,dev]'
export SPECSCOPE_PAPER_DIR="${SPECSCOPE_PAPER_DIR:-$(cd .. && pwd)/shared/paper}"
if [ ! -f "$SPECSCOPE_PAPER_DIR/llama3.1-8b_gsm8k.jsonl" ]; then
    echo "note: no paper traces in $SPECSCOPE_PAPER_DIR (llama3.1-8b_gsm8k.jsonl, llama3.1-8b_sharegpt.jsonl):" \
         "the tests that read them will be skipped, each saying so" >&2
fi
python3 -m pytest -q "$@"
