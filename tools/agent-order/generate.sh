#!/usr/bin/env bash
# Regenerates tools/agent-order/agent.order: the functions the agent runs, in the order it first runs them, then
# every other function of the agent and shared crates. Run it after changes to what the agent runs, or when
# resolve.py reports few names found (`make static-binary` prints it). Needs valgrind (callgrind) and binutils.
#
# How: the static binary linked with its symbols, a 4-node benchmark whose two agent processes run under callgrind,
# their call graphs dumped once the rollout is done (so startup, watch, stage, drain and reboot are in), and the
# names taken without their hashes (resolve.py says why).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${TARGET:-x86_64-unknown-linux-gnu}
rustflags=${STATIC_RUSTFLAGS:-"-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs"}
work=$(mktemp -d)
trap 'pkill -f "$work/bench" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

RUSTFLAGS="$rustflags" cargo rustc --release --locked --target "$target" --bin update-operator -- -C strip=none
cp "target/$target/release/update-operator" "$work/update-operator"
cargo build --profile harness --locked -p dev --bin bench
cp target/harness/bench "$work/bench"

# The bench starts the controller and the agents from --binary: the agents under callgrind.
cat > "$work/run" <<WRAP
#!/usr/bin/env bash
for arg in "\$@"; do
  if [ "\$arg" = "-agent" ]; then
    exec valgrind --tool=callgrind --callgrind-out-file=$work/callgrind.%p --dump-instr=no --compress-strings=no \
      --demangle=no "$work/update-operator" "\$@"
  fi
done
exec "$work/update-operator" "\$@"
WRAP
chmod +x "$work/run"

"$work/bench" --binary "$work/run" --nodes 4 --process-agents 2 --steady-minutes 60 --max-rollout-seconds 300 \
  > "$work/bench.json" 2> "$work/bench.log" &
for _ in $(seq 1 300); do
  grep -q "rollout of" "$work/bench.log" && break
  sleep 1
done
grep "rollout of" "$work/bench.log"
sleep 5
callgrind_control --dump >/dev/null
sleep 5
ls "$work"/callgrind.*.1 >/dev/null

python3 - "$work" > tools/agent-order/agent.order <<'PY'
import glob, re, sys
sys.path.insert(0, "tools/agent-order")
from resolve import symbols
work = sys.argv[1]
pairs = symbols(work + "/update-operator")
demangled = dict(pairs)
names, seen = [], set()
def add(name):
    if name not in seen:
        seen.add(name)
        names.append(name)
for path in sorted(glob.glob(work + "/callgrind.*.1")):
    for line in open(path, errors="replace"):
        if line.startswith(("fn=", "cfn=")):
            symbol = re.sub(r"'\d+$", "", line.split("=", 1)[1].strip())
            if symbol in demangled:
                add(demangled[symbol])
for _, name in pairs:
    if name.startswith(("agent::", "shared::")):
        add(name)
print("# The agent's functions, in the order it first runs them (tools/agent-order/generate.sh; resolve.py).")
print("# Generated; do not edit.")
print("\n".join(names))
PY
wc -l tools/agent-order/agent.order
