# Sourced by scripts/serve and scripts/test: make .venv and install the project into it.
# Reinstalls only when pyproject.toml changed or an extra is asked for that is not
# installed (an install with the test extra also serves).
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
want="$hash${extra:+[$extra]}"
have="$(cat "$stamp" 2>/dev/null || true)"
if [ "$have" != "$want" ] && { [ -n "$extra" ] || [ "${have%%\[*}" != "$hash" ]; }; then
  echo "installing sglang-mm-grpc${extra:+[$extra]} into $venv" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$root${extra:+[$extra]}" >&2
  echo "$want" > "$stamp"
fi
