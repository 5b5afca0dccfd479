# make demo   the flash sale, on a throwaway embedded etcd
# make test   install what tests need, then run every test with -race
# make check  gofmt, go vet, staticcheck
# make verify every backend x fault x workload (mutex, semaphore, rwmutex, election) combination in the short profile, and its table
# make bench  dlock side by side with the incumbent libraries: bench/RESULTS.md and bench/curves-*.svg
# make bench-million  a million names held at once on every backend but Temporal, alone: bench/million/RESULTS.md
GO ?= go

# Every package of every module that go.work lists: the repository is one
# module per backend plus the portable layer, the CLI, the verification,
# the etcd server and bench (README, "Modules"); in workspace mode ./...
# stops at the module of the current directory, and this pattern does not.
# go.work is the one list of modules.
PKGS = github.com/dlock/dlock/...

.PHONY: demo test check install bench bench-million verify

demo:
	$(GO) run ./cmd/dlock demo seckill

install:
	./scripts/install.sh

# The packages whose tests take longest, longest first: go test starts the
# packages' runs in the order given, TEST_P at once, and a long one started
# last runs alone at the end. The tests mostly wait (for a TTL to run out,
# a server to restart, a fault to heal): with two at a time on 2 cores the
# CPU was 40% busy, so three run at once.
TEST_P ?= 3
LONGEST = cmd/dlock backend/redislock backend/temporallock backend/redlock backend/zklock backend/etcdlock backend/pglock backend/mysqllock

# The fault verification runs last, apart from the other packages: its
# recovery bound (TTL + 5s) is a claim about the backends, not about a
# machine that is also running every other package's servers. It runs
# whether or not they passed, two backends at a time (DLOCK_VERIFY_LANES;
# make verify runs one at a time).
test: install
	$(GO) vet $(PKGS)
	status=0; \
	pkgs=$$($(GO) list $(PKGS) | grep -v -e '/verify$$' -e '/bench$$'); \
	first=$$(for p in $(LONGEST); do echo "$$pkgs" | grep -x "github.com/dlock/dlock/$$p"; done); \
	$(GO) test -race -count=1 -p $(TEST_P) -timeout 25m $$first $$(echo "$$pkgs" | grep -vxF "$$first") || status=1; \
	DLOCK_VERIFY_LANES=2 $(GO) test -race -count=1 -timeout 25m ./verify/ || status=1; \
	exit $$status

# Each module also builds and vets on its own, outside the workspace, with
# a tidy go.mod: what a user who requires it gets.
check:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)
	for d in $$($(GO) list -m -f '{{.Dir}}'); do \
		(cd $$d && GOWORK=off $(GO) mod tidy -diff && GOWORK=off $(GO) vet ./...) || exit 1; \
	done
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest $(PKGS)

VERIFY_OUT ?= $(CURDIR)/verify-out
verify: install
	rm -rf $(VERIFY_OUT)
	DLOCK_VERIFY_OUT=$(VERIFY_OUT) DLOCK_VERIFY_WORKLOADS=all $(GO) test -count=1 -timeout 80m -run '^TestVerifyShortProfile$$' ./verify/ || { cat $(VERIFY_OUT)/summary.txt 2>/dev/null; exit 1; }
	@cat $(VERIFY_OUT)/summary.txt

# Starts its own servers; 50-80 minutes on 2 cores, most of it a million
# names held at once on every backend but Temporal, and at most its budget
# of 80 minutes. BENCH_FLAGS passes flags to the driver, e.g.
# BENCH_FLAGS='-scale 0.3 -million ""' for a quick look in a few minutes.
BENCH_FLAGS ?=
bench: install
	cd bench && $(GO) test -count=1 -timeout 120m -run '^TestResults$$' -v . -args -results $(BENCH_FLAGS)

# The runs of a million names held at once without the rest of make bench:
# scenario C alone (the small run, then 1,000,000 names) for dlock on every
# backend but Temporal, where each name is a workflow and a million would
# take about 10 hours. About 30 minutes on 2 cores.
MILLION ?= redis/dlock-fair,etcd/dlock,zookeeper/dlock,postgres/dlock-plain,mariadb/dlock
bench-million: install
	cd bench && $(GO) test -count=1 -timeout 180m -run '^TestResults$$' -v . -args -results -many-only -backends redis,etcd,zookeeper,postgres,mariadb -million $(MILLION) -budget 150m -out million $(BENCH_FLAGS)
