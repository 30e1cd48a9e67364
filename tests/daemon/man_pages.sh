#!/usr/bin/env bash
# Every man page in docs/man renders without a warning (groff -ww, as man -l uses it),
# and each binary's page documents every long option its --help lists.
#   man_pages.sh SOURCE_DIR ESPGW ESPGWCTL
set -euo pipefail
SOURCE=$1
failures=0
for page in "$SOURCE"/docs/man/*.[1-8]; do
  warnings=$(groff -ww -z -man "$page" 2>&1)
  if [[ -n $warnings ]]; then echo "FAIL $(basename "$page"): $warnings"; failures=$((failures + 1))
  else echo "PASS $(basename "$page") renders without warnings"; fi
done
for binary in "$2" "$3"; do
  name=$(basename "$binary")
  page="$SOURCE/docs/man/$name.8"
  text=$(groff -man -Tutf8 -P-cbou "$page" 2>/dev/null)
  for option in $("$binary" --help | grep -oE -- '--[a-z-]+' | sort -u); do
    if grep -qF -- "$option" <<<"$text"; then :; else
      echo "FAIL $name.8 does not document $option"; failures=$((failures + 1))
    fi
  done
  echo "PASS $name.8 documents the options of $name --help"
done
[[ $failures -eq 0 ]]
