# oncepay — every entry point a user or CI needs. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

export CDK_DISABLE_VERSION_CHECK := 1
export CDK_DISABLE_CLI_TELEMETRY := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export GOFLAGS := -buildvcs=false

LOCAL    := $(CURDIR)/.local
# The Go modules: the project, the constructs (a module of their own, which
# ./... at the root does not reach), and the example consumer.
MODULES  := . cdk/oncepay examples/consumer
BIN      := $(LOCAL)/bin
CDK      := $(CURDIR)/_tools/node_modules/.bin/cdk
STACK    := Oncepay
TEMPLATE := cdk.out/$(STACK).template.json
LAMBDAS  := $(notdir $(wildcard lambdas/*))
GO_SRC   := $(shell find . -name '*.go' -not -path './_tools/*' -not -path './.local/*' -not -path './cdk.out/*')
CALLER   ?= u1

.PHONY: test-background help setup up up-regions down status inspect totals reconcile lambdas synth preflight lint test test-unit test-race fuzz test-cfn test-example demo bench token chaos chaos-regions clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

setup: ## install what is missing (PostgreSQL, Java 17, DynamoDB Local, the CDK CLI, Go tools)
	@bash scripts/setup.sh
	@cmp -s _tools/peer/package-lock.json _tools/peer/node_modules/.installed-lock.json 2>/dev/null || { echo "setup: installing the pinned benchmark peer (Powertools idempotency) in _tools/peer/"; npm ci --prefix _tools/peer --no-audit --no-fund --silent && cp _tools/peer/package-lock.json _tools/peer/node_modules/.installed-lock.json; }

up: setup $(TEMPLATE) ## start the local cloud, provision it from the template, run the template as a stack (localcloud serve)
	@bash scripts/localcloud.sh up
	@source scripts/ports.sh && go run ./cmd/localcloud up --template $(TEMPLATE)
	@bash scripts/localcloud.sh apps

up-regions: up ## the two-Region local cloud beside it: two live stacks (us-east-1, us-west-2) from the two-Region app, each with its own stores, queues, functions and front door (:8081, :8082)
	@bash scripts/localcloud.sh regions-up

down: ## stop the local cloud (the two-Region one too)
	@bash scripts/localcloud.sh down

status: ## what runs locally
	@bash scripts/localcloud.sh status

PAYMENT ?=
totals: ## a merchant's day total from the stream job's sink: make -s totals MERCHANT=m1 [DAY=YYYY-MM-DD] [CURRENCY=EUR]
	@go build -o $(BIN)/totals ./cmd/totals && $(BIN)/totals --merchant "$(MERCHANT)" $(if $(DAY),--day "$(DAY)") $(if $(CURRENCY),--currency "$(CURRENCY)")

inspect: ## one payment as JSON (row, credits, notifications, the phone's pushes): make -s inspect PAYMENT=pay_...
	@go build -o $(BIN)/inspect ./cmd/inspect && $(BIN)/inspect --payment "$(PAYMENT)"

# The reconciliation on demand, as an operator runs it on AWS (aws lambda
# invoke): a UTC day, a span, or neither (what the daily schedule runs: the
# two previous UTC days). The local cloud plays no cron rule, so this is how
# it runs locally: one synchronous invocation through the running stack's
# admin API (POST /_local/invoke), whose answer (a report per span) is
# printed; a failed run prints the problem and fails.
reconcile: ## reconcile the ledger against the PSP on the running local stack, print the report: make -s reconcile DAY=YYYY-MM-DD (or FROM=... TO=..., RFC 3339)
	@day=$${DAY:-} from=$${FROM:-} to=$${TO:-}; \
	if [ -n "$$day" ]; then \
	  [ -z "$$from$$to" ] || { echo "reconcile: name DAY, or FROM and TO, not both" >&2; exit 2; }; \
	  [[ "$$day" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}$$ ]] || { echo "reconcile: DAY=$$day is not YYYY-MM-DD" >&2; exit 2; }; \
	  payload="{\"day\":\"$$day\"}"; \
	elif [ -n "$$from$$to" ]; then \
	  for v in "$$from" "$$to"; do [[ "$$v" =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2})$$ ]] || \
	    { echo "reconcile: FROM and TO must both be RFC 3339 times in whole seconds (2026-12-06T00:00:00Z), got '$$v'" >&2; exit 2; }; done; \
	  payload="{\"from\":\"$$from\",\"to\":\"$$to\"}"; \
	else payload='{}'; fi; \
	admin=$${ONCEPAY_ADMIN_ADDR:-127.0.0.1:8071}; rc=0; \
	out=$$(curl -sS --fail-with-body -H 'Content-Type: application/json' \
	  --data "{\"function\":\"reconcile\",\"payload\":$$payload}" "http://$$admin/_local/invoke") || rc=$$?; \
	[ -z "$$out" ] || echo "$$out"; \
	[ $$rc -ne 7 ] || echo "reconcile: no local stack on $$admin: make up" >&2; \
	exit $$rc

# One bootstrap per lambdas/<fn>: Lambda's provided.al2023 on arm64, static, stripped.
# Size (issue 9): the DynamoDB client, pgx and stripe-go alone make 10.6 MiB, so
# nothing is inlined but the runtime, and net/http's bundled HTTP/2 is left
# out; BENCHMARKS.md weighs the cost (LambdaWarmInvoke). Inlining the AWS SDK
# too made the api 10.0002 MiB once issue 13's fixes landed: over the budget.
# The runtime was still inlined until the home-Region routing (issue 15) took
# the api's text 8,388 bytes past a 64 KiB page boundary and the file 126
# bytes over 10 MiB; with the runtime not inlined either it is 9.94 MiB.
# LambdaWarmInvoke (BENCHMARKS.md) prices inlining off against on.
lambdas: ## build build/<fn>/bootstrap for every Lambda
	@for fn in $(LAMBDAS); do \
	  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc,nopgxregisterdefaulttypes,nethttpomithttp2 -trimpath -gcflags=all=-l -ldflags='-s -w -buildid=' \
	    -o build/$$fn/bootstrap ./lambdas/$$fn || exit 1; \
	done
	@mkdir -p build

$(TEMPLATE): $(GO_SRC) cdk.json go.mod cdk/oncepay/go.mod | setup
	@$(MAKE) -s lambdas
	@cd $(CURDIR) && $(CDK) synth --lookups=false --quiet >/dev/null
	@test -f $(TEMPLATE)

synth: ## synthesize the CloudFormation template into cdk.out/ (offline)
	@rm -f $(TEMPLATE)
	@$(MAKE) -s $(TEMPLATE)
	@echo "synth: $(TEMPLATE)"

# preflight reads the context as the cdk CLI gives it to the app (cdk.json,
# cdk.context.json, ~/.cdk.json); CONTEXT is the -c flags you will give
# cdk deploy. It runs with your AWS credentials and Region and only reads.
CONTEXT ?=
preflight: ## before a first cdk deploy, read-only checks of your AWS account (Lambda quota, SES, SNS apps, Cognito prefix, AZ ids): make preflight CONTEXT="-c oncepay:profile=prod ..."
	@go build -o $(BIN)/preflight ./cmd/preflight && $(BIN)/preflight $(CONTEXT)

lint: setup ## gofmt, go vet, staticcheck
	@bad=$$(gofmt -l $$(git ls-files '*.go') 2>/dev/null); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && go vet ./... && $(BIN)/staticcheck ./...) || exit 1; done

# The packages that hold concurrency (claims racing, the api's side-by-side
# writes, pollers, the resolver's workers, the client's taps, the function
# runner's environments, the triggers' pollers, the fingerprint
# table's concurrent deploys, the metrics emitter, faultnet's proxy, the
# call counters, the phone's two channels appending to one file, and the
# second Region's replication: pgrepl's lagging proxy, globaltable's pumps); cdk/
# stays out of race runs (jsii adds minutes and has no Go concurrency of
# ours), and so do the story and chaos worlds, for time
# (minutes a run without -race; their own locking is the hooks and the push log).
RACE_PKGS := ./internal/api/ ./internal/idem/ ./internal/home/ ./internal/outbox/ ./internal/relay/ ./internal/inbox/ ./internal/localcloud/harness/ ./internal/resolver/ ./internal/client/ ./internal/localcloud/pspsim/ \
	./internal/payment/ ./internal/metrics/ ./internal/testkit/faultnet/ ./internal/testkit/callcount/ \
	./internal/localcloud/lambdarun/ ./internal/localcloud/trigger/ ./internal/localcloud/phone/ \
	./internal/localcloud/pgrepl/ ./internal/localcloud/globaltable/

# -p 3 on two cores: the integration packages spend most of their time
# waiting on the local cloud (the black-box crash run waits out the events
# queue's 180 s visibility timeout after a killed worker batch), and with
# go test's default of one package per core that wait held a core idle
# while every other package ran, compiled included, in the other (CI:
# test-unit was the largest phase; see the timings `make test` prints).
TEST_P ?= 3
test-unit: ## go test ./... in the project and the constructs' module (unit, integration against the running local cloud, CDK stack tests); prints the skip count
	@rm -rf $(VARIANTS)
	@rc=0; rm -f $(LOCAL)/test.json; for m in . cdk/oncepay; do \
	  (cd $$m && ONCEPAY_TEMPLATES_OUT=$(CURDIR)/$(VARIANTS) $(BIN)/gotestsum --format pkgname-and-test-fails --jsonfile $(LOCAL)/test.part.json -- -p $(TEST_P) -count=1 -timeout 15m ./...) || rc=$$?; \
	  cat $(LOCAL)/test.part.json >> $(LOCAL)/test.json 2>/dev/null || rc=1; \
	done; rm -f $(LOCAL)/test.part.json; \
	  bash scripts/testsummary.sh $(LOCAL)/test.json; exit $$rc

# -short: the race run looks for data races, not for more schedules; the
# client's randomized runs drop from 1,000 (run in test-unit) to 100 here.
test-race: ## the race detector over the packages that hold concurrency
	@$(BIN)/gotestsum --format pkgname-and-test-fails --jsonfile $(LOCAL)/race.json -- -race -short -count=1 $(RACE_PKGS)

FUZZTIME ?= 3s
fuzz: ## every Go fuzzer in the tree for FUZZTIME each (new inputs that fail are kept in testdata/fuzz)
	@for f in $$(grep -rl --include='*_test.go' '^func Fuzz' internal cmd); do \
	  for name in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -c6-); do \
	    echo "fuzz: $$name ($$(dirname $$f), $(FUZZTIME))"; \
	    if ! go test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f) >.local/fuzz.out 2>&1; then \
	      go test -run "^$$name$$" ./$$(dirname $$f) || exit 1; \
	      echo "fuzz: $$name stopped with no failing input kept (the engine's own stop; its last lines below): once more"; tail -n 5 .local/fuzz.out; \
	      go test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) ./$$(dirname $$f) >/dev/null || { go test -run "^$$name$$" ./$$(dirname $$f); exit 1; }; \
	    fi; \
	  done; \
	done

# The prod and ALB variants are linted too: what only they hold (the proxy,
# the reader, the endpoints, the listener) must deploy as well. Their
# templates come from the CDK tests' own synth of the app (test-unit writes
# them to cdk.out.variants); a test-cfn run alone makes them the same way.
VARIANTS := cdk.out.variants
test-cfn: $(TEMPLATE) ## cfn-lint over the synthesized templates (sandbox, prod, ALB, the two-Region stacks)
	@cfn-lint $(TEMPLATE)
	@test -f $(VARIANTS)/prod.template.json -a -f $(VARIANTS)/alb.template.json -a -f $(VARIANTS)/regions-us-west-2.template.json || \
	  (cd cdk/oncepay && ONCEPAY_TEMPLATES_OUT=$(CURDIR)/$(VARIANTS) go test -count=1 -run '^TestVariantTemplates$$' . >/dev/null)
	@cfn-lint $(VARIANTS)/prod.template.json $(VARIANTS)/alb.template.json $(VARIANTS)/regions-*.template.json
	@echo "test-cfn: sandbox, prod, ALB and two-Region templates lint clean ($$(ls $(VARIANTS)/regions-*.template.json | wc -l) Region stacks)"

# The example consumer (examples/consumer, a module of its own that
# imports the constructs as someone else's app would): each construct alone
# over an imported queue, a platform role, an existing VPC and a custom KMS
# key; any cdk-nag or CDK warning fails it, then cfn-lint.
EXAMPLE_OUT := $(LOCAL)/consumer.out
test-example: ## synthesize examples/consumer (each construct in someone else's stack); cdk-nag and cfn-lint clean
	@$(MAKE) -s lambdas
	@rm -rf $(EXAMPLE_OUT)
	@cd examples/consumer && go run . -assets $(CURDIR)/build -out $(EXAMPLE_OUT) -check >/dev/null
	@# The consumer's module graph: the CDK and the constructs' module, none of the handlers'.
	@graph=$$(cd examples/consumer && go list -m all) || exit 1; \
	if echo "$$graph" | grep -E '^github.com/oncepay/oncepay |aws-sdk-go-v2|jackc/pgx|stripe/stripe-go|gomodule/redigo'; then \
	  echo "test-example: the consumer's module graph holds the handlers' dependencies (above)"; exit 1; fi
	@cfn-lint $(EXAMPLE_OUT)/*.template.json
	@echo "test-example: $$(ls $(EXAMPLE_OUT)/*.template.json | wc -l) stacks synthesized from outside the module, nag and cfn-lint clean, $$(cd examples/consumer && go list -m all | wc -l) modules in its graph"

# The phases, in order. While test-unit runs (its packages mostly wait on
# the local cloud), the work that only needs the CPU runs beside it at the
# lowest priority (nice 19: it takes only what the tests leave idle):
# compiling the race detector's packages, then every fuzzer
# (test-background). test-race then only links and runs, and the
# background's log is printed when it ends; its failure fails the run.
TEST_PHASES := setup up up-regions lint test-unit test-race test-cfn test-example
test: ## the README's test command: installs, starts, lints and runs everything
	@t0=$$(date +%s); bg=; for p in $(TEST_PHASES); do \
	  if [ $$p = test-unit ]; then \
	    setsid nice -n 19 $(MAKE) --no-print-directory test-background >$(LOCAL)/background.log 2>&1 & bg=$$!; \
	  fi; \
	  if ! $(MAKE) --no-print-directory $$p; then \
	    if [ -n "$$bg" ] && kill -0 $$bg 2>/dev/null; then kill -- -$$bg 2>/dev/null; wait $$bg; fi; \
	    exit 1; \
	  fi; \
	  echo "== test: $$p done, $$(( $$(date +%s) - t0 ))s in"; \
	done; \
	rc=0; wait $$bg || rc=$$?; cat $(LOCAL)/background.log; \
	echo "== test: background (race compile, fuzz) done, $$(( $$(date +%s) - t0 ))s in"; \
	[ $$rc -eq 0 ] || { echo "test: the background work failed (its log above)"; exit 1; }
	@echo "== summary of the test run (skips fail CI; the chaos line counts faults that fired)"
	@bash scripts/testsummary.sh $(LOCAL)/test.json
	@echo "test: all green"

# test-background: the CPU-only work `make test` runs beside test-unit, in
# a session of its own (a failed phase stops all of it). The race compile
# is `go list -export` (compiled, not linked: test-race links). The fuzzers'
# -fuzztime is wall time: beside the tests they get the CPU the tests leave
# idle, so they run fewer inputs than `make fuzz` alone does.
test-background:
	@go list -race -test -export -f '{{.ImportPath}}' $(RACE_PKGS) >/dev/null
	@echo "test-background: the race detector's packages compiled"
	@$(MAKE) --no-print-directory fuzz

demo: up ## bring the local cloud up; the lost reply, a live payment tap -> push, the story (~1 min)
	@go run ./cmd/demo

BENCHTIME ?= 300x
# bench restarts the local cloud: DynamoDB Local's writes to a table with a
# stream slow down as stream records pile up (1.5 ms -> 14-41 ms per PutItem
# after a few thousand chaos schedules), which would bill the emulator's
# history to the API's first call.
# A benchmark whose service is missing fails (testenv's CI rule) instead of
# skipping and dropping its rows; benchreport also refuses a run missing one.
bench: export CI = true
bench: ## benchmarks on a freshly started local cloud; writes BENCHMARKS.md (ratios against same-run baselines)
	@$(MAKE) -s down
	@$(MAKE) -s up
	@mkdir -p bench-out docs/benchmarks
	@go test -count=1 -run '^$$' -bench 'FirstCall$$|Replay|Steps|RequestCounts' -benchtime $(BENCHTIME) ./internal/api/ | tee bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench 'FirstCallPSP300' -benchtime 30x ./internal/api/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench 'FirstCallAcrossRegions' -benchtime $(BENCHTIME) ./internal/api/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench 'WorkerTransaction|RelayToWorker' -benchtime $(BENCHTIME) ./internal/inbox/ ./infra-tests/messaging/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench Concurrency -benchtime 1x ./internal/api/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench OutboxToPush -benchtime 40x ./infra-tests/messaging/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench TapToPush -benchtime 300x ./infra-tests/messaging/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench LambdaBootstrap -benchtime 5x ./infra-tests/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench LambdaWarmInvoke -benchtime 100x ./infra-tests/ | tee -a bench-out/bench.txt
	@go test -count=1 -run '^$$' -bench PeerSideBySide -benchtime 100x ./infra-tests/peer/ | tee -a bench-out/bench.txt
	@# the live stack (make up started it), open loop, after the in-process runs: it loads the stack hard
	@go test -count=1 -timeout 30m -run '^$$' -bench LiveTapToPush -benchtime 1x ./infra-tests/live/ | tee -a bench-out/bench.txt
	@go test -count=1 -timeout 10m -run '^$$' -bench LiveHotMerchant -benchtime 1x ./infra-tests/live/ | tee -a bench-out/bench.txt
	@go run ./cmd/benchreport -cmd "make bench" -plots docs/benchmarks < bench-out/bench.txt > BENCHMARKS.md
	@echo "bench: wrote BENCHMARKS.md"

# 200 schedules by default, the same as `go run ./cmd/chaos` and as CI's
# TestRandomFaultSchedulesKeepEveryInvariant: under a minute at ~4 schedules/s
# on 2 cores, and what a green CI run already vouches for. RUNS=N plays more.
RUNS ?= 200
SEED ?= 1
chaos: up ## randomized fault schedules over the whole path, invariants checked after each: make chaos RUNS=N [SEED=S]
	@go run ./cmd/chaos -runs $(RUNS) -seed $(SEED)

# A schedule mostly waits (about 15 % of a core), and each has its own
# databases, tables, queues and PSP: REGIONS_SHARDS=K runs K processes on
# consecutive seed ranges (3 on 2 cores: 300 schedules in 24 minutes). Keep
# at least 10 schedules per shard: each shard checks that some failover
# fell mid-payment.
REGIONS_RUNS ?= 1000
REGIONS_SHARDS ?= 1
chaos-regions: up ## two-Region chaos: randomized schedules, a failover at a random step in each: make chaos-regions REGIONS_RUNS=N [SEED=S] [REGIONS_SHARDS=K]
	@go test -c -o $(BIN)/regions.test ./internal/testkit/regions/
	@per=$$(( ($(REGIONS_RUNS) + $(REGIONS_SHARDS) - 1) / $(REGIONS_SHARDS) )); seed=$(or $(SEED),1); pids=""; \
	for i in $$(seq 0 $$(( $(REGIONS_SHARDS) - 1 ))); do \
	  (cd internal/testkit/regions && CI=true ONCEPAY_REGIONS_CHAOS_RUNS=$$per ONCEPAY_REGIONS_CHAOS_SEED=$$(( seed + i * per )) \
	    $(BIN)/regions.test -test.count=1 -test.timeout=0 -test.run '^TestTwoRegionChaos$$' -test.v | grep -E 'SUMMARY|seed [0-9]+ \(|^(--- |ok|FAIL)'; \
	    exit $${PIPESTATUS[0]}) & pids="$$pids $$!"; \
	done; rc=0; for p in $$pids; do wait $$p || rc=1; done; exit $$rc

token: ## print a local bearer token: make -s token CALLER=u1
	@go run ./cmd/frontdoor token --caller $(CALLER)

clean: ## remove build outputs (not the local cloud's data)
	rm -rf build cdk.out
