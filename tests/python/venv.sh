#!/bin/sh
# tests/python/venv.sh [DIR]: makes the virtual environment the ingest tests
# (test_pack_text.py, docs-ingest.md's examples) use for the PyPI-only
# libraries `python3 -m feedclient.pack text` needs: tokenizers and pyarrow.
# Debian's python3 with --system-site-packages, so numpy, pytest and torch
# stay Debian's; pyarrow is pinned to a release built against numpy 1.x,
# which works with Debian's numpy 1.24. Idempotent: an environment that
# already imports both is left alone. Exits non-zero, saying why, when the
# environment cannot be made (no network to PyPI): the tests then skip.
set -eu
dir=${1:-$(dirname "$0")/../../build/venv-ingest}
py="$dir/bin/python"
if [ -x "$py" ] && "$py" -c "import tokenizers, pyarrow" 2>/dev/null; then
  echo "$dir"
  exit 0
fi
/usr/bin/python3 -m venv --system-site-packages "$dir"
"$py" -m pip install -q --disable-pip-version-check "pyarrow==15.0.2" "tokenizers>=0.15,<0.23" >&2
"$py" -c "import tokenizers, pyarrow, numpy" >&2
echo "$dir"
