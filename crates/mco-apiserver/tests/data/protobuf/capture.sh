#!/usr/bin/env bash
# capture.sh NAME KUBECTL-ARGS...: runs kubectl at -v=9, which logs the protobuf request body
# it sends as a hex dump, and writes those bytes to NAME.bin; kubectl's output goes to stdout.
# The role-, clusterrole-, rolebinding-, clusterrolebinding- and deployment-create fixtures
# came from kubectl 1.32 against scripts/real-kube, each command as named in its unit test in
# src/protobuf.rs, with --dry-run=server -o json, e.g.
#   KUBECONFIG=/tmp/kube/kubeconfig ./capture.sh role-create create role pod-reader -n diff \
#       --verb=get,list,watch --resource=pods,deployments.apps,pods/log \
#       --resource-name=a --resource-name=b --dry-run=server -o json
set -euo pipefail
name=$1
shift
log=$(mktemp)
kubectl -v=9 "$@" 2>"$log" || { grep -v '^I' "$log" >&2 || true; }
awk '/"Request Body" body=</{on=1; next} on && /^[[:space:]]*>/{exit} on{print}' "$log" |
    sed -E 's/^[[:space:]]*[0-9a-f]{8}  //; s/  \|.*$//' | xxd -r -p >"$name.bin"
rm -f "$log"
