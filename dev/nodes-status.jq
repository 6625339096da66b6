# `make get-nodes-status`: for `kubectl get nodes -o json`, each node's update.edgeless.systems/
# annotations and labels, and whether it is cordoned.
.items
| map({(.metadata.name): (
    ((.metadata.annotations // {}) * (.metadata.labels // {}))
    | with_entries(select(.key | startswith("update.edgeless.systems/")))
    | . + {unschedulable: (.spec.unschedulable // false)}
  )})
| add
