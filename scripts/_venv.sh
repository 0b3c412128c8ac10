# Sourced by scripts/serve and scripts/test: make .venv and install the project into it.
# Takes the extras to install as one argument, comma-separated ("test,video"; "" for none).
# Reinstalls only when pyproject.toml changed or an extra is asked for that is not
# installed (an install with more extras also serves a call asking fewer).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
extra="${1:-}"
py="${PYTHON:-python3}"
"$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
  || { echo "sglang-mm-grpc needs Python >= 3.10 (found $("$py" --version 2>&1))" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv" >&2
  "$py" -m venv "$venv"
fi
stamp="$venv/.installed"
hash="$(sha256sum < "$root/pyproject.toml" | cut -c1-16)"
have="$(cat "$stamp" 2>/dev/null || true)"
# The stamp is "HASH[extra,extra]": installed when the hash matches and every asked extra is listed.
installed=1
if [ "${have%%\[*}" != "$hash" ]; then
  installed=0
else
  have_extras=","; case "$have" in *\[*\]) have_extras=",${have#*\[}"; have_extras="${have_extras%\]},";; esac
  IFS=, read -r -a asked <<< "$extra"
  for e in "${asked[@]}"; do
    [ -z "$e" ] && continue
    case "$have_extras" in *",$e,"*) ;; *) installed=0;; esac
  done
fi
if [ "$installed" -eq 0 ]; then
  echo "installing sglang-mm-grpc${extra:+[$extra]} into $venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  # (without setuptools' generic "Editable installation" banner, printed on every editable
  # install). Byte-compiled after, on every core (pip compiles one file at a time): where
  # PYTHONDONTWRITEBYTECODE is set nothing would compile later, and every process would
  # compile what it imports again. A file no Python can compile (some packages ship a few)
  # is left as pip leaves it.
  PYTHONWARNINGS="ignore:Editable installation" "$venv/bin/python" -m pip install -q --no-compile -e "$root${extra:+[$extra]}" >&2
  "$venv/bin/python" -m compileall -q -j 0 "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
  echo "$hash${extra:+[$extra]}" > "$stamp"
fi
# The package's own bytecode, kept fresh (quick when it is): where PYTHONDONTWRITEBYTECODE
# is set, an import writes none, and every process (a test run starts hundreds) would
# compile the package from source again.
"$venv/bin/python" -m compileall -q "$root/sglang_mm_grpc" "$root/kernels" >/dev/null
