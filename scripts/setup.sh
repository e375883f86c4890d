#!/usr/bin/env bash
# Installs only what is missing for the local cloud, the tests and the CDK CLI.
# Idempotent: a second run checks and does nothing. Everything project-owned
# lands under .local/ (git-ignored); OS packages come from apt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCAL=$ROOT/.local
mkdir -p "$LOCAL/bin" "$LOCAL/tools" "$LOCAL/logs" "$LOCAL/pids"

say() { printf 'setup: %s\n' "$*"; }

# Pinned versions: a change here is a change of what the tests ran against.
DDB_LOCAL_NPM=amplify-dynamodb-simulator@2.9.30   # carries DynamoDB Local 1.25.1 in package/emulator
STATICCHECK=honnef.co/go/tools/cmd/staticcheck@v0.8.2
STRIPE_MOCK=github.com/stripe/stripe-mock@v0.203.0
GOTESTSUM=gotest.tools/gotestsum@v1.13.0            # make test's runner: the summary with the skip count
RIE=github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# PostgreSQL server binaries (the project runs its own cluster; never the default one).
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  apt_install postgresql
fi
# The Debian package may have started its default cluster: leave it alone, ours uses its own port.

# openssl makes the local ledger's self-signed TLS certificate (localcloud.sh).
if ! command -v openssl >/dev/null 2>&1; then
  apt_install openssl
fi

# A Redis-protocol server for the dedup cache (Valkey in AWS; Debian has no
# valkey package, and redis-server speaks the same protocol and commands).
if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi

# Java 17 for DynamoDB Local.
if ! command -v java >/dev/null 2>&1; then
  apt_install openjdk-17-jre-headless
fi

# curl is used by readiness checks of the scripts.
command -v curl >/dev/null 2>&1 || apt_install curl ca-certificates

# moto_server (preinstalled on these machines).
if ! command -v moto_server >/dev/null 2>&1; then
  say "moto_server missing: trying pip install moto[server]"
  pip install -q "moto[server]>=5.2,<6" || { echo "setup: moto_server is missing and pip could not install it" >&2; exit 1; }
fi

# cfn-lint (preinstalled on these machines).
if ! command -v cfn-lint >/dev/null 2>&1; then
  pip install -q "cfn-lint>=1.51,<2" || { echo "setup: cfn-lint is missing and pip could not install it" >&2; exit 1; }
fi

# DynamoDB Local, from the npm registry (the jar is not committed: its licence).
DDB_DIR=$LOCAL/tools/dynamodb-local
if [ ! -f "$DDB_DIR/DynamoDBLocal.jar" ]; then
  say "fetching DynamoDB Local ($DDB_LOCAL_NPM)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$DDB_LOCAL_NPM" >/dev/null)
  tar -xzf "$tmp"/amplify-dynamodb-simulator-*.tgz -C "$tmp" package/emulator
  rm -rf "$DDB_DIR" && mkdir -p "$DDB_DIR"
  cp -r "$tmp/package/emulator/." "$DDB_DIR/"
  rm -rf "$tmp"
  [ -f "$DDB_DIR/DynamoDBLocal.jar" ] || { echo "setup: DynamoDBLocal.jar not found in $DDB_LOCAL_NPM" >&2; exit 1; }
fi

# The pinned CDK CLI, in _tools/ (node_modules at the module root breaks go test ./...).
if [ ! -x _tools/node_modules/.bin/cdk ]; then
  say "installing the pinned CDK CLI in _tools/"
  (cd _tools && npm ci --no-audit --no-fund --silent)
fi

# Go tools, pinned, into .local/bin.
go_tool() { # name module@version
  local name=$1 mod=$2 stamp="$LOCAL/bin/.$1.version"
  if [ -x "$LOCAL/bin/$name" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$mod" ]; then return; fi
  say "go install $mod"
  GOBIN=$LOCAL/bin GOFLAGS=-buildvcs=false go install "$mod"
  echo "$mod" > "$stamp"
}
go_tool staticcheck "$STATICCHECK"
go_tool stripe-mock "$STRIPE_MOCK"
go_tool aws-lambda-rie "$RIE"
go_tool gotestsum "$GOTESTSUM"

say "ok"
