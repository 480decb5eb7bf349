#!/usr/bin/env bash
# gen-cli-doc.sh TOWER_BINARY — print docs/cli.md, generated from the
# binary's own --help, so the reference cannot drift from the flags
# (tests/test_cli_doc.sh fails when the committed page differs).
# Usage: bash scripts/gen-cli-doc.sh build/cmd/tower > docs/cli.md
set -euo pipefail
tower=$1
cat <<'HEAD'
# The `tower` command line

Generated from `tower <command> --help` by `scripts/gen-cli-doc.sh`; `tests/test_cli_doc.sh` fails when
this page and the binary disagree.  Flags take `--name value` or `--name=value`; booleans also take a
bare `--name` (true) or `--name=false`.  Every command exits 0 on success, 1 on a failure it explains in
one line on stderr, and 2 on a bad command line.

HEAD
echo '```'
"$tower" --help
echo '```'
for cmd in $("$tower" --help | awk '/^commands:/ {on=1; next} on && NF {print $1}'); do
  echo
  echo "## tower $cmd"
  echo
  echo '```'
  "$tower" "$cmd" --help
  echo '```'
done
