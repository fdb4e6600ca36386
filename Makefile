# Podium. `make demo` runs the whole thing on this machine; `make test` runs the tests.
GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GOBIN    := $(shell $(GO) env GOPATH)/bin

# Code generators, pinned; `make proto` installs them with `go install`.
BUF_VERSION                  := v1.50.0
PROTOC_GEN_GO_VERSION        := v1.36.6
PROTOC_GEN_CONNECT_GO_VERSION := v1.18.1

# The linter, pinned the same way and installed with `go install` when the one
# in $(GOBIN) is not this version. golangci-lint refuses code for a newer Go
# than the one it was built with, and its analyzers must know the language
# version: v2.15.0 is built with, and understands, the Go 1.26 go.mod names.
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT         := $(GOBIN)/golangci-lint

.PHONY: all build test test-deps soak fuzz vet lint golangci-lint fmt proto docs demo demo-stop demo-reset clean bench deb image lint-deb packaging-test nfpm gpu-check

all: build

# scripts/ldflags.sh holds the one -X flag that stamps VERSION into every
# binary; the packaging scripts build with the same flags.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$$(VERSION=$(VERSION) scripts/ldflags.sh)" -o $(BIN)/ \
		./cmd/podium ./cmd/podium-agent ./cmd/podium-coordinator ./cmd/podium-runner

# Every part the tests need (a Docker engine, Postgres 15's binaries, gcc for
# the race detector, Chromium, lintian and debootstrap, the Debian image the
# packaging test boots, versitygw), installed and started where missing; on a
# machine that has them it only looks. The tests run as root (some boot
# systemd in Docker, make network namespaces, mount), so a user who is not
# root is told to run `sudo make test`, before anything is built.
test-deps:
	@scripts/test-deps.sh

# The packages that drive real binaries, containers and Postgres clusters take
# minutes each; they are named first so that go test starts them first, and the
# quick ones fill the other core around them instead of ahead of them.
SLOW_TEST_PKGS := ./test/soak ./test/faults ./test/e2e ./test/packaging ./test/browser

# golangci-lint runs govet among its linters, so `make vet` is not run again
# here: on a fresh machine it is minutes of compiling for nothing new.
# `build` first: the test packages that drive the real binaries build them
# in their TestMain with `make build`'s flags, all at once, and concurrent go
# builds of the same packages each compile them; a warm cache leaves them
# only the linking.
# -ldflags '-s -w': the test binaries are linked without DWARF, which is a
# third of linking each of some seventy race-instrumented binaries; stack
# traces and race reports come from the runtime's own tables and keep their
# files and lines.
# -vet=off: `make lint` has just run all of go vet's analyzers (and more) on
# the same packages and their tests; go test's own subset would repeat a
# part of that over every package and its dependencies (some 280 vet runs).
# testreport runs go test -json and prints what go test alone would (each
# package's result as it comes, a failing test's whole output), then every
# skip and stand-in that ran and why; it exits with go test's status, or 1
# for a skip or stand-in that README.md's expected-skips section does not
# list. The test binaries are compiled first, running nothing (-run '^$'),
# with the flags of the run that follows, so that they come from the build
# cache: on a fresh machine compiling every package under -race is minutes of
# both cores, and done alongside the suites it starved their timed steps (a
# Postgres cluster's start, a fault row's window) into failing.
test: test-deps
	@$(MAKE) --no-print-directory build lint fuzz
	@$(GO) build -o $(BIN)/testreport ./test/testenv/testreport
	@echo "compiling the test binaries (-race), running nothing"
	@$(GO) test -count=1 -race -vet=off -ldflags '-s -w' -run '^$$' $(SLOW_TEST_PKGS) ./... >$(BIN)/test-build.log 2>&1 \
		|| { cat $(BIN)/test-build.log; exit 1; }
	$(BIN)/testreport -expected README.md -- \
		$(GO) test -json -count=1 -race -vet=off -ldflags '-s -w' -timeout 40m $(SLOW_TEST_PKGS) ./...

