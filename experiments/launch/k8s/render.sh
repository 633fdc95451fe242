#!/usr/bin/env bash
# Prints the Kubernetes manifests of this folder with their ${NAME} placeholders filled from the environment
# (README, "Launch recipes"); any other $ text is left for the pods' shells. An unset required value is an error.
#
#   IMAGE=... REPO_DIR=... SHARED_PVC=... CONFIG=... WORKDIR=... NUM_TRAINERS=2 GPUS_PER_TRAINER=8 \
#     NUM_ENV_NODES=4 ENV_CPUS_PER_NODE=32 ENV_MEMORY=128Gi bash experiments/launch/k8s/render.sh | kubectl apply -f -
#   ... bash experiments/launch/k8s/render.sh experiments/launch/k8s/ray-cluster.yaml   # one file
set -euo pipefail
here=$(dirname "$0")
: "${JOB_NAME:=agentic-rl-train}" "${RAY_CLUSTER:=agentic-rl-env}" "${COORDINATOR_PORT:=1234}"
: "${SHARED_DIR:=/shared}" "${EXTRA_ARGS:=}"
NAMES=(IMAGE REPO_DIR SHARED_PVC SHARED_DIR CONFIG WORKDIR EXTRA_ARGS JOB_NAME NUM_TRAINERS GPUS_PER_TRAINER
       COORDINATOR_PORT RAY_CLUSTER NUM_ENV_NODES ENV_CPUS_PER_NODE ENV_MEMORY)
for n in "${NAMES[@]}"; do
  if [ -z "${!n:-}" ] && [ "$n" != EXTRA_ARGS ]; then echo "render.sh: set $n (README, 'Launch recipes')" >&2; exit 1; fi
done
files=("$@"); [ "${#files[@]}" -gt 0 ] || files=("$here/ray-cluster.yaml" "$here/trainer-job.yaml")
for i in "${!files[@]}"; do
  text=$(<"${files[$i]}")
  for n in "${NAMES[@]}"; do text=${text//"\${$n}"/"${!n}"}; done
  [ "$i" = 0 ] || echo "---"
  printf '%s\n' "$text"
done
