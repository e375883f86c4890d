# ports.sh, sourced by scripts/localcloud.sh and by `make up`'s provisioning
# step: one knob per local part. The processes are started on a port (or an
# address) and the provisioner finds them by URL; set either one and the
# other follows, set both and they must agree.
_oncepay_port_of() { local u=${1%/}; echo "${u##*:}"; }
_oncepay_addr_of() { local u=${1%/}; echo "${u#*://}"; }

# _oncepay_pair PORTVAR URLVAR DEFAULT port|addr
_oncepay_pair() {
  local pv=$1 uv=$2 def=$3 kind=$4 p u of
  of=_oncepay_${kind}_of
  p=${!pv:-} u=${!uv:-}
  if [ -z "$p" ]; then
    if [ -n "$u" ]; then p=$($of "$u"); else p=$def; fi
  fi
  if [ -z "$u" ]; then
    if [ "$kind" = port ]; then u=http://127.0.0.1:$p; else u=http://$p; fi
  fi
  if [ "$($of "$u")" != "$p" ]; then
    echo "ports: $uv=$u and $pv=$p name different places: set one of them" >&2
    return 1
  fi
  printf -v "$pv" %s "$p"
  printf -v "$uv" %s "$u"
  export "${pv?}" "${uv?}"
}

_oncepay_pair ONCEPAY_DDB_PORT ONCEPAY_DDB_URL 8000 port &&
  _oncepay_pair ONCEPAY_R2_DDB_PORT ONCEPAY_R2_DDB_URL 8001 port &&
  _oncepay_pair ONCEPAY_MOTO_PORT ONCEPAY_AWS_URL 4566 port &&
  _oncepay_pair ONCEPAY_PSPSIM_ADDR ONCEPAY_PSP_URL 127.0.0.1:8090 addr &&
  _oncepay_pair ONCEPAY_FRONTDOOR_ADDR ONCEPAY_FRONTDOOR_URL 127.0.0.1:8080 addr || exit 1
