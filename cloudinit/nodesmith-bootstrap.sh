#!/bin/bash
# nodesmith-bootstrap for Ignition nodes: turn a booted machine into a Kubernetes node, and say
# how it went. Flatcar has no python3, so this is cloudinit/nodesmith-bootstrap.py's twin in
# bash: the same phases, reasons, retries, deadline and /run/cluster-api/bootstrap-status.json,
# checked by the same test table (tests/render/test_node_script.py). Read the Python script's
# docstring for the rules; the differences: its config is a bash file of variables (written
# by nodesmith with every value shell-quoted), and output that is not UTF-8 loses the bytes
# that are not (iconv -c) where Python puts U+FFFD.
#
# Run by /etc/kubeadm.sh (CABPK's, from kubeadm.service) with the path of its config. Uses bash, coreutils,
# util-linux (setsid), GNU sed and grep, iconv and (for reports) curl: all in Flatcar's base
# image.

set -u
RUN=/run/cluster-api
STATUS=$RUN/bootstrap-status.json
SENTINEL=$RUN/bootstrap-success.complete
JOINED=/etc/kubernetes/kubelet.conf
PKI_COPY=/run/kubeadm/pki.orig
# kubeadm reset empties the static pod directory; what the user's files and pre-commands put
# there (CAPV's kube-vip) is kept here and put back before the next try, as the PKI is.
MANIFESTS=/etc/kubernetes/manifests
MANIFESTS_COPY=/run/kubeadm/manifests.orig
KILL_GRACE=10
SLACK_MS=1000
TOKEN_RE='\b[a-z0-9]{6}\.[a-z0-9]{16}\b'
CONFIG_VERSION_RE='no kind [^ ]+ is registered for version|uses an old API spec|unsupported apiVersion'
CONFIG_DECODE_RE='error converting YAML to JSON|unknown field|strict decoding error|cannot unmarshal|did not find expected key|mapping values are not allowed'
VALIDATION_RE='\b(Invalid|Unsupported|Required|Forbidden) value:'

now() { date -u +%Y-%m-%dT%H:%M:%SZ; }
now_ms() { local t=${EPOCHREALTIME/./}; echo "${t:0:-3}"; }
log() { printf '%s' "$1"; }

# ---------------------------------------------------------------- status

PHASE=Running REASON=Started MESSAGE="" TERMINAL=false ATTEMPTS=0 STARTED_AT=$(now)
FINISHED_AT="" NEXT_RETRY_AT="" UPDATED_AT="" UNRECORDED=""
HISTORY=()

