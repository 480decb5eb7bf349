#!/usr/bin/env bash
# test_cli_doc.sh TOWER_BINARY DOCS_CLI_MD — docs/cli.md must be exactly what
# scripts/gen-cli-doc.sh makes from the binary's --help.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if ! diff -u "$2" <(bash "$here/scripts/gen-cli-doc.sh" "$1"); then
  echo "docs/cli.md is out of date: run  bash scripts/gen-cli-doc.sh build/cmd/tower > docs/cli.md"
  exit 1
fi
echo "docs/cli.md matches --help of every command"
