# Shared by the scripts/conformance/<method>.sh scripts (sourced): a venv of the reference code's own versions,
# outside the checkout, and the reference repository at a known commit.
#   reference_venv NAME PACKAGES...   make (once) and print the path of $CONFORMANCE_HOME/NAME with PACKAGES
#   reference_repo URL COMMIT         print a git dir holding COMMIT: $REFERENCE_REPO if set (a clone or a bare
#                                     mirror), else a clone of URL into $CONFORMANCE_HOME
CONFORMANCE_HOME=${CONFORMANCE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/specbench-conformance}

reference_venv() {
    local venv="$CONFORMANCE_HOME/$1"; shift
    if [ ! -x "$venv/bin/python" ]; then
        mkdir -p "$CONFORMANCE_HOME" && python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q "$@" >&2
    fi
    echo "$venv"
}

reference_repo() {
    local url=$1 commit=$2 dir
    if [ -n "${REFERENCE_REPO:-}" ]; then dir=$REFERENCE_REPO
    else
        dir="$CONFORMANCE_HOME/repos/$(basename "$url")"
        [ -d "$dir" ] || git clone -q --bare "$url" "$dir" >&2
    fi
    git -C "$dir" cat-file -e "$commit^{commit}" 2>/dev/null || { echo "conformance: $dir does not hold commit $commit" >&2; return 1; }
    echo "$dir"
}