redact() { # text [limit]: secrets and any bootstrap token out; the last limit characters
    local text=$1 s
    for s in "${REDACT[@]}"; do [ -n "$s" ] && text=${text//"$s"/<redacted>}; done
    text=$(printf '%s' "$text" | sed -E "s/$TOKEN_RE/<redacted>/g"; printf x)
    text=${text%x}
    local limit=${2:-2000}
    if [ "$limit" -gt 0 ]; then text=$(tail_chars "$text" "$limit"; printf x); text=${text%x}; fi
    printf '%s' "$text"
}

tail_chars() { # text n: the last n characters
    if [ "${#1}" -gt "$2" ]; then printf '%s' "${1:${#1}-$2}"; else printf '%s' "$1"; fi
}

json_str() { # a JSON string: escapes, and control characters dropped
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//$'\n'/\\n}
    s=${s//$'\r'/\\r}
    s=${s//$'\t'/\\t}
    s=$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037'; printf x)
    printf '"%s"' "${s%x}"
}

json_num() { if [ -z "$1" ]; then printf null; else printf '%s' "$1"; fi; }

status_json() {
    local history="" h
    for h in "${HISTORY[@]}"; do history+="${history:+, }$h"; done
    printf '{\n  "phase": %s,\n  "reason": %s,\n  "message": %s,\n  "role": %s,\n' \
        "$(json_str "$PHASE")" "$(json_str "$REASON")" "$(json_str "$MESSAGE")" \
        "$(json_str "$ROLE")"
    printf '  "terminal": %s,\n  "attempts": %s,\n  "history": [%s],\n  "startedAt": %s' \
        "$TERMINAL" "$ATTEMPTS" "$history" "$(json_str "$STARTED_AT")"
    [ -n "$NEXT_RETRY_AT" ] && printf ',\n  "nextRetryAt": %s' "$(json_str "$NEXT_RETRY_AT")"
    [ -n "$FINISHED_AT" ] && printf ',\n  "finishedAt": %s' "$(json_str "$FINISHED_AT")"
    printf ',\n  "updatedAt": %s\n}\n' "$(json_str "$UPDATED_AT")"
}

write_status() {
    UPDATED_AT=$(now)
    local err
    if ! err=$( { mkdir -p "$RUN" && status_json > "$STATUS.tmp" && chmod 0644 "$STATUS.tmp" \
        && mv -f "$STATUS.tmp" "$STATUS"; } 2>&1 ); then
        if [ -z "$UNRECORDED" ]; then
            UNRECORDED=${err:-unknown error}
            log "nodesmith-bootstrap: cannot record status in $STATUS ($UNRECORDED); going on"$'\n'
        fi
    fi
    log "nodesmith-bootstrap: $PHASE $REASON $(tail_chars "$MESSAGE" 300)"$'\n'
    report_status
}

# The management cluster hears of each phase change (REPORT_URL), from the background: a slow
# or unreachable endpoint never holds up or fails the bootstrap. Reports go in order (each
# waits up to 6 s for the one before, which gives up after 5 s). The last one (Succeeded or
# Failed) is the one the management cluster must not miss: it is retried for REPORT_RETRY s
# (120 by default) while send_report says a later try can help (its Service may be between
# endpoints on a busy control plane), and the script waits for it before exiting (the status
# and the sentinel are already written). The credential reaches curl through its config on stdin, never its argv,
# where ps would show it; REPORT_CA (PEM), when set, is the only CA trusted for the endpoint,
# else the system's store.
REPORTED="" REPORT_PID=""
report_status() {
    [ -n "${REPORT_URL:-}" ] || return 0
    local body prev=$REPORT_PID tls=()
    if [ -n "${REPORT_CA:-}" ]; then  # a CA certificate is no secret: a plain file for curl
        { printf '%s\n' "$REPORT_CA" > "$RUN/report-ca.crt.tmp" \
            && mv -f "$RUN/report-ca.crt.tmp" "$RUN/report-ca.crt"; } 2> /dev/null
        tls=(--cacert "$RUN/report-ca.crt")
    fi
    body=$(printf '{"phase": %s, "reason": %s, "terminal": %s, "attempts": %s}' \
        "$(json_str "$PHASE")" "$(json_str "$REASON")" "$TERMINAL" "$(json_num "$ATTEMPTS")")
    [ "$body" = "$REPORTED" ] && return 0
    REPORTED=$body
    local retry=0
    case $PHASE in Succeeded | Failed) retry=${REPORT_RETRY:-120} ;; esac
    (
        wait_for_pid "$prev"
        local give_up=$((SECONDS + retry)) why
        while :; do
            why=$(send_report "$body" "${tls[@]}") && exit 0
            [ "$why" = delivered ] && exit 0
            if [ "$why" != again ] || [ $((SECONDS + REPORT_RETRY_DELAY)) -gt "$give_up" ]; then
                break
            fi
            sleep "$REPORT_RETRY_DELAY"
        done
        log "nodesmith-bootstrap: could not report $PHASE to the management cluster; going on"$'\n'
    ) &
    REPORT_PID=$!
}

# One POST of a report: exit 0 when the endpoint took it. Else prints "delivered" (409: the
# outcome is recorded already, e.g. by a try that timed out after the endpoint had it), "again"
# for what a later try can fix (refused, reset or closed, a timeout, a name that does not
# resolve yet, HTTP 408, 429, 5xx), or "no" (another 4xx, any TLS failure: curl reports a
# certificate signed by another CA of the same name as a handshake error, 35, not as 60).
send_report() { # body [tls args...]
    local body=$1 code rc
    shift
    code=$(printf 'header = "Authorization: Bearer %s"\n' "${REPORT_CREDENTIAL:-}" \
        | curl -sS -m 5 -o /dev/null -w '%{http_code}' -K - "$@" -X POST \
            -H 'Content-Type: application/json' --data-binary "$body" "$REPORT_URL" 2> /dev/null)
    rc=$?
    case $rc:$code in
        0:2??) return 0 ;;
        0:409) echo delivered ;;
        0:408 | 0:429 | 0:5??) echo again ;;
        6:* | 7:* | 28:* | 52:* | 55:* | 56:*) echo again ;;
        *) echo no ;;
    esac
    return 1
}

