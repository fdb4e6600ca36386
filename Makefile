# Podium. `make demo` runs the whole thing on this machine; `make test` runs the tests.
GO       ?= go
BIN      := bin
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w
GOBIN    := $(shell $(GO) env GOPATH)/bin

# Code generators, pinned; `make proto` installs them with `go install`.
BUF_VERSION                  := v1.50.0
PROTOC_GEN_GO_VERSION        := v1.36.6
PROTOC_GEN_CONNECT_GO_VERSION := v1.18.1

.PHONY: all build test vet fmt proto demo demo-stop clean bench

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS) -X main.version=$(VERSION)' -o $(BIN)/ \
		./cmd/podium ./cmd/podium-agent ./cmd/podium-coordinator ./cmd/podium-runner

# The tests need a Docker engine and Postgres 15 binaries; .ci/run installs and
# starts them on a fresh machine (see README).
test: vet
	$(GO) test -count=1 -timeout 40m ./...

# Benchmarks are programs, not timed tests: each prints its figures beside a
# reference measured in the same run on the same machine (docs in each program).
bench: build
	$(GO) run ./internal/bench/heartbeats -coordinator $(BIN)/podium-coordinator
	$(GO) run ./internal/bench/artifacts -coordinator $(BIN)/podium-coordinator

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$' | grep -v '\.connect\.go$$')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

proto:
	$(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	$(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	$(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	cd proto && PATH=$(GOBIN):$$PATH buf lint && PATH=$(GOBIN):$$PATH buf generate

demo: build
	scripts/demo.sh

demo-stop:
	scripts/demo.sh stop

clean:
	rm -rf $(BIN) dist
