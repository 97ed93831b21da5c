#!/usr/bin/env bash
# submit.sh: queue a sharded kvlab sweep as a Slurm array, then its merge.
#
#   bash experiments/slurm/submit.sh N [CONFIG] [OUT]      (defaults: default.ini, results/slurm)
# Prints the two job ids. The merge job runs after every array task ended (afterany, so a
# failed point does not block the merge; kvlab exits 1 for failed points) and writes
# $OUT/merged.h5 from the shard files present. sbatch options (partition, --gres=gpu:1,
# account) go in SBATCH_EXTRA, e.g. SBATCH_EXTRA="--gres=gpu:1 -p gpu".
set -euo pipefail
n="${1:?usage: submit.sh N [CONFIG] [OUT]}"
config="${2:-experiments/configs/default.ini}"
out="${3:-results/slurm}"
kvlab="$(realpath "${KVLAB:-build/experiments/kvlab}" 2>/dev/null || true)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: N must be a positive integer, got '$n'" >&2; exit 2; }
[ -r "$config" ] || { echo "submit.sh: cannot read config $config" >&2; exit 2; }
[ -x "$kvlab" ] || { echo "submit.sh: kvlab binary not found (build it, or set KVLAB)" >&2; exit 2; }
"$kvlab" sweep "$config" --dry-run > /dev/null   # a bad config fails here, before queueing
mkdir -p "$out"
# shellcheck disable=SC2086
array=$(sbatch --parsable ${SBATCH_EXTRA:-} --array=0-$((n - 1)) --output="$out/kvlab-%A_%a.out" \
        --export=ALL,CONFIG="$config",OUT="$out",KVLAB="$kvlab" "$here/kvlab_array.sbatch")
merge=$(sbatch --parsable --dependency=afterany:"$array" --job-name=kvlab-merge --output="$out/kvlab-merge-%j.out" \
        --wrap="\"$kvlab\" merge --force --out \"$out/merged.h5\" \"$out\"/shard-*-of-$n.h5")
echo "array job $array ($n tasks), merge job $merge -> $out/merged.h5"
