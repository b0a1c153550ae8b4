# Sourced by the local scripts: starts moto's server on a free loopback port, sets $endpoint, and
# stops it when the calling script exits (also on Ctrl-C).
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="http://127.0.0.1:$port"
# moto with its SQS backend serialized (scripts/moto_locked.py: moto's own loses FIFO groups
# under concurrent receives and deletes), on the Python that has moto.
python="$(dirname "$(command -v moto_server)")/python"
"$python" "$(dirname "${BASH_SOURCE[0]}")/moto_locked.py" -H 127.0.0.1 -p "$port" >"/tmp/process-orders-moto-$port.log" 2>&1 &
moto_pid=$!
trap 'kill $moto_pid 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 100); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done
