#!/usr/bin/env bash
# `make dev-rollout`: the kind-rollout loop against the in-memory dev cluster, as processes. Given a
# running dev cluster (KUBECONFIG: the administrator kubeconfig `dev-cluster` printed), stops the
# controller and agents this script started before, starts the controller and one agent per opted-in
# node (simulated backend) with the operator's own service-account tokens (agents' bound to their
# Node), then applies the NodeVersion (ROLLOUT_IMAGE sets its spec.image). `dev-rollout.sh stop` only stops.
set -euo pipefail

: "${KUBECONFIG:?set KUBECONFIG to the kubeconfig dev-cluster printed}"
export KUBECONFIG
UPDATE_OPERATOR=${UPDATE_OPERATOR:-target/release/update-operator}
STATE=${DEV_ROLLOUT_DIR:-target/dev-rollout}
KUBECTL=${KUBECTL:-kubectl}
NAMESPACE=${NAMESPACE:-update-operator}
NODEVERSION=${NODEVERSION:-dev/nodeversion.yaml}

stop() {
  local pidfile pid
  for pidfile in "$STATE"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Only a process this script started for this state directory (marked in its environment).
    if [ -r "/proc/$pid/environ" ] && tr '\0' '\n' < "/proc/$pid/environ" | grep -qxF "DEV_ROLLOUT_STATE=$STATE"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [ -e "/proc/$pid" ] || break; sleep 0.1; done
    fi
    rm -f "$pidfile"
  done
}

mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
stop
[ "${1:-}" = stop ] && { echo "dev-rollout: stopped"; exit 0; }

# A kubeconfig of the dev cluster with TOKEN as its credentials.
kubeconfig_with() {
  local file=$1 token=$2
  "$KUBECTL" config view --raw --minify --flatten > "$file"
  "$KUBECTL" --kubeconfig "$file" config set-credentials dev-rollout --token "$token" > /dev/null
  "$KUBECTL" --kubeconfig "$file" config set-context --current --user dev-rollout > /dev/null
}

# A TokenRequest for service account $1 (bound to Node $2 if given), posted as JSON with --raw.
token_for() {
  local account=$1 node=${2:-} body
  body=$(jq -cn --arg node "$node" '{apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest",
    spec: ({expirationSeconds: 86400} + if $node == "" then {} else
      {boundObjectRef: {apiVersion: "v1", kind: "Node", name: $node}} end)}')
  "$KUBECTL" create --raw "/api/v1/namespaces/$NAMESPACE/serviceaccounts/$account/token" -f - <<< "$body" \
    | jq -er .status.token
}

server=$("$KUBECTL" config view --minify -o jsonpath='{.clusters[0].cluster.server}')
hosts_url=${HOSTS_URL:-${server/https:/http:}}

start() {
  local name=$1; shift
  nohup env DEV_ROLLOUT_STATE="$STATE" "$UPDATE_OPERATOR" "$@" > "$STATE/$name.log" 2>&1 &
  echo $! > "$STATE/$name.pid"
}

controller_token=$(token_for update-operator-controller)
kubeconfig_with "$STATE/controller.kubeconfig" "$controller_token"
start controller -controller --kubeconfig "$STATE/controller.kubeconfig" --identity dev-rollout \
  --lease-namespace "$NAMESPACE" --metrics-addr 127.0.0.1:0 --log-format text
nodes=$("$KUBECTL" get nodes -l update.edgeless.systems/managed=true -o jsonpath='{.items[*].metadata.name}')
for node in $nodes; do
  token=$(token_for update-operator-agent "$node")
  kubeconfig_with "$STATE/agent-$node.kubeconfig" "$token"
  start "agent-$node" -agent --node-name "$node" --kubeconfig "$STATE/agent-$node.kubeconfig" \
    --host-backend simulated --simulated-hosts-url "$hosts_url" --metrics-addr 127.0.0.1:0 --log-format text
done
"$KUBECTL" apply -f "$NODEVERSION"
if [ -n "${ROLLOUT_IMAGE:-}" ]; then
  name=$("$KUBECTL" get -f "$NODEVERSION" -o jsonpath='{.metadata.name}')
  "$KUBECTL" patch nodeversion "$name" --type merge -p "$(jq -cn --arg image "$ROLLOUT_IMAGE" '{spec: {image: $image}}')"
fi
echo "dev-rollout: controller and $(wc -w <<< "$nodes") agents running (logs in $STATE); watch: make get-nodes-status"