wait_for_pid() { # pid [seconds]: until it exits, 6 s (or the given seconds) at most
    [ -n "$1" ] || return 0
    local i
    for i in $(seq 1 $((${2:-6} * 5))); do kill -0 "$1" 2> /dev/null || return 0; sleep 0.2; done
}

fail() { # reason message [terminal]
    PHASE=Failed REASON=$1 MESSAGE=$(redact "$2") TERMINAL=${3:-true} FINISHED_AT=$(now)
    write_status
    return 1
}

# ---------------------------------------------------------------- running commands

SHELL_ENV=() SHELL_CWD=""  # what the user's commands left: empty until they change it
OUT="" CODE=""

run() { # [timeout-seconds|""] argv...: sets OUT (redacted) and CODE ("" when killed)
    local timeout=$1 file pid start killed=""
    shift
    file=$(mktemp)
    (
        if [ -n "$SHELL_CWD" ]; then cd "$SHELL_CWD" || exit 1; fi
        if [ "${#SHELL_ENV[@]}" -gt 0 ]; then
            exec setsid env -i "${SHELL_ENV[@]}" "$@"
        fi
        exec setsid "$@"
    ) > "$file" 2>&1 < /dev/null &
    pid=$!
    if [ -n "$timeout" ]; then
        start=$(now_ms)
        while kill -0 "$pid" 2>/dev/null; do
            if [ $(( $(now_ms) - start )) -ge $(( timeout * 1000 )) ]; then
                kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
                killed=1
                break
            fi
            sleep 0.1
        done
    fi
    wait "$pid"
    CODE=$?
    [ -n "$killed" ] && CODE=""
    OUT=$(iconv -c -f UTF-8 -t UTF-8 < "$file"; printf x)
    OUT=$(redact "${OUT%x}" 0)
    rm -f "$file"
    log "$OUT"
    OUT=${OUT#"${OUT%%[![:space:]]*}"}  # stripped, as the Python twin's out.strip()
    OUT=${OUT%"${OUT##*[![:space:]]}"}
}

commands() { # reason cmd...: one /bin/sh for the list, in order; stop at the first failure
    local reason=$1 work script="" i=0 cmd failed
    shift
    [ "$#" -eq 0 ] && return 0
    work=$(mktemp -d /tmp/nodesmith-shell.XXXXXX)
    for cmd in "$@"; do
        script+="printf %d $i > $work/index"$'\n'"$cmd"$'\n'
        script+='__nodesmith_rc=$?; [ $__nodesmith_rc -eq 0 ] || exit $__nodesmith_rc'$'\n'
        i=$((i + 1))
    done
    script+="unset __nodesmith_rc"$'\n'"pwd > $work/cwd"$'\n'"env -0 > $work/env"
    run "" /bin/sh -c "$script"
    failed=$(cat "$work/index" 2>/dev/null)
    if [ "$CODE" != 0 ]; then
        rm -rf "$work"
        fail "$reason" "$(if [ -n "$failed" ]; then echo "command $failed"; else echo "the commands"; fi) exited $CODE: $(tail_chars "$OUT" 500)"
        return 1
    fi
    if [ -f "$work/env" ] && [ -f "$work/cwd" ]; then  # a command may have exited 0 early
        mapfile -d '' SHELL_ENV < "$work/env"
        SHELL_CWD=$(cat "$work/cwd")
    fi
    rm -rf "$work"
    return 0
}

terminal_reason() { # code output: the terminal reason, or nothing when a retry may help
    if grep -qE -- "$CONFIG_VERSION_RE" <<< "$2"; then echo ConfigVersionUnsupported
    elif grep -qE -- "$CONFIG_DECODE_RE" <<< "$2"; then echo ConfigDecodeFailed
    elif grep -qE -- "$VALIDATION_RE" <<< "$2"; then echo ValidationFailed
    elif [ "$1" = 2 ]; then echo PreflightFailed
    elif [ "$1" = 3 ]; then echo ValidationFailed
    fi
}

killed() { # what
    fail DeadlineExceeded "$1 was still running at the ${DEADLINE}s deadline and was killed: $OUT"
}

# ---------------------------------------------------------------- kubeadm

kubeadm_phase() {
    local backoff=$BACKOFF deadline started took longest=0 reset_took="" needed wait terminal
    if ! command -v "${COMMAND[0]}" > /dev/null; then
        fail KubeadmNotFound "${COMMAND[0]} is not installed on this node: it is configured and ready to join, but cannot run kubeadm $VERB"
        return 1
    fi
    deadline=$(( $(now_ms) + DEADLINE * 1000 ))
    if [ "$ROLE" != worker-join ] && [ -d "$PKI_DIR" ]; then
        mkdir -p "$PKI_COPY" && cp -a "$PKI_DIR/." "$PKI_COPY/"
    fi
    if [ -d "$MANIFESTS" ] && [ -n "$(ls -A "$MANIFESTS")" ]; then  # before kubeadm adds its own
        mkdir -p "$MANIFESTS_COPY" && cp -a "$MANIFESTS/." "$MANIFESTS_COPY/"
    fi
    while true; do
        ATTEMPTS=$((ATTEMPTS + 1))
        PHASE=Running MESSAGE="" REASON="Running${VERB^}"
        write_status
        started=$(now_ms)
        local started_at
        started_at=$(now)
        run "$(( (deadline - started) > 0 ? (deadline - started + 999) / 1000 : 0 ))" "${COMMAND[@]}"
        took=$(( $(now_ms) - started ))
        [ "$took" -gt "$longest" ] && longest=$took
        HISTORY+=("{\"attempt\": $ATTEMPTS, \"exitCode\": $(json_num "$CODE"), \"startedAt\": \"$started_at\", \"seconds\": $(seconds "$took")")
        if [ -z "$CODE" ]; then close_history; killed "kubeadm $VERB"; return 1; fi
        if [ "$CODE" = 0 ]; then close_history; return 0; fi
        terminal=$(terminal_reason "$CODE" "$OUT")
        if [ -n "$terminal" ]; then
            close_history
            fail "$terminal" "kubeadm $VERB exited $CODE: $OUT"
            return 1
        fi
        # The next try waits its backoff, but only so long that a reset and a try as long
        # as the longest so far still end before the deadline; no such room left: give up.
        needed=$(( longest + ${reset_took:-$took} + SLACK_MS ))
        wait=$(( backoff * 1000 ))
        local room=$(( deadline - $(now_ms) - needed ))
        [ "$room" -lt "$wait" ] && wait=$room
        if [ "$wait" -lt 0 ]; then
            close_history
            fail DeadlineExceeded "kubeadm $VERB still failing after $ATTEMPTS attempts: $OUT" false
            return 1
        fi
        HISTORY[-1]+=", \"backoff\": $(seconds "$wait")}"
        PHASE=Retrying REASON=Transient MESSAGE=$(redact "$OUT")
        NEXT_RETRY_AT=$(date -u -d "@$(( $(date +%s) + (wait + 999) / 1000 ))" +%Y-%m-%dT%H:%M:%SZ)
        write_status
        sleep "$(seconds "$wait")"
        backoff=$(( backoff * 2 < MAX_BACKOFF ? backoff * 2 : MAX_BACKOFF ))
        local reset_started
        reset_started=$(now_ms)
        run "$(( (deadline - reset_started) > 0 ? (deadline - reset_started + 999) / 1000 : 0 ))" \
            "${COMMAND[0]}" reset --force
        reset_took=$(( $(now_ms) - reset_started ))
        [ -z "$CODE" ] && { killed "kubeadm reset"; return 1; }
        if [ -d "$PKI_COPY" ]; then mkdir -p "$PKI_DIR" && cp -a "$PKI_COPY/." "$PKI_DIR/"; fi
        if [ -d "$MANIFESTS_COPY" ]; then
            mkdir -p "$MANIFESTS" && cp -a "$MANIFESTS_COPY/." "$MANIFESTS/"
        fi
    done
}

seconds() { # milliseconds as seconds with one decimal
    local ms=$(( ($1 + 50) / 100 ))
    printf '%d.%d' $(( ms / 10 )) $(( ms % 10 ))
}

close_history() { [[ ${HISTORY[-1]} == *"}" ]] || HISTORY[-1]+="}"; }

# ---------------------------------------------------------------- outcome

succeeded() {
    if ! { printf 'success\n' > "$SENTINEL"; } 2>/dev/null; then
        log "nodesmith-bootstrap: the node is bootstrapped but $SENTINEL cannot be written"$'\n'
        return 1
    fi
    return 0
}

already_joined() {
    log "nodesmith-bootstrap: $JOINED exists, this node has joined; not running kubeadm again"$'\n'
    [ -e "$STATUS" ] && return 0
    PHASE=Succeeded REASON=AlreadyJoined FINISHED_AT=$(now)
    MESSAGE="$JOINED exists: joined on an earlier run; kubeadm not run again"
    write_status
    succeeded
}

bootstrap() {
    if [ -e "$JOINED" ]; then already_joined; return; fi
    write_status
    commands PreKubeadmCommandFailed "${PRE[@]}" || return 1
    kubeadm_phase || return 1
    # Ignition's /etc/kubeadm.yml holds the join token on disk: once kubeadm has used it, it
    # goes to tmpfs (CABPK's script moves it to /tmp the same way).
    if [ -n "$CONSUME_CONFIG" ] && [ -e "$CONSUME_CONFIG" ]; then
        mkdir -p /run/kubeadm && mv -f "$CONSUME_CONFIG" /run/kubeadm/
    fi
    commands PostKubeadmCommandFailed "${POST[@]}" || return 1
    PHASE=Succeeded REASON=Bootstrapped MESSAGE="kubeadm $VERB succeeded" FINISHED_AT=$(now)
    write_status
    succeeded
}

main() {
    ROLE=unknown REDACT=() PRE=() POST=() COMMAND=() VERB="" BACKOFF=5 MAX_BACKOFF=60 DEADLINE=900
    CONSUME_CONFIG="" REPORT_RETRY=120 REPORT_RETRY_DELAY=4
    local err
    # shellcheck source=/dev/null
    if ! err=$(bash -n "$1" 2>&1) || ! . "$1" 2> /dev/null || [ -z "${VERB:-}" ]; then
        fail BootstrapScriptFailed "cannot read the config $1: ${err:-no VERB in it}"
        return 1
    fi
    PKI_DIR=${PKI_DIR:-/etc/kubernetes/pki}
    [[ $REPORT_RETRY =~ ^[0-9]{1,5}$ ]] || REPORT_RETRY=120
    local code=0
    bootstrap || code=$?
    # the last report: 6 s for the one before, REPORT_RETRY s of retries, its last try's 5 s
    wait_for_pid "$REPORT_PID" $((REPORT_RETRY + 20))
    return "$code"
}

main "$@"
