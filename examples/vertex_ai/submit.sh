#!/bin/bash
# SPDX-License-Identifier: MIT
# A Vertex AI custom training job that reads its shards from Cloud Storage.
#
#   BUCKET=my-bucket IMAGE=us-docker.pkg.dev/PROJECT/REPO/stoker-train:latest \
#       REGION=us-central1 examples/vertex_ai/submit.sh            # gs://, native
#   READ=gcsfuse BUCKET=... IMAGE=... examples/vertex_ai/submit.sh  # /gcs/, gcsfuse
#
# Native gs:// (the default): stoker streams each shard from Cloud Storage
# itself, with the job's own identity. Vertex AI exports no key and no token;
# stoker asks the metadata server the job runs beside for an access token
# (docs/remote.md, "Where credentials come from") and renews it before it
# expires, so a run of days needs nothing more. The job's service account
# (--service-account, else the Vertex AI custom code service agent) needs
# roles/storage.objectViewer on the bucket.
#
# READ=gcsfuse: the same shards through the /gcs/BUCKET mount Vertex AI
# provides (Cloud Storage FUSE), read as local files. Both give the same
# batches; native gs:// skips the FUSE layer and its page cache, and keeps
# stoker's retries, Range resumes and node cache in charge of the network.
#
# IMAGE is any image with torch, torchvision and stoker (pip install . in
# this repository) that holds examples/train_imagenet.py at /app.
set -euo pipefail

: "${BUCKET:?set BUCKET, the bucket holding imagenet/train-*.tar}"
: "${IMAGE:?set IMAGE, a training image with stoker installed}"
REGION=${REGION:-us-central1}
READ=${READ:-gs}
SHARDS='imagenet/train-{000000..001023}.tar'

case "$READ" in
    gs) DATA="gs://$BUCKET/$SHARDS" ;;
    gcsfuse) DATA="/gcs/$BUCKET/$SHARDS" ;;
    *) echo "READ is gs or gcsfuse, not '$READ'" >&2; exit 2 ;;
esac

CONFIG=$(mktemp --suffix=.yaml)
trap 'rm -f "$CONFIG"' EXIT
cat >"$CONFIG" <<YAML
workerPoolSpecs:
  - machineSpec:
      machineType: a2-highgpu-8g
      acceleratorType: NVIDIA_TESLA_A100
      acceleratorCount: 8
    replicaCount: 1
    containerSpec:
      imageUri: $IMAGE
      command: [torchrun, --nproc_per_node, "8", /app/examples/train_imagenet.py]
      args: [--data, "$DATA", --samples, "1281167", --epochs, "90",
             --checkpoint, /gcs/$BUCKET/checkpoints/resnet50.pt, --resume]
YAML

gcloud ai custom-jobs create --region="$REGION" \
    --display-name="stoker-resnet50-$READ" --config="$CONFIG"
