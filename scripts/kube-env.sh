#!/usr/bin/env bash
# A real Kubernetes control plane (etcd + kube-apiserver, no kubelet) on loopback, for tests
# and for trying the router's cluster mode on a laptop.
#
#   scripts/kube-env.sh build            build kube-apiserver, kubectl, etcd and
#                                        kube-controller-manager once per machine into
#                                        $KTHENA_K8S_CACHE (default /var/cache/kthena/k8s)
#   scripts/kube-env.sh up DIR [--controller-manager]
#                                        start etcd and kube-apiserver on free loopback ports,
#                                        wait for /readyz, write DIR/kubeconfig and DIR/env;
#                                        with --controller-manager also start it (see below)
#   scripts/kube-env.sh controller-manager DIR
#                                        start kube-controller-manager against DIR's control
#                                        plane with the controllers a laptop release needs:
#                                        deployment, replicaset, garbagecollector, namespace,
#                                        serviceaccount, serviceaccount-token
#   scripts/kube-env.sh down DIR         stop what `up` and `controller-manager` started (by PID)
#   scripts/kube-env.sh stop-apiserver DIR    stop only kube-apiserver (etcd keeps the data)
#   scripts/kube-env.sh start-apiserver DIR   start it again with the same port and flags
#   scripts/kube-env.sh crds DIR         install into that control plane Kthena's CRDs (deploy/crds),
#                                        the Gateway API CRDs and the Inference Extension's
#                                        InferencePool CRD (deploy/gateway-api), then wait until
#                                        they are Established
#   scripts/kube-env.sh paths            print the cache paths as shell assignments
#
# The binaries come from the official Go modules, pinned by the wrapper modules under
# scripts/k8s/ (go.mod + go.sum, no Go source). Go is needed only for `build`.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KTHENA_K8S_CACHE:-/var/cache/kthena/k8s}"
K8S_VERSION="v1.37.2"
K8S_MAJOR="1"
K8S_MINOR="37"
ETCD_VERSION="v3.6.16"
GATEWAY_API_VERSION="v1.6.3"
STAMP="kubernetes=$K8S_VERSION etcd=$ETCD_VERSION gateway-api=$GATEWAY_API_VERSION"
# kube-controller-manager is stamped on its own (STAMP.controller-manager), so that adding it
# to a machine never rebuilds the binaries above.
KCM_STAMP="kubernetes=$K8S_VERSION"
# Deployments into ReplicaSets into Pods, owner-reference garbage collection (deleting a
# Deployment removes its pods), namespace deletion, each namespace's `default`
# ServiceAccount and service-account token Secrets. No endpoint(slice) controller:
# EndpointSlices may not hold the loopback pod IPs of the simulated node.
KCM_CONTROLLERS="deployment,replicaset,garbagecollector,namespace,serviceaccount,serviceaccount-token"

log() { echo "kube-env: $*" >&2; }
die() { log "error: $*"; exit 1; }

built() {
    [[ -x "$CACHE/kube-apiserver" && -x "$CACHE/kubectl" && -x "$CACHE/etcd" \
        && -f "$CACHE/crds/gateway-api/VERSION" && "$(cat "$CACHE/STAMP" 2>/dev/null)" == "$STAMP" ]]
}

kcm_built() {
    [[ -x "$CACHE/kube-controller-manager" && "$(cat "$CACHE/STAMP.controller-manager" 2>/dev/null)" == "$KCM_STAMP" ]]
}

go_build() { # MODULE_DIR PACKAGE OUTPUT [LDFLAGS]
    local dir="$1" pkg="$2" out="$3" ldflags="${4:-}"
    log "building $(basename "$out") from $pkg"
    (cd "$dir" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false \
        go build -mod=readonly -tags selinux,notest -ldflags "-s -w $ldflags" \
        -o "$out.tmp" "$pkg")
    mv -f "$out.tmp" "$out"
}

# -X flags giving the Kubernetes binaries their version.
version_ldflags() {
    local ver=""
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ver+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$K8S_MAJOR"
        ver+=" -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean"
    done
    echo "$ver"
}

cmd_build() {
    if built && kcm_built; then
        log "already built in $CACHE ($STAMP; kube-controller-manager $KCM_STAMP)"
        return 0
    fi
    command -v go >/dev/null || die "go is needed to build the control plane (once per machine)"
    mkdir -p "$CACHE/crds/gateway-api"
    # One build at a time: a second caller waits for the first, then finds it done.
    exec 9>"$CACHE/.build.lock"
    flock 9
    built || build_control_plane
    kcm_built || build_controller_manager
}