# The seeded chaos soak (test/soak, docs/operations.md "Soak"): the
# whole fleet under a mixed workload while faults are injected at random,
# then every invariant checked. `make test` runs it for 3 minutes; this
# runs it for SOAK_TIME. SOAK_SEED=N replays a run's choices (it prints
# its seed); SOAK_FAULTS=a,b narrows the fault kinds. SOAK_TIME is whole
# seconds, minutes or hours (90s, 30m, 1h); the timeout leaves 15 minutes
# past it for the fleet to start and settle and the checker to read it.
# SOAK_TIME is given to this recipe alone: `make test` keeps its 3 minutes.
SOAK_TIME ?= 10m
soak: build
	SOAK_TIME=$(SOAK_TIME) $(GO) test -race -count=1 -v -run TestSoak -timeout $$(( $$(echo '$(SOAK_TIME)' | sed -E 's/^([0-9]+)m$$/\1/; s/^([0-9]+)h$$/\1*60/; s/^([0-9]+)s$$/(\1+59)\/60/') + 15 ))m ./test/soak

# The fuzz targets, each run for FUZZTIME inputs past its seed corpus (the f.Add
# seeds and testdata/fuzz/ beside each package, committed; `go test` alone
# runs just those). They read what a person, a node or a task can hand
# Podium: a spec file, a spec from the API, a runner log the task can write
# into, a spool file a crash left, a log archive read back from the object
# store, a task id the agent makes a file name of. A failure writes the input to the
# package's testdata/fuzz/; commit it with the fix. The budget is a count of
# inputs, not a duration: go1.26's fuzz coordinator can report "context
# deadline exceeded" as a failure when a -fuzztime duration runs out while a
# worker is mid-input on a busy machine (golang/go#75804, fixed in go1.27),
# and a count has no deadline to race. `make fuzz FUZZTIME=10000000x`
# looks harder. -vet=off: go test's vet pass runs over every dependency of
# the package (for its cross-package facts), some 350 vet runs for one
# target here, and `make lint` runs vet's analyzers anyway.
FUZZTIME ?= 100000x
FUZZ_TARGETS := internal/taskspec:FuzzParse internal/taskspec:FuzzValidate agent/runlog:FuzzRead agent/spool:FuzzSpoolDecode agent/redact:FuzzStream coordinator/logarchive:FuzzDecode agent/attempt:FuzzFileName

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; \
		echo "fuzz: $$name in ./$$pkg for $(FUZZTIME)"; \
		$(GO) test -vet=off -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

# Benchmarks are programs, not timed tests: each prints its figures beside a
# reference measured in the same run on the same machine (docs in each program).
# churn pushes CHURN_TASKS tasks through the stack (an hour or more at 1,000,000
# on a small machine; `make bench CHURN_TASKS=20000` for a quick look).
CHURN_TASKS ?= 1000000
bench: build
	$(GO) run ./bench/heartbeats -coordinator $(BIN)/podium-coordinator
	$(GO) run ./bench/artifacts -coordinator $(BIN)/podium-coordinator
	$(GO) run ./bench/dispatch -coordinator $(BIN)/podium-coordinator
	$(GO) run ./bench/taskstart -bin $(BIN)
	$(GO) run ./bench/retention
	$(GO) run ./bench/churn -coordinator $(BIN)/podium-coordinator -tasks $(CHURN_TASKS)
	$(GO) run ./bench/failover -coordinator $(BIN)/podium-coordinator
	$(GO) run ./bench/ingest -coordinator $(BIN)/podium-coordinator -podium $(BIN)/podium

# The Go files people write. Generated code (*.pb.go, *.connect.go) is left
# as its generator wrote it: `make proto` owns it, and a reformat would only
# show up as a diff against the next regeneration.
GO_SOURCES = $(shell git ls-files '*.go' ':(exclude)*.pb.go' ':(exclude)*.connect.go')

vet:
	@unformatted=$$(gofmt -l $(GO_SOURCES)); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $(GO_SOURCES)

# .golangci.yml says which linters run and why each exclusion is there; its
# depguard rules keep test rigs out of production code and the agent and the
# coordinator out of each other.
# golangci-lint has the go command compile every dependency for its type
# information; with `make build`'s flags (static, -trimpath) that compiling is
# the same the binaries, the tests' binaries and the packages need, done once.
lint: golangci-lint
	CGO_ENABLED=0 GOFLAGS=-trimpath $(GOLANGCI_LINT) run ./...
	scripts/check-large-files.sh
	scripts/check-doc-paths.sh

golangci-lint:
	@$(GO) version -m $(GOLANGCI_LINT) 2>/dev/null | grep -Eq 'mod[[:space:]]+github.com/golangci/golangci-lint/v2[[:space:]]+$(GOLANGCI_LINT_VERSION)[[:space:]]' \
		|| CGO_ENABLED=0 GOBIN=$(GOBIN) $(GO) install -trimpath github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

