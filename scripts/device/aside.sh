#!/usr/bin/env bash
# What travels to the device machine (scripts/device/README.md): the repository's files without the tracked data
# folders that do not fit a call (heads/, reports/, results/: about 270 MB) and the conformance traces the device runs
# no test of (tests/fixtures/conformance/, 4 MB of a call's 64 MiB); the carried folders (.dev1-.dev4) bring what the
# scripts need of them.
#   aside.sh out    move those folders beside the checkout (../specbench-aside/), before the device calls
#   aside.sh back   move them back, after the calls
#   aside.sh files  list the files that travel (tracked, and untracked ones git does not ignore): the rehearsal
#                   (rehearse.sh) builds the device's tree from this list
set -euo pipefail
cd "$(dirname "$0")/../.."
AWAY=(heads reports results tests/fixtures/conformance)
held=../specbench-aside
case "${1:-}" in
    out)
        mkdir -p "$held"
        for d in "${AWAY[@]}"; do
            if [ -e "$held/$d" ]; then echo "aside.sh: $held/$d exists already: run 'aside.sh back' first" >&2; exit 1; fi
        done
        for d in "${AWAY[@]}"; do mkdir -p "$(dirname "$held/$d")"; mv "$d" "$held/$d"; done ;;
    back)
        for d in "${AWAY[@]}"; do
            if [ -e "$d" ] && [ -e "$held/$d" ]; then echo "aside.sh: both $d and $held/$d exist: merge them by hand" >&2; exit 1; fi
        done
        for d in "${AWAY[@]}"; do [ -e "$held/$d" ] && mv "$held/$d" "$d"; done; true ;;
    files)
        pattern=$(IFS='|'; echo "${AWAY[*]}")
        git ls-files --cached --others --exclude-standard | grep -Ev "^($pattern)/" ;;
    *)
        echo "usage: bash scripts/device/aside.sh out|back|files" >&2; exit 2 ;;
esac