build_control_plane() {
    local start=$SECONDS ver
    ver="$(version_ldflags)"
    go_build "$ROOT/scripts/k8s/kubernetes" k8s.io/kubernetes/cmd/kube-apiserver "$CACHE/kube-apiserver" "$ver"
    go_build "$ROOT/scripts/k8s/kubernetes" k8s.io/kubernetes/cmd/kubectl "$CACHE/kubectl" "$ver"
    go_build "$ROOT/scripts/k8s/etcd" go.etcd.io/etcd/server/v3 "$CACHE/etcd"
    # Gateway API's standard-channel CRDs, as published in its Go module.
    local gw
    gw="$(cd "$ROOT/scripts/k8s/kubernetes" && GOTOOLCHAIN=local GOFLAGS=-mod=mod \
        go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    for kind in gatewayclasses gateways httproutes grpcroutes referencegrants; do
        install -m 644 "$gw/config/crd/standard/gateway.networking.k8s.io_$kind.yaml" "$CACHE/crds/gateway-api/"
    done
    echo "$GATEWAY_API_VERSION" >"$CACHE/crds/gateway-api/VERSION"
    echo "$STAMP" >"$CACHE/STAMP"
    log "built in $((SECONDS - start))s; $(du -sh "$CACHE" | cut -f1) in $CACHE"
}

# The same k8s.io/kubernetes module as kube-apiserver; its own wrapper module
# (scripts/k8s/controller-manager) because it imports packages (kubelet volume plugins,
# cadvisor) whose sums the apiserver's module does not need.
build_controller_manager() {
    local start=$SECONDS
    go_build "$ROOT/scripts/k8s/controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager \
        "$CACHE/kube-controller-manager" "$(version_ldflags)"
    echo "$KCM_STAMP" >"$CACHE/STAMP.controller-manager"
    log "kube-controller-manager built in $((SECONDS - start))s"
}

