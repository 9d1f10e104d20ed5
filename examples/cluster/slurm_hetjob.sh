#!/bin/bash
# SPDX-License-Identifier: MIT
# A Slurm heterogeneous job: GPU nodes train, CPU-only nodes decode.
#
#   sbatch examples/cluster/slurm_hetjob.sh
#
# Component 0 (GPU nodes) runs one training process per GPU and, on its first
# node, the Dask scheduler; component 1 (CPU nodes) runs one Dask worker per
# node, whose tasks decode with every core of the node (stoker splits the
# node's cores among the worker's task threads, here 1). The trainers' own
# decode threads keep working beside the workers; batches are the same with
# or without them, so the CPU nodes can come and go.
#
# Needs on every node: stoker importable by /usr/bin/python3 (pip install . or
# PYTHONPATH pointing at build-rel/python), python3-distributed, and the shards
# and the index at the same URLs (shared filesystem, http(s), s3, gs).
#
#SBATCH --job-name=stoker-train
#SBATCH --time=24:00:00
#SBATCH --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task=12
#SBATCH hetjob
#SBATCH --nodes=4 --ntasks-per-node=1 --cpus-per-task=64
set -euo pipefail

DATA=${DATA:-/data/imagenet/train-{000000..001023}.tar}
INDEX=${INDEX:-/data/imagenet/index.json}   # stoker index -o "$INDEX" "$DATA"
PORT=8786
SCHED=$(scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0" | head -n 1)
ADDRESS=tcp://$SCHED:$PORT

# The scheduler: one process, little CPU, on the first GPU node.
srun --het-group=0 --nodes=1 --ntasks=1 --cpus-per-task=1 --overlap \
    dask-scheduler --port "$PORT" --no-dashboard &

# One worker per CPU node; --preload imports stoker when the worker starts,
# not in its first task. Tasks hold up to ~300 MB of pixels each (two
# shuffle windows of 224x224 uint8 images): --memory-limit 0 keeps Dask from
# spilling them to disk.
srun --het-group=1 --ntasks-per-node=1 \
    dask-worker "$ADDRESS" --nthreads 1 --nworkers 1 --memory-limit 0 --no-dashboard \
    --preload stoker &

# The trainers: one rank per GPU. A trainer that cannot reach the scheduler
# at start fails with stoker.ClusterError; a scheduler lost later leaves the
# epoch to the ranks' own decode threads.
MASTER_ADDR=$SCHED MASTER_PORT=29500 srun --het-group=0 \
    bash -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID \
             exec python3 examples/train_imagenet.py --data "$0" --index "$1" --cluster "$2" \
                 --threads $((SLURM_CPUS_PER_TASK - 2)) --epochs 90' \
    "$DATA" "$INDEX" "$ADDRESS"

kill %1 %2 2>/dev/null || true