proto:
	$(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	cd proto && PATH=$(GOBIN):$$PATH buf lint && PATH=$(GOBIN):$$PATH buf generate

# The generated references in docs/: the CLI's (docs/cli.md), from every
# command's own help, and the task spec's (docs/spec.md), from task.proto's
# comments. A test fails when a committed copy is stale.
docs:
	PODIUM_UPDATE_DOCS=1 $(GO) test -count=1 -run TestCLIReferenceIsCurrent ./cmd/podium
	PODIUM_UPDATE_DOCS=1 $(GO) test -count=1 -run TestSpecReferenceIsCurrent ./internal/taskspec

demo: build
	scripts/demo.sh

demo-stop:
	scripts/demo.sh stop

demo-reset:
	scripts/demo.sh reset

# On a GPU node, with the CLI pointed at the coordinator: a task asking GPUS
# GPUs sees exactly those its attempt was given (scripts/gpu-check.sh; CI has
# no GPU, README "GPUs").
GPUS ?= 1
gpu-check:
	scripts/gpu-check.sh $(GPUS)

clean:
	rm -rf $(BIN) dist

# Packaging (docs/operations.md). nfpm is pinned like the code generators and
# installed with `go install` when the one in $(GOBIN) is not this version.
NFPM_VERSION := v2.45.2
NFPM         := $(GOBIN)/nfpm
DIST         ?= dist
DEB_ARCHES   ?= amd64 arm64
# Worked out at most once per make run, so `deb` and `lint-deb` name the same
# file, and only when a packaging recipe expands it: the first expansion
# replaces this deferred definition with the script's answer. `make build` and
# `make test` never run scripts/deb-version.sh. Set on the command line or in
# the environment, it is used as given.
DEB_VERSION ?= $(eval DEB_VERSION := $$(shell scripts/deb-version.sh))$(DEB_VERSION)
# Tagged with git describe's VERSION: DEB_VERSION's "+" is not allowed in a tag.
IMAGE        ?= podium-coordinator:$(VERSION)

nfpm:
	@$(GO) version -m $(NFPM) 2>/dev/null | grep -Eq 'mod[[:space:]]+github.com/goreleaser/nfpm/v2[[:space:]]+$(NFPM_VERSION)[[:space:]]' \
		|| CGO_ENABLED=0 GOBIN=$(GOBIN) $(GO) install -trimpath github.com/goreleaser/nfpm/v2/cmd/nfpm@$(NFPM_VERSION)

# podium-agent_<version>_<arch>.deb and podium_<version>_<arch>.deb (the CLI)
# for each of DEB_ARCHES, in $(DIST)/.
deb: nfpm
	@for arch in $(DEB_ARCHES); do for pkg in podium-agent podium; do \
		GO=$(GO) NFPM=$(NFPM) DIST=$(DIST) VERSION=$(VERSION) DEB_VERSION=$(DEB_VERSION) \
			scripts/build-deb.sh $$arch $$pkg || exit 1; \
	done; done

# lintian must be clean; the overrides in packaging/deb/lintian-overrides say
# why each one is there.
lint-deb: deb
	scripts/lint-deb.sh $(foreach a,$(DEB_ARCHES),$(foreach p,podium-agent podium,$(DIST)/$(p)_$(DEB_VERSION)-1_$(a).deb))

# The coordinator's container image, FROM scratch, for this machine's
# architecture: make image IMAGE=registry.example/podium-coordinator:1.2.3
# The image carries the agent's and the CLI's .debs, and the CLI's binaries,
# of its version (DEB_ARCHES), which the coordinator serves as its apt
# repository and at /download/, so it needs nfpm too.
image: nfpm
	GO=$(GO) NFPM=$(NFPM) VERSION=$(VERSION) DEB_VERSION=$(DEB_VERSION) DEB_ARCHES="$(DEB_ARCHES)" \
		scripts/build-coordinator-image.sh $(IMAGE)

# The acceptance test of the packaging alone (`make test` runs it too): the
# coordinator image serving its signed apt repository, the agent installed
# from it with /install.sh in Debian with systemd as PID 1, a task through
# both, and `apt-get upgrade` to the next version's coordinator.
# scripts/ensure-packaging.sh installs what it needs.
packaging-test:
	$(GO) test -count=1 -v -timeout 20m ./test/packaging/