# A free port below the kernel's ephemeral range (32768..), where the many `bind(0)` sockets
# and outgoing connections of a test run do not land: a port picked here is much less likely to
# be taken before etcd or kube-apiserver binds it (`up` retries with new ports if it is).
free_port() {
    python3 -c '
import random, socket
for _ in range(200):
    p = random.randint(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
'
}

# A CA and a serving certificate for 127.0.0.1/localhost, and the service-account key.
make_certs() {
    local d="$1/pki"
    mkdir -p "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=kthena-test-ca" \
        -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
        -keyout "$d/apiserver.key" -out "$d/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >"$d/ext.cnf"
    openssl x509 -req -in "$d/apiserver.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
        -CAcreateserial -days 30 -extfile "$d/ext.cnf" -out "$d/apiserver.crt" 2>/dev/null
    openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
    openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

start_etcd() {
    local dir="$1" client="$2" peer="$3"
    setsid nohup "$CACHE/etcd" --name default --data-dir "$dir/etcd" \
        --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "default=http://127.0.0.1:$peer" --unsafe-no-fsync --log-level warn \
        >"$dir/etcd.log" 2>&1 </dev/null &
    echo $! >"$dir/etcd.pid"
}

start_apiserver() {
    local dir="$1"
    # shellcheck disable=SC1091
    source "$dir/ports"
    setsid nohup "$CACHE/kube-apiserver" \
        --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
        --cert-dir="$dir/pki" --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
        --client-ca-file="$dir/pki/ca.crt" \
        --service-cluster-ip-range=10.0.0.0/24 --allow-privileged=true \
        --disable-admission-plugins=ServiceAccount --authorization-mode=RBAC \
        --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
        --service-account-issuer="https://127.0.0.1:$APISERVER_PORT" \
        --token-auth-file="$dir/tokens.csv" --endpoint-reconciler-type=none \
        >>"$dir/apiserver.log" 2>&1 </dev/null &
    echo $! >"$dir/apiserver.pid"
    wait_ready "$dir"
}

# Waits up to 10 s for etcd's /health; returns 1 when etcd exited.
etcd_up() {
    local dir="$1"
    for _ in $(seq 100); do
        curl -fsS "http://127.0.0.1:$ETCD_PORT/health" >/dev/null 2>&1 && return 0
        kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null || { tail -5 "$dir/etcd.log" >&2; return 1; }
        sleep 0.1
    done
    return 0
}

# etcd and kube-apiserver on fresh ports; when a port was taken between the pick and the bind
# (another process bound it), both are stopped and started again on new ports (5 attempts).
start_control_plane() {
    local dir="$1" attempt
    for attempt in 1 2 3 4 5; do
        printf 'ETCD_PORT=%s\nETCD_PEER_PORT=%s\nAPISERVER_PORT=%s\n' "$(free_port)" "$(free_port)" "$(free_port)" >"$dir/ports"
        source "$dir/ports"
        : >"$dir/apiserver.log"
        start_etcd "$dir" "$ETCD_PORT" "$ETCD_PEER_PORT"
        etcd_up "$dir" && start_apiserver "$dir" && return 0
        grep -qiE "address already in use|bind: " "$dir/apiserver.log" "$dir/etcd.log" 2>/dev/null \
            || die "kube-apiserver exited"
        log "a port was taken (attempt $attempt); starting again on new ports"
        stop_pid "$dir/apiserver.pid" 30
        stop_pid "$dir/etcd.pid"
        rm -rf "$dir/etcd"
    done
    die "kube-apiserver could not bind its ports after 5 attempts"
}

# Waits for /readyz. Returns 0 when ready, 1 when kube-apiserver exited (its log is shown),
# and dies after 60 s.
wait_ready() {
    local dir="$1" token
    token="$(cut -d, -f1 "$dir/tokens.csv")"
    source "$dir/ports"
    for _ in $(seq 600); do
        if curl -fsS --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $token" \
            "https://127.0.0.1:$APISERVER_PORT/readyz" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null || { tail -20 "$dir/apiserver.log" >&2; return 1; }
        sleep 0.1
    done
    tail -20 "$dir/apiserver.log" >&2
    die "kube-apiserver not ready after 60s"
}

write_kubeconfig() {
    local dir="$1" token
    token="$(cut -d, -f1 "$dir/tokens.csv")"
    source "$dir/ports"
    cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kthena-test
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$dir/pki/ca.crt")
users:
- name: admin
  user:
    token: $token
contexts:
- name: kthena-test
  context:
    cluster: kthena-test
    user: admin
    namespace: default
current-context: kthena-test
EOF
    cat >"$dir/env" <<EOF
export KUBECONFIG=$dir/kubeconfig
export KUBECTL=$CACHE/kubectl
export KTHENA_APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
export KTHENA_APISERVER_PID=$(cat "$dir/apiserver.pid")
export KTHENA_ETCD_PID=$(cat "$dir/etcd.pid")
export KTHENA_GATEWAY_API_CRDS=$CACHE/crds/gateway-api
export KTHENA_INFERENCE_POOL_CRD=$ROOT/deploy/gateway-api/inference.networking.k8s.io_inferencepools.yaml
EOF
}

# Kthena's CRDs, the Gateway API standard CRDs and the InferencePool CRD (whose group,
# inference.networking.k8s.io, needs the api-approved.kubernetes.io annotation it carries).
cmd_crds() {
    local dir="${1:?usage: kube-env.sh crds DIR}"
    built || die "control plane not built: run scripts/kube-env.sh build"
    [[ -f "$dir/kubeconfig" ]] || die "no control plane in $dir (kube-env.sh up $dir first)"
    local kc=("$CACHE/kubectl" --kubeconfig "$dir/kubeconfig")
    # Server-side: the ModelServing CRD is too large for client-side apply's annotation.
    "${kc[@]}" apply --server-side --force-conflicts \
        -f "$ROOT/deploy/crds/" -f "$CACHE/crds/gateway-api/" -f "$ROOT/deploy/gateway-api/" >&2
    "${kc[@]}" wait --for condition=Established --timeout=60s crd --all >&2
}

cmd_up() {
    local dir="${1:?usage: kube-env.sh up DIR [--controller-manager]}" kcm="${2:-}"
    [[ -z "$kcm" || "$kcm" == --controller-manager ]] || die "unknown option $kcm"
    built || die "control plane not built: run scripts/kube-env.sh build"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    [[ -f "$dir/apiserver.pid" ]] && kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null \
        && die "a control plane already runs in $dir (kube-env.sh down $dir first)"
    local start=$SECONDS
    make_certs "$dir"
    echo "$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n'),admin,admin-uid,system:masters" >"$dir/tokens.csv"
    start_control_plane "$dir"
    write_kubeconfig "$dir"
    [[ -n "$kcm" ]] && cmd_controller_manager "$dir"
    log "ready in $((SECONDS - start))s at https://127.0.0.1:$APISERVER_PORT (source $dir/env)"
}

# kube-controller-manager with the admin kubeconfig (one identity for every controller), no
# serving port, no leader election; the service-account key signs the token Secrets.
cmd_controller_manager() {
    local dir="${1:?usage: kube-env.sh controller-manager DIR}"
    dir="$(cd "$dir" && pwd)"
    kcm_built || die "kube-controller-manager not built: run scripts/kube-env.sh build"
    [[ -f "$dir/kubeconfig" ]] || die "no control plane in $dir (kube-env.sh up $dir first)"
    if [[ -s "$dir/controller-manager.pid" ]] && kill -0 "$(cat "$dir/controller-manager.pid")" 2>/dev/null; then
        log "kube-controller-manager of $dir is already running (PID $(cat "$dir/controller-manager.pid"))"
        return 0
    fi
    setsid nohup "$CACHE/kube-controller-manager" \
        --kubeconfig="$dir/kubeconfig" --controllers="$KCM_CONTROLLERS" \
        --secure-port=0 --leader-elect=false --use-service-account-credentials=false \
        --service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/ca.crt" \
        --concurrent-deployment-syncs=5 --concurrent-replicaset-syncs=5 \
        >>"$dir/controller-manager.log" 2>&1 </dev/null &
    echo $! >"$dir/controller-manager.pid"
    echo "export KTHENA_CONTROLLER_MANAGER_PID=$(cat "$dir/controller-manager.pid")" >>"$dir/env"
    sleep 0.2
    kill -0 "$(cat "$dir/controller-manager.pid")" 2>/dev/null \
        || { tail -20 "$dir/controller-manager.log" >&2; die "kube-controller-manager exited"; }
    log "kube-controller-manager started ($KCM_CONTROLLERS; log $dir/controller-manager.log)"
}

stop_pid() { # PIDFILE [TENTHS_OF_A_SECOND]
    local f="$1" wait="${2:-100}" pid
    [[ -f "$f" ]] || return 0
    pid="$(cat "$f")"
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq "$wait"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

cmd_down() {
    local dir="${1:?usage: kube-env.sh down DIR}"
    # kube-apiserver drains open watches for up to a minute on SIGTERM; its state is in etcd,
    # so a test control plane gives it 3 s and then kills it.
    stop_pid "$dir/controller-manager.pid" 30
    stop_pid "$dir/apiserver.pid" 30
    stop_pid "$dir/etcd.pid"
}

cmd_start_apiserver() {
    local dir="${1:?usage: kube-env.sh start-apiserver DIR}"
    dir="$(cd "$dir" && pwd)"
    # Already running: a second kube-apiserver would fail to bind, and its PID would replace
    # the live one's in apiserver.pid, which `stop-apiserver` and `down` then could not stop.
    if [[ -s "$dir/apiserver.pid" ]] && kill -0 "$(cat "$dir/apiserver.pid")" 2>/dev/null; then
        echo "kube-apiserver of $dir is already running (PID $(cat "$dir/apiserver.pid"))" >&2
        return 0
    fi
    start_apiserver "$dir" || die "kube-apiserver exited"
    write_kubeconfig "$dir"
}

case "${1:-}" in
    build) cmd_build ;;
    up) cmd_up "${2:-}" "${3:-}" ;;
    controller-manager) cmd_controller_manager "${2:-}" ;;
    down) cmd_down "${2:-}" ;;
    stop-apiserver) stop_pid "${2:?usage: kube-env.sh stop-apiserver DIR}/apiserver.pid" 30 ;;
    start-apiserver) cmd_start_apiserver "${2:-}" ;;
    crds) cmd_crds "${2:-}" ;;
    paths) printf 'KTHENA_K8S_CACHE=%s\nKUBECTL=%s/kubectl\nKUBE_CONTROLLER_MANAGER=%s/kube-controller-manager\nKTHENA_GATEWAY_API_CRDS=%s/crds/gateway-api\n' "$CACHE" "$CACHE" "$CACHE" "$CACHE" ;;
    *) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
